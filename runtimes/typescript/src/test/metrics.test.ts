/** Unit tests of the runtime's Prometheus metrics: what queues and worker pools count, and
 * the text format they are written in. */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../clock";
import { Metrics, formatValue } from "../metrics";
import { type Result, TerminalError } from "../reconcile";
import { WorkerPool } from "../workers";
import { WorkQueue } from "../workqueue";

/** The text parsed into `name{labels}` → value, checking that every sample follows its
 * family's HELP and TYPE lines; also the TYPE of each family. */
function scrape(metrics: Metrics): { values: Map<string, number>; types: Map<string, string> } {
  const values = new Map<string, number>();
  const types = new Map<string, string>();
  const helped = new Set<string>();
  const text = metrics.text();
  assert.ok(text.endsWith("\n"));
  for (const line of text.trimEnd().split("\n")) {
    if (line.startsWith("# HELP ")) {
      helped.add(line.split(" ")[2]!);
      continue;
    }
    if (line.startsWith("# TYPE ")) {
      const [, , name, kind] = line.split(" ");
      types.set(name!, kind!);
      continue;
    }
    const i = line.lastIndexOf(" ");
    const series = line.slice(0, i);
    const value = Number(line.slice(i + 1));
    assert.ok(!Number.isNaN(value), `not a sample: ${line}`);
    let base = series.split("{")[0]!;
    for (const suffix of ["_bucket", "_sum", "_count"]) {
      const b = base.slice(0, -suffix.length);
      if (base.endsWith(suffix) && types.get(b) === "histogram") base = b;
    }
    assert.ok(helped.has(base) && types.has(base), `${line} comes before its family's HELP and TYPE`);
    values.set(series, value);
  }
  return { values, types };
}

