/**
 * Clocks of the runtime: the monotonic one it runs on, and a fake one tests move.
 *
 * Times are in **milliseconds**; only differences between readings mean anything.
 */

/** A source of monotonic time in milliseconds (never goes backwards). */
export interface Clock {
  /** The current time in milliseconds since an arbitrary fixed point. */
  now(): number;
}

/** The real clock: `performance.now()`, the clock Node's timers also run on. */
export class MonotonicClock implements Clock {
  now(): number {
    return performance.now();
  }
}

/** A clock that stands still until {@link FakeClock.advance} moves it. */
export class FakeClock implements Clock {
  private current: number;

  constructor(start = 0) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  /** Move time forward by `ms`; a negative value throws RangeError. */
  advance(ms: number): void {
    if (ms < 0) {
      throw new RangeError(`a clock cannot go backwards (advance by ${ms})`);
    }
    this.current += ms;
  }
}
