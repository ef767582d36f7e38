"""The Python controller runtime: work queue, rate limiters and workers that reconcile by key.

Layers compose and each works alone: :class:`WorkQueue` (client-go's semantics, trace
contexts per key) with its rate limiters, and :class:`WorkerPool`, which runs a
:class:`Reconciler` over a queue with N workers.
"""

from steward.runtime.clock import Clock, FakeClock, MonotonicClock
from steward.runtime.metrics import RuntimeMetrics, metrics_for
from steward.runtime.ratelimit import (
    ItemExponentialBackoff,
    MaxOf,
    RateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)
from steward.runtime.reconcile import Reconciler, Request, Result, RetryAfter, TerminalError
from steward.runtime.workers import LastError, WorkerOptions, WorkerPool, WorkerStatus
from steward.runtime.workqueue import QueueItem, TraceContext, WorkQueue

__all__ = [
    "Clock",
    "FakeClock",
    "ItemExponentialBackoff",
    "LastError",
    "MaxOf",
    "MonotonicClock",
    "QueueItem",
    "RateLimiter",
    "Reconciler",
    "Request",
    "Result",
    "RetryAfter",
    "RuntimeMetrics",
    "TerminalError",
    "TokenBucket",
    "TraceContext",
    "WorkQueue",
    "WorkerOptions",
    "WorkerPool",
    "WorkerStatus",
    "default_controller_rate_limiter",
    "metrics_for",
]
