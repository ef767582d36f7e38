/**
 * Prometheus metrics of the runtime, under client-go's and controller-runtime's names, with
 * the Python runtime's (`steward.runtime.metrics`) names, labels, help texts and buckets,
 * written in the Prometheus text format (version 0.0.4) without a client library.
 *
 * Work queue metrics carry the label `name` (the queue's name); controller metrics carry
 * `controller`. Every named {@link WorkQueue} and every {@link WorkerPool} reports to a
 * {@link Metrics}: the one their options name, else {@link defaultMetrics}. Queues and pools
 * of the same name add up.
 */

import { type Clock, MonotonicClock } from "./clock";

/** The values of `controller_runtime_reconcile_total`'s `result` label. A terminal error is
 * counted as `error` there (and in `controller_runtime_terminal_reconcile_errors_total`). */
export const RECONCILE_RESULTS = ["success", "error", "requeue", "requeue_after"] as const;

/** controller-runtime's work queue buckets: 10 ns up to 1000 s, by factors of ten. */
const QUEUE_BUCKETS: readonly number[] = Array.from({ length: 12 }, (_, i) => 10e-9 * 10 ** i);

/** controller-runtime's `reconcile_time_seconds` buckets. */
const RECONCILE_BUCKETS: readonly number[] = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25,
  1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];

type Kind = "counter" | "gauge" | "histogram";

/** A label value escaped for the text format. */
export function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/**
 * A sample value (or `le` bound) as the text format writes it, the way Go's client library
 * does (`strconv.FormatFloat(v, 'g', -1, 64)`): the shortest digits, in exponent form below
 * 1e-4 and from 1e6 up (`1e-08`, `1.5e+06`).
 */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  if (value === 0) return "0";
  const [mantissa, e] = value.toExponential().split("e") as [string, string];
  const exp = Number(e);
  if (exp >= -4 && exp < 6) return String(value);
  return `${mantissa}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}

/** `# HELP` and `# TYPE` lines of a family. */
export function familyHeader(name: string, kind: Kind, help: string): string[] {
  return [`# HELP ${name} ${help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}`, `# TYPE ${name} ${kind}`];
}

/** One sample line; `labels` alternates names and values. */
export function sampleLine(name: string, value: number, labels: readonly string[] = []): string {
  const pairs: string[] = [];
  for (let i = 0; i + 1 < labels.length; i += 2) pairs.push(`${labels[i]}="${escapeLabel(labels[i + 1]!)}"`);
  return `${name}${pairs.length > 0 ? `{${pairs.join(",")}}` : ""} ${formatValue(value)}`;
}

/** The lines of one labelled histogram: cumulative counts by bound, +Inf, sum and count. */
export function histogramLines(
  name: string,
  bounds: readonly number[],
  cumulative: readonly number[],
  sum: number,
  count: number,
  labels: readonly string[] = [],
): string[] {
  const lines = bounds.map((bound, i) =>
    sampleLine(`${name}_bucket`, cumulative[i] ?? 0, [...labels, "le", formatValue(bound)]),
  );
  lines.push(
    sampleLine(`${name}_bucket`, count, [...labels, "le", "+Inf"]),
    sampleLine(`${name}_sum`, sum, labels),
    sampleLine(`${name}_count`, count, labels),
  );
  return lines;
}

/** One labelled series: a value, or a histogram's per-bucket counts, sum and count. */
class Series {
  value = 0;
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(
    readonly labels: readonly string[],
    buckets: number,
  ) {
    this.counts = new Array<number>(buckets).fill(0);
  }
}

/** One metric family: name, type, help, label names, and its series by label values. */
class Family {
  private readonly series = new Map<string, Series>();

  constructor(
    readonly name: string,
    readonly kind: Kind,
    readonly help: string,
    readonly labelNames: readonly string[],
    readonly bounds: readonly number[] = [],
  ) {}

  /** The series of these label values, made (at zero) on first use. */
  with(...values: string[]): Series {
    const key = values.join("\u0000");
    let s = this.series.get(key);
    if (s === undefined) {
      s = new Series(values, this.bounds.length);
      this.series.set(key, s);
    }
    return s;
  }

  observe(s: Series, value: number): void {
    const i = this.bounds.findIndex((bound) => value <= bound);
    if (i >= 0) s.counts[i] = (s.counts[i] ?? 0) + 1;
    s.sum += value;
    s.count += 1;
  }

  lines(): string[] {
    const out = familyHeader(this.name, this.kind, this.help);
    for (const s of this.series.values()) {
      const labels = this.labelNames.flatMap((n, i) => [n, s.labels[i]!]);
      if (this.kind !== "histogram") {
        out.push(sampleLine(this.name, s.value, labels));
        continue;
      }
      let n = 0;
      const cumulative = s.counts.map((c) => (n += c));
      out.push(...histogramLines(this.name, this.bounds, cumulative, s.sum, s.count, labels));
    }
    return out;
  }
}

