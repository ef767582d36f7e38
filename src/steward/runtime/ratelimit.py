"""Rate limiters for requeues: per-item exponential backoff, a token bucket, and their maximum.

The numbers and behaviour follow client-go's ``util/workqueue`` rate limiters: the default
controller rate limiter is the maximum of a per-item exponential backoff (5 ms * 2**n, capped
at 1000 s) and an overall token bucket (10 per second, burst 100).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from steward.runtime.clock import Clock, MonotonicClock

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

DEFAULT_BASE_DELAY = 0.005
"""Seconds of the first per-item backoff (client-go: 5 ms)."""
DEFAULT_MAX_DELAY = 1000.0
"""Seconds the per-item backoff never exceeds (client-go: 1000 s)."""
DEFAULT_QPS = 10.0
"""Tokens per second of the overall bucket (client-go: 10)."""
DEFAULT_BURST = 100
"""Size of the overall bucket (client-go: 100)."""


class RateLimiter(Protocol[K_contra]):
    """Decides how long an item waits before it is retried.

    ``when`` is called once per retry and counts it; ``forget`` says the item succeeded (or
    was given up on) so its history is cleared; ``num_requeues`` reports the count.
    """

    def when(self, item: K_contra) -> float:
        """Seconds the item should wait before its next attempt (counts one requeue)."""
        ...

    def forget(self, item: K_contra) -> None:
        """Clear the item's history; unknown items are ignored."""
        ...

    def num_requeues(self, item: K_contra) -> int:
        """How many times ``when`` was called for the item since it was last forgotten."""
        ...


class ItemExponentialBackoff(Generic[K]):
    """Per-item exponential backoff: ``base * 2**n`` seconds on the n-th retry (from 0), capped.

    The count keeps growing past the cap (``num_requeues`` stays exact); the delay stays at
    ``max_delay``. Memory grows with the number of distinct items not yet forgotten, so
    callers must ``forget`` items that succeed.
    """

    def __init__(
        self, base_delay: float = DEFAULT_BASE_DELAY, max_delay: float = DEFAULT_MAX_DELAY
    ) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[K, int] = {}

    def when(self, item: K) -> float:
        """``base_delay * 2**n``, n counting earlier calls for the item; at most ``max_delay``."""
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        if exp >= 1024:  # beyond any float; the cap applies
            return self.max_delay
        return min(math.ldexp(self.base_delay, exp), self.max_delay)

    def forget(self, item: K) -> None:
        """Reset the item's count, so its next delay is ``base_delay`` again."""
        self._failures.pop(item, None)

    def num_requeues(self, item: K) -> int:
        """Calls to ``when`` for the item since it was last forgotten."""
        return self._failures.get(item, 0)


class TokenBucket(Generic[K]):
    """An overall token bucket shared by all items: ``rate`` tokens per second, ``burst`` deep.

    The bucket starts full. Each ``when`` takes a token now or reserves the next one that
    will be there, returning how long until it is (reservations are never given back, as
    with ``golang.org/x/time/rate``'s ``Reserve``): with rate 10 and burst 100, 100 calls at
    once wait 0 s, the 101st waits 0.1 s, the 102nd 0.2 s. It keeps no per-item state, so
    ``forget`` does nothing and ``num_requeues`` is always 0.
    """

    def __init__(
        self, rate: float = DEFAULT_QPS, burst: int = DEFAULT_BURST, clock: Clock | None = None
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock if clock is not None else MonotonicClock()
        self._tokens = float(burst)
        self._last = self._clock.now()

    def when(self, item: K) -> float:
        """Reserve one token; seconds until it is available (0 when the bucket had one)."""
        now = self._clock.now()
        elapsed = max(0.0, now - self._last)
        tokens = min(float(self.burst), self._tokens + elapsed * self.rate) - 1.0
        self._tokens = tokens
        self._last = max(now, self._last)
        return -tokens / self.rate if tokens < 0 else 0.0

    def forget(self, item: K) -> None:
        """Nothing to forget: the bucket is shared by every item."""

    def num_requeues(self, item: K) -> int:
        """Always 0: the bucket does not count per item."""
        return 0


class MaxOf(Generic[K]):
    """Combines rate limiters: the longest delay of them all, the highest requeue count.

    Every limiter's ``when`` is called (each one counts the retry), and ``forget`` reaches
    them all.
    """

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        if not limiters:
            raise ValueError("MaxOf needs at least one rate limiter")
        self.limiters: tuple[RateLimiter[K], ...] = limiters

    def when(self, item: K) -> float:
        """The maximum of every limiter's delay for the item."""
        return max([limiter.when(item) for limiter in self.limiters])

    def forget(self, item: K) -> None:
        """Forget the item in every limiter."""
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        """The highest requeue count any limiter reports."""
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(
    clock: Clock | None = None,
    *,
    base_delay: float = DEFAULT_BASE_DELAY,
    max_delay: float = DEFAULT_MAX_DELAY,
) -> MaxOf[Hashable]:
    """client-go's default: the max of a 5 ms * 2**n backoff (<= 1000 s) and a 10/s, 100
    bucket; ``base_delay`` and ``max_delay`` change the backoff (upstream's EndpointSlice
    controller starts at 1 s)."""
    return MaxOf[Hashable](
        ItemExponentialBackoff[Hashable](base_delay, max_delay),
        TokenBucket[Hashable](DEFAULT_QPS, DEFAULT_BURST, clock=clock),
    )