async function eventually(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500; i += 1) {
    if (check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.fail(`timed out waiting for ${what}`);
}

describe("metrics", () => {
  it("counts a pool's reconciles by result and its queue's adds, retries and durations", async () => {
    const metrics = new Metrics();
    const seen = new Map<string, number>();
    const pool = new WorkerPool(
      "pool",
      {
        reconcile: async (request): Promise<Result | void> => {
          const n = (seen.get(request.name) ?? 0) + 1;
          seen.set(request.name, n);
          if (request.name === "flaky" && n < 3) throw new Error("not yet");
          if (request.name === "terminal") throw new TerminalError("bad spec");
          if (request.name === "later" && n === 1) return { requeueAfter: 10 };
          if (request.name === "again" && n === 1) return { requeue: true };
          return undefined;
        },
      },
      undefined,
      { maxConcurrentReconciles: 2, metrics },
    );
    const running = pool.run();
    for (const name of ["flaky", "terminal", "later", "again", "fine"]) pool.queue.add(name);
    const total = (): number => Object.values(pool.status().reconciles).reduce((a, b) => a + b, 0);
    // flaky 3, terminal 1, later 2, again 2, fine 1.
    await eventually(() => total() === 9, "every reconcile");
    await pool.stop();
    await running;

    const { values, types } = scrape(metrics);
    const want: Record<string, number> = {
      'controller_runtime_reconcile_total{controller="pool",result="success"}': 4,
      'controller_runtime_reconcile_total{controller="pool",result="error"}': 3,
      'controller_runtime_reconcile_total{controller="pool",result="requeue"}': 1,
      'controller_runtime_reconcile_total{controller="pool",result="requeue_after"}': 1,
      'controller_runtime_reconcile_errors_total{controller="pool"}': 3,
      'controller_runtime_terminal_reconcile_errors_total{controller="pool"}': 1,
      'controller_runtime_reconcile_time_seconds_count{controller="pool"}': 9,
      'controller_runtime_reconcile_time_seconds_bucket{controller="pool",le="+Inf"}': 9,
      'controller_runtime_active_workers{controller="pool"}': 0,
      'controller_runtime_max_concurrent_reconciles{controller="pool"}': 2,
      // Five adds, then one each for flaky's two retries, later and again.
      'workqueue_adds_total{name="pool"}': 9,
      'workqueue_retries_total{name="pool"}': 4,
      'workqueue_depth{name="pool"}': 0,
      'workqueue_queue_duration_seconds_count{name="pool"}': 9,
      'workqueue_work_duration_seconds_count{name="pool"}': 9,
      'workqueue_unfinished_work_seconds{name="pool"}': 0,
      'workqueue_longest_running_processor_seconds{name="pool"}': 0,
    };
    for (const [series, value] of Object.entries(want)) assert.equal(values.get(series), value, series);
    const kinds: Record<string, string> = {
      workqueue_depth: "gauge",
      workqueue_adds_total: "counter",
      workqueue_queue_duration_seconds: "histogram",
      workqueue_work_duration_seconds: "histogram",
      workqueue_retries_total: "counter",
      workqueue_unfinished_work_seconds: "gauge",
      workqueue_longest_running_processor_seconds: "gauge",
      controller_runtime_reconcile_total: "counter",
      controller_runtime_reconcile_errors_total: "counter",
      controller_runtime_terminal_reconcile_errors_total: "counter",
      controller_runtime_reconcile_time_seconds: "histogram",
      controller_runtime_active_workers: "gauge",
      controller_runtime_max_concurrent_reconciles: "gauge",
    };
    for (const [name, kind] of Object.entries(kinds)) assert.equal(types.get(name), kind, name);
    // controller-runtime's buckets, as the Python runtime writes them.
    for (const le of ["1e-08", "1e-07", "1e-05", "0.0001", "0.001", "1", "1000"]) {
      assert.ok(values.has(`workqueue_queue_duration_seconds_bucket{name="pool",le="${le}"}`), `le=${le}`);
    }
    for (const le of ["0.005", "1.25", "60"]) {
      assert.ok(values.has(`controller_runtime_reconcile_time_seconds_bucket{controller="pool",le="${le}"}`), `le=${le}`);
    }
  });

  it("reports a queue's depth and work in progress until it is shut down and idle", () => {
    const clock = new FakeClock(1000);
    const metrics = new Metrics(clock);
    const q = new WorkQueue({ name: "q", metrics, clock });
    const unnamed = new WorkQueue({ metrics, clock });
    unnamed.add("x");
    q.add("a");
    q.add("a"); // coalesces: not an add
    q.add("b");
    let v = scrape(metrics).values;
    assert.equal(v.get('workqueue_depth{name="q"}'), 2);
    assert.equal(v.get('workqueue_adds_total{name="q"}'), 2);
    assert.ok(!v.has('workqueue_depth{name=""}'), "an unnamed queue records nothing");

    clock.advance(2000);
    const a = q.getNow()!;
    clock.advance(1000);
    const b = q.getNow()!;
    clock.advance(4000);
    v = scrape(metrics).values;
    // a has run for 5 s, b for 4 s; they waited 2 s and 3 s.
    assert.equal(v.get('workqueue_unfinished_work_seconds{name="q"}'), 9);
    assert.equal(v.get('workqueue_longest_running_processor_seconds{name="q"}'), 5);
    assert.equal(v.get('workqueue_depth{name="q"}'), 0);
    assert.equal(v.get('workqueue_queue_duration_seconds_sum{name="q"}'), 5);

    q.done(a.key);
    v = scrape(metrics).values;
    assert.equal(v.get('workqueue_work_duration_seconds_sum{name="q"}'), 5);
    assert.equal(v.get('workqueue_work_duration_seconds_bucket{name="q",le="1"}'), 0);
    assert.equal(v.get('workqueue_work_duration_seconds_bucket{name="q",le="10"}'), 1);

    // Shut down with c still queued and b in flight: counted until b is done.
    q.add("c");
    q.shutDown();
    v = scrape(metrics).values;
    assert.equal(v.get('workqueue_depth{name="q"}'), 1);
    assert.equal(v.get('workqueue_longest_running_processor_seconds{name="q"}'), 4);
    q.done(b.key);
    v = scrape(metrics).values;
    assert.equal(v.get('workqueue_depth{name="q"}'), 0);
    assert.equal(v.get('workqueue_unfinished_work_seconds{name="q"}'), 0);
    assert.equal(v.get('workqueue_adds_total{name="q"}'), 3);

    // A new queue of the same name adds to the same series.
    const q2 = new WorkQueue({ name: "q", metrics, clock });
    q2.addAfter("d", 3_600_000);
    q2.add("e");
    v = scrape(metrics).values;
    assert.equal(v.get('workqueue_adds_total{name="q"}'), 4);
    assert.equal(v.get('workqueue_retries_total{name="q"}'), 1);
    assert.equal(v.get('workqueue_depth{name="q"}'), 1);
    q2.shutDown();
    unnamed.shutDown();
  });

  it("writes numbers as Go's client library does", () => {
    const cases: [number, string][] = [
      [0, "0"], [1, "1"], [0.5, "0.5"], [1e-8, "1e-08"], [0.0001, "0.0001"], [123456, "123456"],
      [1_500_000, "1.5e+06"], [-2e-7, "-2e-07"], [1e21, "1e+21"], [Infinity, "+Inf"], [NaN, "NaN"],
    ];
    for (const [value, text] of cases) assert.equal(formatValue(value), text, String(value));
  });

  it("escapes label values", () => {
    const metrics = new Metrics();
    metrics.controller('a"b\\c\nd');
    assert.match(metrics.text(), /^controller_runtime_active_workers\{controller="a\\"b\\\\c\\nd"\} 0$/m);
  });
});
