"""The worker pool: N asyncio workers taking keys from a work queue and reconciling them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from opentelemetry.trace import Span, StatusCode
from prometheus_client import CollectorRegistry

from steward import logs
from steward.runtime.clock import Clock, MonotonicClock
from steward.runtime.metrics import (
    RECONCILE_RESULTS,
    RESULT_ERROR,
    RESULT_REQUEUE,
    RESULT_REQUEUE_AFTER,
    RESULT_SUCCESS,
    ControllerMetrics,
    metrics_for,
)
from steward.runtime.ratelimit import (
    DEFAULT_BASE_DELAY,
    DEFAULT_MAX_DELAY,
    default_controller_rate_limiter,
)
from steward.runtime.reconcile import Reconciler, Request, Result, RetryAfter, TerminalError
from steward.runtime.tracing import reconcile_span
from steward.runtime.workqueue import QueueItem, WorkQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How a :class:`WorkerPool` runs.

    ``max_concurrent_reconciles``: how many reconciles run at once. Defaults to 1, as in
    controller-runtime; one key is never reconciled by two workers at once whatever it is.

    ``shutdown_grace_seconds``: on shutdown, how long in-flight reconciles may go on
    before they are cancelled. Defaults to 30, controller-runtime's graceful shutdown
    timeout.

    ``registry``: the Prometheus registry for the pool's and its queue's metrics.
    Defaults to None, meaning prometheus_client's global registry.

    ``max_retries``: after a key's reconcile failed this many times in a row it is dropped
    (its backoff forgotten, logged, counted as a terminal error) until something queues it
    again, as upstream's controllers with a ``maxRetries`` do. None (the default, as in
    controller-runtime) retries for ever.

    ``backoff_base_seconds``, ``backoff_max_seconds``: the failed key's backoff, for the
    queue the pool makes (client-go's defaults, 5 ms doubling to 1000 s).

    ``queue_name``: the name of the queue the pool makes (its ``workqueue_*`` metrics'
    ``name`` label). Empty (the default) for the pool's own name.
    """

    max_concurrent_reconciles: int = 1
    shutdown_grace_seconds: float = 30.0
    registry: CollectorRegistry | None = field(default=None, compare=False)
    max_retries: int | None = None
    backoff_base_seconds: float = DEFAULT_BASE_DELAY
    backoff_max_seconds: float = DEFAULT_MAX_DELAY
    queue_name: str = ""

    def __post_init__(self) -> None:
        if self.max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")
        if self.shutdown_grace_seconds < 0:
            raise ValueError("shutdown_grace_seconds must not be negative")


