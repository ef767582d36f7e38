/**
 * The worker pool: N concurrent workers taking keys from a {@link WorkQueue} and reconciling.
 *
 * Each worker loops: take a key, reconcile it inside its trace span, then act on the
 * outcome as controller-runtime does:
 *
 * - `{}` / `undefined` → forget the key's backoff (`success`);
 * - `{requeueAfter: ms}` → forget, add again after `ms` (`requeue_after`);
 * - `{requeue: true}` → add again rate-limited (`requeue`);
 * - {@link TerminalError} → forget, do not retry (`terminal_error`);
 * - any other error → add again rate-limited (`error`).
 *
 * Errors are logged, counted and kept as {@link WorkerStatus.lastError}; an error never ends
 * a worker. Every reconcile is counted in `controller_runtime_reconcile_total` by result (a
 * terminal error as `error`, and in `..._terminal_reconcile_errors_total` too) and timed in
 * `controller_runtime_reconcile_time_seconds` (see {@link Metrics}). When the work is not finished (an ordinary error, `requeue`), the key's trace
 * contexts go back into the queue with it.
 */

import { SpanStatusCode } from "@opentelemetry/api";
import { log } from "./log";
import { type ControllerMetrics, type Metrics, defaultMetrics } from "./metrics";
import {
  type Reconciler,
  type Request,
  type Result,
  TerminalError,
  parseRequestKey,
  requestKey,
} from "./reconcile";
import { withReconcileSpan } from "./tracing";
import { type QueueItem, WorkQueue } from "./workqueue";

/** How a {@link WorkerPool} runs. Every field has a working default. */
export interface WorkerOptions {
  /** Reconciles running at once. Defaults to 1, as in controller-runtime. */
  maxConcurrentReconciles?: number;
  /** On shutdown, how long in-flight reconciles may go on before their signal aborts.
   * Defaults to 30 000 ms, controller-runtime's graceful shutdown timeout. */
  shutdownGraceMs?: number;
  /** Where the pool reports (`controller_runtime_*{controller=name}`), and the queue it
   * makes when given none (`workqueue_*{name=name}`). Defaults to {@link defaultMetrics}. */
  metrics?: Metrics;
}

/** How a reconcile ended. */
export type Outcome = "success" | "requeue" | "requeue_after" | "error" | "terminal_error";

/** The most recent reconcile error. */
export interface LastError {
  readonly request: Request;
  readonly message: string;
  readonly terminal: boolean;
  /** Wall-clock Unix time in ms. */
  readonly at: number;
}

/** A snapshot of a pool, for heartbeats and operators. */
export interface WorkerStatus {
  readonly workers: number;
  readonly busyWorkers: number;
  readonly queueDepth: number;
  readonly reconciles: Readonly<Record<Outcome, number>>;
  readonly lastError: LastError | undefined;
}

/** What a pool tells an observer after each reconcile (the conformance driver uses it). */
export interface ReconcileReport {
  readonly item: QueueItem;
  readonly attempt: number;
  readonly outcome: Outcome;
  readonly error: unknown;
}

/** Runs a reconciler over the keys of a work queue with N concurrent workers. */
export class WorkerPool {
  readonly queue: WorkQueue;
  readonly options: Required<Omit<WorkerOptions, "metrics">>;
  private readonly metrics: ControllerMetrics;
  /** Called after every reconcile, with its outcome. */
  onReconciled: ((report: ReconcileReport) => void) | undefined;
  private busy = 0;
  private readonly counts: Record<Outcome, number> = {
    success: 0,
    requeue: 0,
    requeue_after: 0,
    error: 0,
    terminal_error: 0,
  };
  private lastError: LastError | undefined;
  private stopping = false;
  private running: Promise<void> | undefined;
  private readonly abort = new AbortController();

  constructor(
    readonly name: string,
    private readonly reconciler: Reconciler,
    queue?: WorkQueue,
    options: WorkerOptions = {},
  ) {
    this.options = {
      maxConcurrentReconciles: options.maxConcurrentReconciles ?? 1,
      shutdownGraceMs: options.shutdownGraceMs ?? 30_000,
    };
    if (this.options.maxConcurrentReconciles < 1) {
      throw new RangeError("maxConcurrentReconciles must be at least 1");
    }
    const metrics = options.metrics ?? defaultMetrics;
    this.queue = queue ?? new WorkQueue({ name, metrics });
    this.metrics = metrics.controller(name);
    this.metrics.setMaxConcurrentReconciles(this.options.maxConcurrentReconciles);
  }

