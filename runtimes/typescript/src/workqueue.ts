/**
 * The work queue: client-go's `workqueue` semantics, with trace contexts per key.
 *
 * Rules (as client-go's rate-limiting delaying queue, and the Python runtime's
 * `steward.runtime.workqueue`):
 *
 * - An item already queued (dirty) is not queued twice; the adds coalesce, and the trace
 *   contexts of every add are kept in order, up to `maxContexts` (32 by default).
 * - An item is never handed to two workers at once: added while being processed, it is
 *   marked dirty and queued again when {@link WorkQueue.done} is called for it.
 * - {@link WorkQueue.addAfter} holds an item until its ready time; for an item already
 *   waiting, the earliest ready time wins.
 * - {@link WorkQueue.addRateLimited} waits as long as the rate limiter says;
 *   {@link WorkQueue.forget} clears the item's history there.
 * - After {@link WorkQueue.shutDown}, adds are ignored and waiting items are dropped; `get`
 *   still hands out what is queued, then resolves `null` for ever.
 *
 * A named queue reports client-go's work queue metrics (`workqueue_*{name="..."}`, see
 * {@link Metrics}): adds, depth, time queued, time processed, retries and the work in
 * progress; its depth and work in progress stop counting once it has shut down and nothing
 * is being processed.
 *
 * Keys are strings (a controller uses `namespace/name`). Times are in milliseconds.
 */

import { type Clock, MonotonicClock } from "./clock";
import { type Metrics, type QueueMetrics, defaultMetrics } from "./metrics";
import { type RateLimiter, defaultControllerRateLimiter } from "./ratelimit";

/** How many trace contexts a queued item keeps by default; later ones are only counted. */
export const MAX_CONTEXTS_PER_ITEM = 32;

/** A W3C trace context (the `traceparent` and `tracestate` headers) of one event. */
export interface TraceContext {
  readonly traceparent: string;
  readonly tracestate?: string;
}

/** What {@link WorkQueue.get} hands out: the key and the contexts of the adds it absorbed. */
export interface QueueItem {
  readonly key: string;
  /** In the order they were added, at most the queue's `maxContexts`. */
  readonly contexts: readonly TraceContext[];
  /** How many contexts were beyond the limit and dropped. */
  readonly droppedContexts: number;
  /** Wall-clock Unix time (ms) at which the key became ready in the queue. */
  readonly queuedAt: number;
  /** Wall-clock Unix time (ms) at which the key was handed out. */
  readonly dequeuedAt: number;
}

/** How a {@link WorkQueue} is built. Every field has a working default. */
export interface WorkQueueOptions {
  /** Decides retry delays. Defaults to client-go's default controller rate limiter. */
  rateLimiter?: RateLimiter<string>;
  /** Times delays. Defaults to the monotonic clock. */
  clock?: Clock;
  /** Trace contexts kept per item. Defaults to {@link MAX_CONTEXTS_PER_ITEM} (32). */
  maxContexts?: number;
  /** Labels the queue's metrics (`workqueue_*{name="..."}`). Defaults to "": an unnamed
   * queue records none. */
  name?: string;
  /** Where a named queue reports. Defaults to {@link defaultMetrics}. */
  metrics?: Metrics;
}

class Contexts {
  items: TraceContext[] = [];
  dropped = 0;
  queuedAt = Date.now();

  extend(contexts: Iterable<TraceContext>, limit: number): void {
    for (const context of contexts) {
      if (this.items.length < limit) {
        this.items.push(context);
      } else {
        this.dropped += 1;
      }
    }
  }
}

interface Waiting {
  readyAt: number;
  seq: number;
  contexts: Contexts;
}

type HeapEntry = [readyAt: number, seq: number, key: string];

/** A binary min-heap of (readyAt, seq, key). */
class Heap {
  private readonly data: HeapEntry[] = [];

  get size(): number {
    return this.data.length;
  }

  peek(): HeapEntry | undefined {
    return this.data[0];
  }

  clear(): void {
    this.data.length = 0;
  }

  push(entry: HeapEntry): void {
    const d = this.data;
    d.push(entry);
    let i = d.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!Heap.less(d[i]!, d[parent]!)) break;
      [d[i], d[parent]] = [d[parent]!, d[i]!];
      i = parent;
    }
  }

  pop(): HeapEntry | undefined {
    const d = this.data;
    const top = d[0];
    const last = d.pop();
    if (d.length > 0 && last !== undefined) {
      d[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < d.length && Heap.less(d[l]!, d[m]!)) m = l;
        if (r < d.length && Heap.less(d[r]!, d[m]!)) m = r;
        if (m === i) break;
        [d[i], d[m]] = [d[m]!, d[i]!];
        i = m;
      }
    }
    return top;
  }

  private static less(a: HeapEntry, b: HeapEntry): boolean {
    return a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
  }
}

