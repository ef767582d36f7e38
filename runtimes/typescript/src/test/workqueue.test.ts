/** Unit tests of the work queue and rate limiters (client-go's semantics, fake clock). */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../clock";
import { ItemExponentialBackoff, MaxOf, TokenBucket, defaultControllerRateLimiter } from "../ratelimit";
import { WorkQueue } from "../workqueue";

const tp = (n: number): { traceparent: string } => ({
  traceparent: `00-${n.toString(16).padStart(32, "0")}-${"1".padStart(16, "0")}-01`,
});

describe("rate limiters", () => {
  it("backs off 5 ms doubling per item, capped at 1000 s, forgotten on success", () => {
    const b = new ItemExponentialBackoff<string>();
    assert.deepEqual([b.when("a"), b.when("a"), b.when("a"), b.when("b")], [5, 10, 20, 5]);
    assert.equal(b.numRequeues("a"), 3);
    for (let i = 0; i < 40; i++) b.when("a");
    assert.equal(b.when("a"), 1_000_000);
    b.forget("a");
    assert.equal(b.numRequeues("a"), 0);
    assert.equal(b.when("a"), 5);
  });

  it("token bucket: burst 100 free, then 100 ms per token at 10 qps", () => {
    const clock = new FakeClock();
    const t = new TokenBucket<string>(10, 100, clock);
    for (let i = 0; i < 100; i++) assert.equal(t.when("x"), 0);
    assert.ok(Math.abs(t.when("x") - 100) < 1e-9);
    assert.ok(Math.abs(t.when("x") - 200) < 1e-9);
    clock.advance(100); // one token back, one more reserved: still two behind
    assert.ok(Math.abs(t.when("x") - 200) < 1e-9);
    clock.advance(10_000); // refilled to the burst
    assert.equal(t.when("x"), 0);
  });

  it("the default combines both: max delay, max count", () => {
    const clock = new FakeClock();
    const limiter = defaultControllerRateLimiter<string>(clock);
    assert.ok(limiter instanceof MaxOf);
    assert.equal(limiter.when("k"), 5);
    assert.equal(limiter.when("k"), 10);
    assert.equal(limiter.numRequeues("k"), 2);
    limiter.forget("k");
    assert.equal(limiter.numRequeues("k"), 0);
  });
});

describe("work queue", () => {
  it("dedupes a key queued twice and keeps both trace contexts in order", () => {
    const q = new WorkQueue();
    q.add("a", tp(1));
    q.add("b");
    q.add("a", tp(2));
    assert.equal(q.length, 2);
    const item = q.getNow();
    assert.equal(item?.key, "a");
    assert.deepEqual(
      item?.contexts.map((c) => c.traceparent),
      [tp(1).traceparent, tp(2).traceparent],
    );
    assert.equal(q.getNow()?.key, "b");
    assert.equal(q.getNow(), null);
  });

  it("keeps at most 32 contexts per item and counts the rest", () => {
    const q = new WorkQueue();
    for (let i = 0; i < 40; i++) q.add("a", tp(i + 1));
    const item = q.getNow()!;
    assert.equal(item.contexts.length, 32);
    assert.equal(item.droppedContexts, 8);
    assert.equal(item.contexts[0]?.traceparent, tp(1).traceparent);
  });

  it("never hands out a key being processed; re-adds it once when done", () => {
    const q = new WorkQueue();
    q.add("a", tp(1));
    const first = q.getNow()!;
    q.add("a", tp(2));
    q.add("a", tp(3));
    assert.equal(q.getNow(), null, "a is being processed");
    assert.equal(q.processing, 1);
    q.done(first.key);
    const again = q.getNow()!;
    assert.equal(again.key, "a");
    assert.deepEqual(
      again.contexts.map((c) => c.traceparent),
      [tp(2).traceparent, tp(3).traceparent],
    );
    q.done("a");
    assert.equal(q.getNow(), null);
  });

  it("addAfter waits for the ready time; the earliest of two wins", () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter("a", 100, tp(1));
    q.addAfter("a", 50, tp(2));
    assert.equal(q.length, 0);
    assert.equal(q.waiting, 1);
    clock.advance(49);
    assert.equal(q.length, 0);
    clock.advance(1);
    const item = q.getNow()!;
    assert.equal(item.key, "a");
    assert.equal(item.contexts.length, 2);
    q.shutDown();
  });

  it("rate-limited adds back off per key; forget starts over", () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addRateLimited("a");
    q.addRateLimited("a"); // while waiting: 10 ms asked, 5 ms kept
    assert.equal(q.numRequeues("a"), 2);
    clock.advance(5);
    assert.equal(q.getNow()?.key, "a");
    q.done("a");
    q.addRateLimited("a");
    clock.advance(19);
    assert.equal(q.length, 0, "third retry waits 20 ms");
    clock.advance(1);
    assert.equal(q.length, 1);
    q.forget("a");
    assert.equal(q.numRequeues("a"), 0);
    q.shutDown();
  });

  it("get waits for an add; shutdown hands out what is left, then null", async () => {
    const q = new WorkQueue();
    const waiting = q.get();
    q.add("x");
    assert.equal((await waiting)?.key, "x");
    q.add("y");
    q.shutDown();
    q.add("z"); // ignored
    assert.equal((await q.get())?.key, "y");
    assert.equal(await q.get(), null);
  });

  it("a delayed add becomes ready through the timer", async () => {
    const q = new WorkQueue();
    q.addAfter("later", 20);
    const item = await q.get();
    assert.equal(item?.key, "later");
    q.shutDown();
  });

  it("shutDownWithDrain waits for items being processed", async () => {
    const q = new WorkQueue();
    q.add("a");
    const item = q.getNow()!;
    let drained = false;
    const drain = q.shutDownWithDrain().then(() => (drained = true));
    await new Promise((r) => setImmediate(r));
    assert.equal(drained, false);
    q.done(item.key);
    await drain;
    assert.equal(drained, true);
  });
});