  /** The pool's numbers now. */
  status(): WorkerStatus {
    return {
      workers: this.options.maxConcurrentReconciles,
      busyWorkers: this.busy,
      queueDepth: this.queue.length,
      reconciles: { ...this.counts },
      lastError: this.lastError,
    };
  }

  /** Start the workers; resolves when they have all returned (after {@link stop}). */
  run(): Promise<void> {
    if (this.running !== undefined) throw new Error(`worker pool ${this.name} is already running`);
    const workers = Array.from({ length: this.options.maxConcurrentReconciles }, () => this.work());
    this.running = Promise.all(workers).then(() => undefined);
    return this.running;
  }

  /**
   * Stop taking keys (the queue is shut down) and wait for in-flight reconciles. With
   * `graceful`, they get up to `shutdownGraceMs` before their signal aborts; without, the
   * signal aborts at once. Resolves when every worker has returned.
   */
  async stop(graceful = true): Promise<void> {
    this.stopping = true;
    this.queue.shutDown();
    if (this.running === undefined) return;
    if (!graceful) {
      this.abort.abort();
      await this.running;
      return;
    }
    log.info(`worker pool ${this.name}: stopping, ${this.busy} reconciles in flight`);
    const timer = setTimeout(() => {
      log.warn(`worker pool ${this.name}: grace period over, aborting running reconciles`);
      this.abort.abort();
    }, this.options.shutdownGraceMs);
    try {
      await this.running;
    } finally {
      clearTimeout(timer);
    }
  }

  private async work(): Promise<void> {
    while (!this.stopping) {
      const item = await this.queue.get();
      if (item === null) return;
      if (this.stopping) {
        this.queue.done(item.key);
        return;
      }
      this.busy += 1;
      this.metrics.activeWorkers(1);
      try {
        await this.reconcileItem(item);
      } finally {
        this.busy -= 1;
        this.metrics.activeWorkers(-1);
        this.queue.done(item.key);
      }
    }
  }

  private async reconcileItem(item: QueueItem): Promise<void> {
    const key = item.key;
    const attempt = this.queue.numRequeues(key);
    const request = parseRequestKey(key);
    let outcome = "success" as Outcome;
    let failure: unknown;
    let requeueAfter = 0;
    const started = performance.now();
    try {
      await withReconcileSpan({ controller: this.name, key, attempt }, item.contexts, async (span) => {
        let result: Result | void;
        try {
          result = await this.reconciler.reconcile(request, {
            contexts: item.contexts,
            attempt,
            span,
            signal: this.abort.signal,
          });
        } catch (err) {
          failure = err;
          outcome = err instanceof TerminalError ? "terminal_error" : "error";
          span.setAttribute("steward.result", "error");
          if (err instanceof TerminalError) {
            span.setStatus({ code: SpanStatusCode.ERROR, message: `terminal: ${err.message}` });
          }
          throw err;
        }
        const after = result?.requeueAfter ?? 0;
        if (!Number.isFinite(after) || after < 0) {
          failure = new RangeError(`requeueAfter must be a finite number >= 0: ${after}`);
          outcome = "error";
          throw failure;
        }
        requeueAfter = after;
        outcome = after > 0 ? "requeue_after" : result?.requeue ? "requeue" : "success";
        span.setAttribute("steward.result", outcome);
        if (after > 0) span.setAttribute("steward.requeue_after_ms", after);
      });
    } catch {
      // Recorded on the span; acted on below.
    }
    const took = performance.now() - started;
    switch (outcome) {
      case "success":
        this.queue.forget(key);
        break;
      case "requeue_after":
        this.queue.forget(key);
        this.queue.addAfter(key, requeueAfter);
        break;
      case "requeue":
      case "error":
        this.queue.addRateLimited(key, item.contexts);
        break;
      case "terminal_error":
        this.queue.forget(key);
        break;
    }
    this.counts[outcome] += 1;
    this.metrics.reconciled(outcome, took);
    if (failure !== undefined) this.recordError(request, failure, outcome === "terminal_error");
    this.onReconciled?.({ item, attempt, outcome, error: failure });
  }

  private recordError(request: Request, err: unknown, terminal: boolean): void {
    const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    this.lastError = { request, message, terminal, at: Date.now() };
    const key = requestKey(request);
    if (terminal) {
      log.error(`${this.name}: reconcile ${key} failed (terminal, not retried): ${message}`);
    } else {
      log.error(`${this.name}: reconcile ${key} failed, retry ${this.queue.numRequeues(key)}: ${message}`);
    }
  }
}
