/**
 * Client-side rate limits of API requests, as client-go's rest client has them.
 *
 * kube-controller-manager gives each controller's client a token bucket of
 * `--kube-api-burst` tokens (30 by default), full at the start, that refills at
 * `--kube-api-qps` tokens a second (20 by default); every request takes a token before it
 * is sent and waits for one when the bucket is empty. A {@link RequestRateLimiter} is that
 * bucket ({@link TokenBucket}'s arithmetic: callers reserve tokens in the order they ask,
 * so a burst after a quiet spell goes at once and the rest are paced at `qps`), and keeps
 * how long requests waited, by verb: client-go's `rest_client_rate_limiter_duration_seconds`.
 *
 * It runs on the runtime's monotonic {@link Clock}; tests pass a {@link FakeClock} and a
 * `sleep` that moves it.
 */

import { setTimeout as delay } from "node:timers/promises";
import { type Clock, MonotonicClock } from "./clock";
import { TokenBucket } from "./ratelimit";

/** kube-controller-manager's `--kube-api-qps` default. */
export const DEFAULT_KUBE_API_QPS = 20;
/** kube-controller-manager's `--kube-api-burst` default. */
export const DEFAULT_KUBE_API_BURST = 30;

/**
 * Upper bounds, in seconds, of the buckets of the wait histogram: client-go's for its
 * `rest_client_*` latencies.
 */
export const RATE_LIMITER_BUCKETS_S: readonly number[] = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60];

/** How long the requests of one verb waited for the rate limiter. */
export interface RateLimiterWaits {
  /** The HTTP method. */
  verb: string;
  /** The buckets' upper bounds in seconds ({@link RATE_LIMITER_BUCKETS_S}). */
  bounds: readonly number[];
  /** `counts[i]`: the waits of at most `bounds[i]` seconds (cumulative, Prometheus' `le`). */
  counts: number[];
  /** Every request of the verb (waits of 0 included). */
  count: number;
  /** Seconds waited in all. */
  sum: number;
}

/** The clock and the sleep of a {@link RequestRateLimiter}, for tests. */
export interface RequestRateLimiterOptions {
  /** Default: the monotonic clock. */
  clock?: Clock;
  /** Resolve after `ms` milliseconds; default a timer. */
  sleep?: (ms: number) => Promise<void>;
}

/** A token bucket every request of a client waits on; see the module docs. */
export class RequestRateLimiter {
  readonly #bucket: TokenBucket<undefined>;
  readonly #clock: Clock;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #waits = new Map<string, { counts: number[]; count: number; sum: number }>();

  /**
   * `qps` tokens a second into a bucket of `burst`, full now. Throws RangeError unless `qps`
   * is a finite number above 0 (no limit is no limiter) and `burst` a whole number of at
   * least 1.
   */
  constructor(
    readonly qps: number,
    readonly burst: number,
    options: RequestRateLimiterOptions = {},
  ) {
    if (!(qps > 0) || !Number.isFinite(qps)) {
      throw new RangeError(`a rate limiter needs a finite qps above 0, not ${qps}`);
    }
    if (!Number.isInteger(burst) || burst < 1) {
      throw new RangeError(`a rate limiter needs a whole burst of at least 1, not ${burst}`);
    }
    this.#clock = options.clock ?? new MonotonicClock();
    this.#sleep = options.sleep ?? ((ms) => delay(ms));
    this.#bucket = new TokenBucket<undefined>(qps, burst, this.#clock);
  }

  /** Take a token for one request of `verb`, waiting until it is there; resolves with the ms waited. */
  async wait(verb: string): Promise<number> {
    const start = this.#clock.now();
    const due = this.#bucket.when(undefined);
    if (due > 0) await this.#sleep(due);
    const waited = Math.max(0, this.#clock.now() - start);
    this.#observe(verb, waited / 1000);
    return waited;
  }

  #observe(verb: string, seconds: number): void {
    let h = this.#waits.get(verb);
    if (h === undefined) {
      h = { counts: RATE_LIMITER_BUCKETS_S.map(() => 0), count: 0, sum: 0 };
      this.#waits.set(verb, h);
    }
    h.count += 1;
    h.sum += seconds;
    const i = RATE_LIMITER_BUCKETS_S.findIndex((bound) => seconds <= bound);
    if (i >= 0) h.counts[i] = (h.counts[i] ?? 0) + 1;
  }

  /** The waits so far, by verb (sorted). */
  waits(): RateLimiterWaits[] {
    return [...this.#waits.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([verb, h]) => {
        let below = 0;
        const counts = h.counts.map((n) => (below += n));
        return { verb, bounds: RATE_LIMITER_BUCKETS_S, counts, count: h.count, sum: h.sum };
      });
  }
}