@dataclass(frozen=True, slots=True)
class LastError:
    """The most recent reconcile error: which key, what was raised, when (wall clock)."""

    request: Request
    message: str
    terminal: bool
    at: float


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A snapshot of a pool, for heartbeats and operators.

    ``reconciles`` counts finished reconciles by result (``success``, ``error``,
    ``requeue``, ``requeue_after``) since the pool was made.
    """

    workers: int
    busy_workers: int
    queue_depth: int
    reconciles: dict[str, int]
    last_error: LastError | None


class WorkerPool:
    """Runs a reconciler over the keys of a work queue with N concurrent workers.

    Each worker loops: take a key, reconcile it, then act on the outcome as
    controller-runtime does:

    * ``Result()`` → forget the key's backoff (``success``);
    * ``Result(requeue_after=s)`` → forget, add again after ``s`` seconds (``requeue_after``);
    * ``Result(requeue=True)`` → add again rate-limited (``requeue``);
    * :class:`TerminalError` → forget, do not retry (``error``);
    * :class:`RetryAfter` → forget, add again after its seconds (``error``);
    * any other exception → add again rate-limited (``error``).

    Errors are logged, counted and kept as :attr:`WorkerStatus.last_error`; an exception
    never ends a worker. When the work is not finished (an ordinary error, ``requeue``),
    the key's trace contexts go back into the queue with it.

    ``queue`` defaults to a new :class:`WorkQueue` named ``name`` with client-go's default
    controller rate limiter. The pool shuts its queue down when it stops.
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        queue: WorkQueue[Request] | None = None,
        options: WorkerOptions | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.options = options if options is not None else WorkerOptions()
        self.queue: WorkQueue[Request] = (
            queue
            if queue is not None
            else WorkQueue(
                self.options.queue_name or name,
                registry=self.options.registry,
                rate_limiter=default_controller_rate_limiter(
                    base_delay=self.options.backoff_base_seconds,
                    max_delay=self.options.backoff_max_seconds,
                ),
            )
        )
        self._reconciler = reconciler
        self._clock = clock if clock is not None else MonotonicClock()
        self._metrics: ControllerMetrics = metrics_for(self.options.registry).controller(name)
        self._busy = 0
        self._counts: Counter[str] = Counter({result: 0 for result in RECONCILE_RESULTS})
        self._last_error: LastError | None = None
        self._stopping = False
        self._running = False

    def status(self) -> WorkerStatus:
        """The pool's numbers now (cheap; safe to call at any time)."""
        return WorkerStatus(
            workers=self.options.max_concurrent_reconciles,
            busy_workers=self._busy,
            queue_depth=len(self.queue),
            reconciles=dict(self._counts),
            last_error=self._last_error,
        )

    async def run(self) -> None:
        """Run the workers until cancelled, then shut down gracefully and re-raise.

        Shutdown: stop taking keys (the queue is shut down), let in-flight reconciles
        finish for up to ``shutdown_grace_seconds``, then cancel those still running. A
        second cancellation during the grace period cancels them at once. If the queue is
        shut down by someone else, the workers finish and ``run`` returns. Running a pool
        twice at the same time raises RuntimeError.
        """
        if self._running:
            raise RuntimeError(f"worker pool {self.name!r} is already running")
        self._running = True
        self._stopping = False
        self._metrics.max_concurrent_reconciles.set(self.options.max_concurrent_reconciles)
        workers = {
            asyncio.create_task(self._work(), name=f"{self.name}-worker-{i}")
            for i in range(self.options.max_concurrent_reconciles)
        }
        try:
            await asyncio.wait(workers)
        except asyncio.CancelledError:
            await self._shut_down(workers)
            raise
        finally:
            self._running = False

    async def _shut_down(self, workers: set[asyncio.Task[None]]) -> None:
        self._stopping = True
        self.queue.shut_down()  # idle workers get None and return
        grace = self.options.shutdown_grace_seconds
        log.info("worker pool %s: stopping, %d reconciles in flight", self.name, self._busy)
        try:
            _, pending = await asyncio.wait(workers, timeout=grace)
        except asyncio.CancelledError:  # cancelled again: no more grace
            pending = {worker for worker in workers if not worker.done()}
        if pending:
            log.warning(
                "worker pool %s: cancelling %d reconciles still running after %.1fs",
                self.name,
                len(pending),
                grace,
            )
            for worker in pending:
                worker.cancel()
            await asyncio.wait(pending)

    async def _work(self) -> None:
        while not self._stopping:
            item = await self.queue.get()
            if item is None:
                return
            if self._stopping:
                self.queue.done(item.key)
                return
            self._busy += 1
            self._metrics.active_workers.inc()
            try:
                await self._reconcile(item)
            finally:
                self._busy -= 1
                self._metrics.active_workers.dec()
                self.queue.done(item.key)

    async def _reconcile(self, item: QueueItem[Request]) -> None:
        key = item.key
        attempt = self.queue.num_requeues(key)
        # Each worker is a task of its own: what it logs in this reconcile names it.
        logs.CONTROLLER.set(self.name)
        logs.KEY.set(str(key))
        with reconcile_span(
            self.name,
            str(key),
            item.contexts,
            attempt,
            queued_at_ns=item.queued_at_ns,
            dequeued_at_ns=item.dequeued_at_ns,
        ) as span:
            await self._reconcile_in(item, span)

    async def _reconcile_in(self, item: QueueItem[Request], span: Span) -> None:
        key = item.key
        started = self._clock.now()
        try:
            result = await self._reconciler.reconcile(key)
        except TerminalError as err:
            span.record_exception(err)
            span.set_status(StatusCode.ERROR, f"terminal: {err}")
            span.set_attribute("steward.result", RESULT_ERROR)
            self.queue.forget(key)
            self._metrics.terminal_error()
            self._record_error(key, err, terminal=True, started=started)
            return
        except RetryAfter as err:
            failure = err.__cause__ if isinstance(err.__cause__, Exception) else err
            span.record_exception(failure)
            span.set_status(StatusCode.ERROR, str(failure))
            span.set_attribute("steward.result", RESULT_ERROR)
            span.set_attribute("steward.requeue_after_seconds", err.seconds)
            self.queue.forget(key)
            self.queue.add_after(key, err.seconds)
            self._record_error(key, failure, terminal=False, started=started)
            return
        except Exception as err:
            span.record_exception(err)
            span.set_status(StatusCode.ERROR, str(err))
            span.set_attribute("steward.result", RESULT_ERROR)
            retries = self.options.max_retries
            if retries is not None and self.queue.num_requeues(key) >= retries:
                self.queue.forget(key)
                self._metrics.terminal_error()
                log.warning("%s: dropping %s after %d retries", self.name, key, retries)
                self._record_error(key, err, terminal=True, started=started)
                return
            self.queue.add_rate_limited(key, item.contexts)
            self._record_error(key, err, terminal=False, started=started)
            return
        if not isinstance(result, Result):
            self.queue.add_rate_limited(key, item.contexts)
            err = TypeError(f"reconcile returned {type(result).__name__}, not Result")
            self._record_error(key, err, terminal=False, started=started)
            return
        if result.requeue_after > 0:
            self.queue.forget(key)
            self.queue.add_after(key, result.requeue_after)
            outcome = RESULT_REQUEUE_AFTER
        elif result.requeue:
            self.queue.add_rate_limited(key, item.contexts)
            outcome = RESULT_REQUEUE
        else:
            self.queue.forget(key)
            outcome = RESULT_SUCCESS
        span.set_attribute("steward.result", outcome)
        if result.requeue_after > 0:
            span.set_attribute("steward.requeue_after_seconds", result.requeue_after)
        self._finish(outcome, started)

    def _record_error(
        self, key: Request, err: Exception, *, terminal: bool, started: float
    ) -> None:
        self._finish(RESULT_ERROR, started)
        message = f"{type(err).__name__}: {err}"
        self._last_error = LastError(key, message, terminal, time.time())
        if terminal:
            log.error(
                "%s: reconcile %s failed (terminal, not retried): %s", self.name, key, message
            )
        else:
            log.error(
                "%s: reconcile %s failed, retry %d: %s",
                self.name,
                key,
                self.queue.num_requeues(key),
                message,
                exc_info=err,
            )

    def _finish(self, outcome: str, started: float) -> None:
        self._counts[outcome] += 1
        seconds = self._clock.now() - started
        self._metrics.reconciled(outcome, seconds)
        # Upstream's controllers log "Finished syncing" at V(4), kube's debug level.
        log.debug("%s: finished syncing (%s) in %.3fs", self.name, outcome, seconds)
