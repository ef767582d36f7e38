/**
 * Unit tests of the client-side rate limit: the token bucket every request of a KubeClient
 * waits on (--kube-api-qps, --kube-api-burst), on a fake clock that only its sleeps move.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { FakeClock } from "../clock";
import { RATE_LIMITER_BUCKETS_S, RequestRateLimiter } from "../flowcontrol";
import { FencedError, type KubeClient } from "../kube";
import { Arrivals } from "./arrivals";

const CM_PATH = "/api/v1/namespaces/default/configmaps/c";

/** A fake clock and a sleep that records each wait and moves the clock by it at once. */
function fakeTime(): { clock: FakeClock; sleeps: number[]; sleep: (ms: number) => Promise<void>; during?: () => void } {
  const clock = new FakeClock(1_000);
  const t = {
    clock,
    sleeps: [] as number[],
    during: undefined as (() => void) | undefined,
    sleep: (ms: number): Promise<void> => {
      t.sleeps.push(ms);
      clock.advance(ms);
      t.during?.();
      return Promise.resolve();
    },
  };
  return t;
}

describe("RequestRateLimiter", () => {
  it("lets the burst go at once, then paces at qps, in the order asked", async () => {
    const t = fakeTime();
    const limiter = new RequestRateLimiter(20, 30, t);
    const waited: number[] = [];
    for (let i = 0; i < 32; i += 1) waited.push(await limiter.wait("GET"));
    // 30 at once; at 20 a second each further one waits 50 ms (after the one before).
    assert.deepEqual(waited.slice(0, 30), Array(30).fill(0));
    assert.deepEqual(t.sleeps, [50, 50]);
    assert.deepEqual(waited.slice(30), [50, 50]);
  });

  it("reserves tokens for callers that ask at once: each waits one token longer", async () => {
    const t = fakeTime();
    const asked: number[] = [];
    const limiter = new RequestRateLimiter(10, 2, { clock: t.clock, sleep: (ms) => (asked.push(ms), Promise.resolve()) });
    await Promise.all([1, 2, 3, 4, 5].map(() => limiter.wait("PATCH")));
    assert.deepEqual(asked, [100, 200, 300]);
  });

  it("refills at qps up to the burst while idle", async () => {
    const t = fakeTime();
    const limiter = new RequestRateLimiter(10, 5, t);
    for (let i = 0; i < 5; i += 1) await limiter.wait("GET");
    t.clock.advance(300); // three tokens back
    for (let i = 0; i < 3; i += 1) await limiter.wait("GET");
    assert.deepEqual(t.sleeps, []);
    await limiter.wait("GET");
    assert.deepEqual(t.sleeps, [100]);
    t.clock.advance(3_600_000); // an hour: the bucket holds 5, not 36 000
    for (let i = 0; i < 5; i += 1) await limiter.wait("GET");
    await limiter.wait("GET");
    assert.deepEqual(t.sleeps, [100, 100]);
  });

  it("keeps the waits by verb, as a histogram in seconds", async () => {
    const t = fakeTime();
    const limiter = new RequestRateLimiter(10, 1, t);
    await limiter.wait("PUT");
    await limiter.wait("GET"); // 100 ms
    await limiter.wait("GET"); // 100 ms
    const [get, put] = limiter.waits();
    assert.equal(get?.verb, "GET");
    assert.equal(put?.verb, "PUT");
    assert.deepEqual(get?.bounds, RATE_LIMITER_BUCKETS_S);
    assert.equal(get?.count, 2);
    assert.ok(Math.abs((get?.sum ?? 0) - 0.2) < 1e-9);
    // Cumulative: none within 25 ms, both within 100 ms and beyond.
    assert.deepEqual(get?.counts.slice(0, 4), [0, 0, 2, 2]);
    assert.equal(get?.counts.at(-1), 2);
    assert.deepEqual([put?.count, put?.sum, put?.counts[0]], [1, 0, 1]);
  });

  it("refuses a qps that is no limit and a burst below 1", () => {
    for (const [qps, burst] of [[0, 1], [-1, 1], [Infinity, 1], [NaN, 1], [1, 0], [1, 1.5]] as const) {
      assert.throws(() => new RequestRateLimiter(qps, burst), RangeError, `${qps}, ${burst}`);
    }
  });
});

describe("KubeClient with a rate limiter", () => {
  const arrivals = new Arrivals();
  before(() => arrivals.start());
  after(() => arrivals.stop());
  const seen = arrivals.seen;
  const url = (): string => arrivals.url;

  function client(limiter: RequestRateLimiter, fence?: () => boolean): KubeClient {
    return arrivals.client({ rateLimiter: limiter, ...(fence ? { fence } : {}) });
  }

  it("waits for a token before every request, and reports the waits with the server's host", async () => {
    seen.length = 0;
    const t = fakeTime();
    const api = client(new RequestRateLimiter(10, 2, t));
    try {
      assert.equal(api.rateLimited, true);
      for (let i = 0; i < 4; i += 1) await api.request("GET", CM_PATH);
      await api.request("patch", CM_PATH, {}, "application/merge-patch+json");
      assert.equal(seen.length, 5);
      assert.deepEqual(t.sleeps, [100, 100, 100]);
      const waits = api.rateLimiterWaits();
      assert.deepEqual(
        waits.map((w) => [w.verb, w.host, w.count]),
        [["GET", new URL(url()).host, 4], ["PATCH", new URL(url()).host, 1]],
      );
    } finally {
      api.close();
    }
  });

  it("asks the fence after the wait: a lease lost while waiting sends nothing", async () => {
    seen.length = 0;
    const t = fakeTime();
    let holds = true;
    const api = client(new RequestRateLimiter(10, 1, t), () => holds);
    try {
      await api.request("PUT", CM_PATH, {});
      t.during = () => {
        holds = false;
      };
      await assert.rejects(api.request("PUT", CM_PATH, {}), FencedError);
      assert.deepEqual(seen, [`PUT ${CM_PATH}`]);
    } finally {
      api.close();
    }
  });

  it("has no limit without a limiter", async () => {
    const api = arrivals.client();
    assert.equal(api.rateLimited, false);
    assert.deepEqual(api.rateLimiterWaits(), []);
    api.close();
  });
});
