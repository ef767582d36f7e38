/**
 * Rate limiters for requeues: per-item exponential backoff, a token bucket, and their maximum.
 *
 * The numbers and behaviour follow client-go's `util/workqueue` rate limiters (and the
 * Python runtime's `steward.runtime.ratelimit`): the default controller rate limiter is the
 * maximum of a per-item exponential backoff (5 ms · 2^n, capped at 1000 s) and an overall
 * token bucket (10 per second, burst 100). Delays are in milliseconds.
 */

import { type Clock, MonotonicClock } from "./clock";

/** Milliseconds of the first per-item backoff (client-go: 5 ms). */
export const DEFAULT_BASE_DELAY_MS = 5;
/** Milliseconds the per-item backoff never exceeds (client-go: 1000 s). */
export const DEFAULT_MAX_DELAY_MS = 1_000_000;
/** Tokens per second of the overall bucket (client-go: 10). */
export const DEFAULT_QPS = 10;
/** Size of the overall bucket (client-go: 100). */
export const DEFAULT_BURST = 100;

/**
 * Decides how long an item waits before it is retried.
 *
 * `when` is called once per retry and counts it; `forget` says the item succeeded (or was
 * given up on) so its history is cleared; `numRequeues` reports the count.
 */
export interface RateLimiter<K> {
  /** Milliseconds the item should wait before its next attempt (counts one requeue). */
  when(item: K): number;
  /** Clear the item's history; unknown items are ignored. */
  forget(item: K): void;
  /** How many times `when` was called for the item since it was last forgotten. */
  numRequeues(item: K): number;
}

/**
 * Per-item exponential backoff: `base · 2^n` ms on the n-th retry (from 0), capped.
 *
 * The count keeps growing past the cap; the delay stays at `maxDelayMs`. Memory grows with
 * the number of distinct items not yet forgotten, so callers must `forget` items that
 * succeed.
 */
export class ItemExponentialBackoff<K> implements RateLimiter<K> {
  private readonly failures = new Map<K, number>();

  constructor(
    readonly baseDelayMs: number = DEFAULT_BASE_DELAY_MS,
    readonly maxDelayMs: number = DEFAULT_MAX_DELAY_MS,
  ) {
    if (baseDelayMs < 0 || maxDelayMs < 0) {
      throw new RangeError("delays must not be negative");
    }
  }

  when(item: K): number {
    const exp = this.failures.get(item) ?? 0;
    this.failures.set(item, exp + 1);
    if (exp >= 1024) {
      return this.maxDelayMs; // beyond any double; the cap applies
    }
    return Math.min(this.baseDelayMs * 2 ** exp, this.maxDelayMs);
  }

  forget(item: K): void {
    this.failures.delete(item);
  }

  numRequeues(item: K): number {
    return this.failures.get(item) ?? 0;
  }
}

/**
 * An overall token bucket shared by all items: `rate` tokens per second, `burst` deep.
 *
 * The bucket starts full. Each `when` takes a token now or reserves the next one that will
 * be there, returning how long until it is (reservations are never given back, as with
 * `golang.org/x/time/rate`'s `Reserve`): with rate 10 and burst 100, 100 calls at once wait
 * 0 ms, the 101st waits 100 ms, the 102nd 200 ms. It keeps no per-item state.
 */
export class TokenBucket<K> implements RateLimiter<K> {
  private tokens: number;
  private last: number;
  private readonly clock: Clock;

  constructor(
    readonly rate: number = DEFAULT_QPS,
    readonly burst: number = DEFAULT_BURST,
    clock?: Clock,
  ) {
    if (rate <= 0 || burst < 1) {
      throw new RangeError("a token bucket needs rate > 0 and burst >= 1");
    }
    this.clock = clock ?? new MonotonicClock();
    this.tokens = burst;
    this.last = this.clock.now();
  }

  when(_item: K): number {
    const now = this.clock.now();
    const elapsedS = Math.max(0, now - this.last) / 1000;
    const tokens = Math.min(this.burst, this.tokens + elapsedS * this.rate) - 1;
    this.tokens = tokens;
    this.last = Math.max(now, this.last);
    return tokens < 0 ? (-tokens / this.rate) * 1000 : 0;
  }

  forget(_item: K): void {
    // The bucket is shared by every item: nothing to forget.
  }

  numRequeues(_item: K): number {
    return 0;
  }
}

/** Combines rate limiters: the longest delay of them all, the highest requeue count. */
export class MaxOf<K> implements RateLimiter<K> {
  readonly limiters: readonly RateLimiter<K>[];

  constructor(...limiters: RateLimiter<K>[]) {
    if (limiters.length === 0) {
      throw new RangeError("MaxOf needs at least one rate limiter");
    }
    this.limiters = limiters;
  }

  /** Every limiter's `when` is called (each counts the retry); the maximum wins. */
  when(item: K): number {
    return Math.max(...this.limiters.map((l) => l.when(item)));
  }

  forget(item: K): void {
    for (const limiter of this.limiters) {
      limiter.forget(item);
    }
  }

  numRequeues(item: K): number {
    return Math.max(...this.limiters.map((l) => l.numRequeues(item)));
  }
}

/** client-go's default: the max of a 5 ms · 2^n backoff (≤ 1000 s) and a 10/s, burst 100 bucket. */
export function defaultControllerRateLimiter<K>(clock?: Clock): RateLimiter<K> {
  return new MaxOf<K>(
    new ItemExponentialBackoff<K>(DEFAULT_BASE_DELAY_MS, DEFAULT_MAX_DELAY_MS),
    new TokenBucket<K>(DEFAULT_QPS, DEFAULT_BURST, clock),
  );
}