/**
 * The runtime's metric families (the `workqueue_*` and `controller_runtime_*` ones) for the
 * queues and worker pools that report to it, written by {@link Metrics.text}. `clock` (ms)
 * times queue and work durations; defaults to the monotonic clock.
 */
export class Metrics {
  readonly clock: Clock;
  private readonly depth = new Family("workqueue_depth", "gauge", "Current depth of the work queue.", ["name"]);
  private readonly adds = new Family(
    "workqueue_adds_total",
    "counter",
    "Total number of adds handled by the work queue.",
    ["name"],
  );
  private readonly queueDuration = new Family(
    "workqueue_queue_duration_seconds",
    "histogram",
    "How long in seconds an item stays in the work queue before being requested.",
    ["name"],
    QUEUE_BUCKETS,
  );
  private readonly workDuration = new Family(
    "workqueue_work_duration_seconds",
    "histogram",
    "How long in seconds processing an item from the work queue takes.",
    ["name"],
    QUEUE_BUCKETS,
  );
  private readonly retries = new Family(
    "workqueue_retries_total",
    "counter",
    "Total number of retries (delayed and rate-limited adds) handled by the work queue.",
    ["name"],
  );
  private readonly reconcileTotal = new Family(
    "controller_runtime_reconcile_total",
    "counter",
    "Total number of reconciliations per controller, by result.",
    ["controller", "result"],
  );
  private readonly reconcileErrors = new Family(
    "controller_runtime_reconcile_errors_total",
    "counter",
    "Total number of reconciliation errors per controller.",
    ["controller"],
  );
  private readonly terminalErrors = new Family(
    "controller_runtime_terminal_reconcile_errors_total",
    "counter",
    "Total number of terminal reconciliation errors (not retried) per controller.",
    ["controller"],
  );
  private readonly reconcileTime = new Family(
    "controller_runtime_reconcile_time_seconds",
    "histogram",
    "Length of time per reconciliation per controller.",
    ["controller"],
    RECONCILE_BUCKETS,
  );
  private readonly activeWorkers = new Family(
    "controller_runtime_active_workers",
    "gauge",
    "Number of currently used workers per controller.",
    ["controller"],
  );
  private readonly maxConcurrentReconciles = new Family(
    "controller_runtime_max_concurrent_reconciles",
    "gauge",
    "Maximum number of concurrent reconciles per controller.",
    ["controller"],
  );
  private readonly queueNames = new Set<string>();
  private readonly liveQueues = new Set<QueueMetrics>();

  constructor(clock: Clock = new MonotonicClock()) {
    this.clock = clock;
  }

  /**
   * Metrics of a new queue called `name`. It counts in the families until
   * {@link QueueMetrics.release}; its depth and work in progress stop counting then, its
   * adds, retries and durations stay.
   */
  queue(name: string): QueueMetrics {
    if (!this.queueNames.has(name)) {
      this.queueNames.add(name);
      for (const f of [this.depth, this.adds, this.queueDuration, this.workDuration, this.retries]) f.with(name);
    }
    const q = new QueueMetrics(name, this.clock, {
      add: () => {
        this.adds.with(name).value += 1;
      },
      queued: (seconds) => this.queueDuration.observe(this.queueDuration.with(name), seconds),
      worked: (seconds) => this.workDuration.observe(this.workDuration.with(name), seconds),
      retry: () => {
        this.retries.with(name).value += 1;
      },
      release: (self) => this.liveQueues.delete(self),
    });
    this.liveQueues.add(q);
    return q;
  }

  /** Metrics of the worker pools of the controller called `name`; every result starts at 0. */
  controller(name: string): ControllerMetrics {
    for (const result of RECONCILE_RESULTS) this.reconcileTotal.with(name, result);
    for (const f of [
      this.reconcileErrors,
      this.terminalErrors,
      this.reconcileTime,
      this.activeWorkers,
      this.maxConcurrentReconciles,
    ]) {
      f.with(name);
    }
    return new ControllerMetrics({
      reconciled: (result, terminal, seconds) => {
        this.reconcileTotal.with(name, result).value += 1;
        if (result === "error") this.reconcileErrors.with(name).value += 1;
        if (terminal) this.terminalErrors.with(name).value += 1;
        this.reconcileTime.observe(this.reconcileTime.with(name), seconds);
      },
      active: (delta) => {
        this.activeWorkers.with(name).value += delta;
      },
      maxConcurrent: (n) => {
        this.maxConcurrentReconciles.with(name).value = n;
      },
    });
  }