function asContexts(context: TraceContext | Iterable<TraceContext> | undefined | null): Iterable<TraceContext> {
  if (context === undefined || context === null) return [];
  if (typeof (context as TraceContext).traceparent === "string") return [context as TraceContext];
  return context as Iterable<TraceContext>;
}

/**
 * A rate-limited, delaying work queue of string keys with client-go's semantics (see the
 * module docs). Delayed items become ready through a timer; when a test's fake clock is
 * used, they are also moved to the queue whenever the queue is read (`get`, `getNow`,
 * `length`).
 */
export class WorkQueue {
  private readonly clock: Clock;
  private readonly rateLimiter: RateLimiter<string>;
  private readonly maxContexts: number;
  private readonly metrics: QueueMetrics | undefined;
  private queue: string[] = [];
  private head = 0;
  private readonly dirty = new Map<string, Contexts>();
  private readonly processingSet = new Set<string>();
  private readonly waitingMap = new Map<string, Waiting>();
  private readonly heap = new Heap();
  private seq = 0;
  private getters: (() => void)[] = [];
  private drainWaiters: (() => void)[] = [];
  private shuttingDownFlag = false;
  private drain = false;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;

  constructor(options: WorkQueueOptions = {}) {
    this.clock = options.clock ?? new MonotonicClock();
    this.rateLimiter = options.rateLimiter ?? defaultControllerRateLimiter<string>(this.clock);
    this.maxContexts = options.maxContexts ?? MAX_CONTEXTS_PER_ITEM;
    this.metrics = options.name ? (options.metrics ?? defaultMetrics).queue(options.name) : undefined;
  }

  // -- adding -----------------------------------------------------------------------------

  /**
   * Queue `key` unless it is already queued; keep `context` (one or several) with it. An
   * item being processed is marked dirty and queued again when `done` is called. Ignored
   * after shutdown.
   */
  add(key: string, context?: TraceContext | Iterable<TraceContext> | null): void {
    if (this.shuttingDownFlag) return;
    this.addNow(key, asContexts(context));
  }

  private addNow(key: string, contexts: Iterable<TraceContext>): Contexts {
    let bag = this.dirty.get(key);
    if (bag !== undefined) {
      bag.extend(contexts, this.maxContexts);
      return bag;
    }
    this.metrics?.add(key);
    bag = new Contexts();
    bag.extend(contexts, this.maxContexts);
    this.dirty.set(key, bag);
    if (!this.processingSet.has(key)) {
      this.queue.push(key);
      this.wakeOne();
    }
    return bag;
  }

  /**
   * Add `key` after `delayMs` (at once if `delayMs` ≤ 0). An item already waiting keeps
   * the earlier of its two ready times; the contexts of both adds are kept. Ignored after
   * shutdown.
   */
  addAfter(key: string, delayMs: number, context?: TraceContext | Iterable<TraceContext> | null): void {
    if (this.shuttingDownFlag) return;
    this.metrics?.retry();
    if (delayMs <= 0) {
      this.addNow(key, asContexts(context));
      return;
    }
    const readyAt = this.clock.now() + delayMs;
    let waiting = this.waitingMap.get(key);
    if (waiting === undefined) {
      waiting = { readyAt, seq: this.seq++, contexts: new Contexts() };
      this.waitingMap.set(key, waiting);
      this.heap.push([readyAt, waiting.seq, key]);
    } else if (readyAt < waiting.readyAt) {
      waiting.readyAt = readyAt;
      waiting.seq = this.seq++;
      this.heap.push([readyAt, waiting.seq, key]);
    }
    waiting.contexts.extend(asContexts(context), this.maxContexts);
    this.scheduleTimer();
  }

  /** Add `key` after the delay the rate limiter gives it (which counts a requeue). */
  addRateLimited(key: string, context?: TraceContext | Iterable<TraceContext> | null): void {
    if (this.shuttingDownFlag) return;
    this.addAfter(key, this.rateLimiter.when(key), context);
  }

  /** Clear the key's retry history in the rate limiter (it stays queued if it is). */
  forget(key: string): void {
    this.rateLimiter.forget(key);
  }

  /** How many rate-limited requeues the key had since it was last forgotten. */
  numRequeues(key: string): number {
    return this.rateLimiter.numRequeues(key);
  }

  // -- taking -----------------------------------------------------------------------------

  /** The next ready item, or `null` when none is ready. The caller must call `done`. */
  getNow(): QueueItem | null {
    this.promoteReady();
    if (this.head >= this.queue.length) return null;
    const key = this.queue[this.head]!;
    this.head += 1;
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    this.metrics?.get(key);
    this.processingSet.add(key);
    const bag = this.dirty.get(key)!;
    this.dirty.delete(key);
    return {
      key,
      contexts: bag.items,
      droppedContexts: bag.dropped,
      queuedAt: bag.queuedAt,
      dequeuedAt: Date.now(),
    };
  }

  /**
   * Wait for the next item; `null` means the queue has shut down. After shutdown, items
   * still queued are handed out first. The caller must call `done` with the key.
   */
  async get(): Promise<QueueItem | null> {
    for (;;) {
      const got = this.getNow();
      if (got !== null) return got;
      if (this.shuttingDownFlag) return null;
      this.scheduleTimer();
      await new Promise<void>((resolve) => this.getters.push(resolve));
    }
  }

  /** Mark `key` finished; if it was added meanwhile, queue it again now. */
  done(key: string): void {
    if (!this.processingSet.has(key)) return;
    this.metrics?.done(key);
    this.processingSet.delete(key);
    if (this.dirty.has(key)) {
      this.queue.push(key);
      this.wakeOne();
    } else if (this.processingSet.size === 0) {
      this.resolveAll("drain");
    }
    this.releaseMetrics();
  }

  // -- shutting down ----------------------------------------------------------------------

  /** Stop accepting adds and drop waiting items; waiting getters get what is left. */
  shutDown(): void {
    this.shuttingDownFlag = true;
    this.drain = false;
    this.stopWaiting();
    this.resolveAll("drain");
    this.releaseMetrics();
  }

  /**
   * Shut down like {@link shutDown}, then wait until no item is being processed. Items
   * still queued are not waited for. Calling `shutDown` meanwhile ends the wait at once.
   */
  async shutDownWithDrain(): Promise<void> {
    this.shuttingDownFlag = true;
    this.drain = true;
    this.stopWaiting();
    this.releaseMetrics();
    while (this.processingSet.size > 0 && this.drain) {
      await new Promise<void>((resolve) => this.drainWaiters.push(resolve));
    }
  }

  /** True once `shutDown` or `shutDownWithDrain` was called. */
  get shuttingDown(): boolean {
    return this.shuttingDownFlag;
  }

  // -- state ------------------------------------------------------------------------------

  /** Items queued and ready (not those being processed or still waiting). */
  get length(): number {
    this.promoteReady();
    return this.queue.length - this.head;
  }

  /** How many items are handed out and not yet `done`. */
  get processing(): number {
    return this.processingSet.size;
  }

  /** How many items wait for their ready time (`addAfter`, `addRateLimited`). */
  get waiting(): number {
    return this.waitingMap.size;
  }

  // -- internals --------------------------------------------------------------------------

  /** Once shut down and idle, the queue's depth and work in progress stop counting. */
  private releaseMetrics(): void {
    if (this.shuttingDownFlag && this.processingSet.size === 0) this.metrics?.release();
  }

  private promoteReady(): void {
    if (this.heap.size === 0) return;
    const now = this.clock.now();
    for (let top = this.heap.peek(); top !== undefined && top[0] <= now; top = this.heap.peek()) {
      this.heap.pop();
      const [, seq, key] = top;
      const waiting = this.waitingMap.get(key);
      if (waiting === undefined || waiting.seq !== seq) continue; // superseded
      this.waitingMap.delete(key);
      if (!this.shuttingDownFlag) {
        const bag = this.addNow(key, waiting.contexts.items);
        bag.dropped += waiting.contexts.dropped;
      }
    }
  }

  private nextReadyAt(): number | undefined {
    for (let top = this.heap.peek(); top !== undefined; top = this.heap.peek()) {
      const waiting = this.waitingMap.get(top[2]);
      if (waiting !== undefined && waiting.seq === top[1]) return top[0];
      this.heap.pop();
    }
    return undefined;
  }

  private scheduleTimer(): void {
    const readyAt = this.nextReadyAt();
    if (readyAt === undefined) {
      this.cancelTimer();
      return;
    }
    if (this.timer !== undefined && this.timerAt <= readyAt) return;
    this.cancelTimer();
    this.timerAt = readyAt;
    this.timer = setTimeout(() => this.onTimer(), Math.max(0, readyAt - this.clock.now()));
  }

  private onTimer(): void {
    this.timer = undefined;
    this.promoteReady();
    this.scheduleTimer();
  }

  private cancelTimer(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  private stopWaiting(): void {
    this.waitingMap.clear();
    this.heap.clear();
    this.cancelTimer();
    this.resolveAll("getters");
  }

  private wakeOne(): void {
    const waiter = this.getters.shift();
    if (waiter !== undefined) waiter();
  }

  private resolveAll(which: "getters" | "drain"): void {
    const waiters = which === "getters" ? this.getters : this.drainWaiters;
    if (which === "getters") this.getters = [];
    else this.drainWaiters = [];
    for (const waiter of waiters) waiter();
  }
}