  /**
   * Every family now, in the Prometheus text format (version 0.0.4): the work queues' first,
   * then the controllers'. Depth and work in progress are summed over the live queues of
   * each name. A family without series is written with its HELP and TYPE lines only.
   */
  text(): string {
    const now = this.clock.now();
    const byName = new Map<string, { depth: number; unfinished: number; longest: number }>();
    for (const name of this.queueNames) byName.set(name, { depth: 0, unfinished: 0, longest: 0 });
    for (const q of this.liveQueues) {
      const f = byName.get(q.name)!;
      f.depth += q.depth;
      for (const started of q.startedAt.values()) {
        const age = Math.max(0, now - started) / 1000;
        f.unfinished += age;
        f.longest = Math.max(f.longest, age);
      }
    }
    for (const [name, f] of byName) this.depth.with(name).value = f.depth;
    const lines: string[] = [];
    for (const f of [this.depth, this.adds, this.queueDuration, this.workDuration, this.retries]) {
      lines.push(...f.lines());
    }
    lines.push(
      ...familyHeader(
        "workqueue_unfinished_work_seconds",
        "gauge",
        "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads.",
      ),
    );
    for (const [name, f] of byName) lines.push(sampleLine("workqueue_unfinished_work_seconds", f.unfinished, ["name", name]));
    lines.push(
      ...familyHeader(
        "workqueue_longest_running_processor_seconds",
        "gauge",
        "How many seconds the longest running processor for the work queue has been running.",
      ),
    );
    for (const [name, f] of byName) {
      lines.push(sampleLine("workqueue_longest_running_processor_seconds", f.longest, ["name", name]));
    }
    for (const f of [
      this.reconcileTotal,
      this.reconcileErrors,
      this.terminalErrors,
      this.reconcileTime,
      this.activeWorkers,
      this.maxConcurrentReconciles,
    ]) {
      lines.push(...f.lines());
    }
    return `${lines.join("\n")}\n`;
  }
}

interface QueueSink {
  add(): void;
  queued(seconds: number): void;
  worked(seconds: number): void;
  retry(): void;
  release(q: QueueMetrics): void;
}

/**
 * What one work queue reports, as client-go's queue does: {@link add} when an item becomes
 * dirty, {@link get} when it is handed out, {@link done} when it is finished, {@link retry}
 * for a delayed or rate-limited add. Made by {@link Metrics.queue}.
 */
export class QueueMetrics {
  /** Items added and not yet handed out. */
  depth = 0;
  private readonly addedAt = new Map<string, number>();
  /** Items being processed, and since when (clock ms). */
  readonly startedAt = new Map<string, number>();

  constructor(
    readonly name: string,
    private readonly clock: Clock,
    private readonly sink: QueueSink,
  ) {}

  add(item: string): void {
    this.sink.add();
    this.depth += 1;
    if (!this.addedAt.has(item)) this.addedAt.set(item, this.clock.now());
  }

  get(item: string): void {
    const now = this.clock.now();
    this.depth -= 1;
    this.startedAt.set(item, now);
    const added = this.addedAt.get(item);
    if (added !== undefined) {
      this.addedAt.delete(item);
      this.sink.queued(Math.max(0, now - added) / 1000);
    }
  }

  done(item: string): void {
    const started = this.startedAt.get(item);
    if (started !== undefined) {
      this.startedAt.delete(item);
      this.sink.worked(Math.max(0, this.clock.now() - started) / 1000);
    }
  }

  retry(): void {
    this.sink.retry();
  }

  /** Stop counting the queue's depth and work in progress (it is shut down and idle). */
  release(): void {
    this.sink.release(this);
  }
}

interface ControllerSink {
  reconciled(result: (typeof RECONCILE_RESULTS)[number], terminal: boolean, seconds: number): void;
  active(delta: number): void;
  maxConcurrent(n: number): void;
}

/** What one controller's worker pools report. Made by {@link Metrics.controller}. */
export class ControllerMetrics {
  constructor(private readonly sink: ControllerSink) {}

  /** Count one reconcile ending with `outcome` (a terminal error is an `error` and a
   * terminal error) that took `ms`. */
  reconciled(outcome: "success" | "requeue" | "requeue_after" | "error" | "terminal_error", ms: number): void {
    const terminal = outcome === "terminal_error";
    this.sink.reconciled(terminal ? "error" : outcome, terminal, Math.max(0, ms) / 1000);
  }

  /** A worker started (+1) or finished (-1) a reconcile. */
  activeWorkers(delta: number): void {
    this.sink.active(delta);
  }

  setMaxConcurrentReconciles(n: number): void {
    this.sink.maxConcurrent(n);
  }
}

/** Where queues and worker pools report when their options name no {@link Metrics}, and
 * what a hosted controller serves on `/metrics` unless its options name another. */
export const defaultMetrics = new Metrics();
