"""The work queue: client-go's ``workqueue`` semantics on asyncio, with trace contexts per key.

Rules (as client-go's rate-limiting delaying queue):

* An item already queued (dirty) is not queued twice; the adds coalesce.
* An item is never handed to two workers at once: added while being processed, it is
  marked dirty and queued again when :meth:`WorkQueue.done` is called for it.
* :meth:`WorkQueue.add_after` holds an item until its ready time; for an item already
  waiting, the earliest ready time wins.
* :meth:`WorkQueue.add_rate_limited` waits as long as the rate limiter says;
  :meth:`WorkQueue.forget` clears the item's history there.
* After :meth:`WorkQueue.shut_down`, adds are ignored and waiting items are dropped;
  ``get`` still hands out what is queued, then returns ``None`` for ever.

The queue belongs to one event loop and is not thread-safe: call it from that loop only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry

from steward.runtime.clock import Clock, MonotonicClock
from steward.runtime.metrics import QueueMetrics, metrics_for
from steward.runtime.ratelimit import RateLimiter, default_controller_rate_limiter

K = TypeVar("K", bound=Hashable)

MAX_CONTEXTS_PER_ITEM = 32
"""How many trace contexts a queued item keeps by default; later ones are only counted."""


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context (the ``traceparent`` and ``tracestate`` headers) of one event."""

    traceparent: str
    tracestate: str = ""

    @classmethod
    def from_carrier(cls, carrier: Mapping[str, str]) -> TraceContext | None:
        """Read ``traceparent``/``tracestate`` from a header-like mapping; None if absent."""
        traceparent = carrier.get("traceparent", "")
        if not traceparent:
            return None
        return cls(traceparent, carrier.get("tracestate", ""))

    def to_carrier(self) -> dict[str, str]:
        """The context as headers (``tracestate`` only when not empty)."""
        carrier = {"traceparent": self.traceparent}
        if self.tracestate:
            carrier["tracestate"] = self.tracestate
        return carrier


@dataclass(frozen=True, slots=True)
class QueueItem(Generic[K]):
    """What :meth:`WorkQueue.get` hands out: the key and the contexts of the adds it absorbed.

    ``contexts`` are in the order they were added, at most the queue's ``max_contexts``;
    ``dropped_contexts`` counts the ones beyond that limit. ``queued_at_ns`` and
    ``dequeued_at_ns`` are the wall-clock times (Unix nanoseconds) at which the key became
    ready in the queue and was handed out, so a trace can show how long it waited.
    """

    key: K
    contexts: tuple[TraceContext, ...] = ()
    dropped_contexts: int = 0
    queued_at_ns: int = field(default=0, compare=False)
    dequeued_at_ns: int = field(default=0, compare=False)


@dataclass(slots=True)
class _Contexts:
    items: list[TraceContext] = field(default_factory=list)
    dropped: int = 0
    queued_at_ns: int = field(default_factory=time.time_ns)

    def extend(self, contexts: Iterable[TraceContext], limit: int) -> None:
        for context in contexts:
            if len(self.items) < limit:
                self.items.append(context)
            else:
                self.dropped += 1


@dataclass(slots=True)
class _Waiting:
    ready_at: float
    seq: int
    contexts: _Contexts


def _as_contexts(context: TraceContext | Iterable[TraceContext] | None) -> Iterable[TraceContext]:
    if context is None:
        return ()
    if isinstance(context, TraceContext):
        return (context,)
    return context


class WorkQueue(Generic[K]):
    """A rate-limited, delaying work queue of hashable keys with client-go's semantics.

    ``name`` labels the queue's metrics (``workqueue_*{name=...}``); an unnamed queue
    records none. ``rate_limiter`` defaults to client-go's default controller rate limiter;
    ``clock`` (default monotonic) times delays and metrics; ``registry`` is where metrics go
    (default: the global registry). ``max_contexts`` bounds the trace contexts kept per item.

    Delayed items become ready through a timer on the running event loop; when there is
    none (synchronous use), they are moved to the queue whenever the queue is read
    (``get``, ``get_nowait``, ``len``).
    """

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: RateLimiter[K] | None = None,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        max_contexts: int = MAX_CONTEXTS_PER_ITEM,
    ) -> None:
        self.name = name
        self._clock = clock if clock is not None else MonotonicClock()
        self._rate_limiter: RateLimiter[K] = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(clock=self._clock)
        )
        self._metrics: QueueMetrics | None = (
            metrics_for(registry).queue(name, self._clock) if name else None
        )
        self._max_contexts = max_contexts
        self._queue: deque[K] = deque()
        self._dirty: dict[K, _Contexts] = {}
        self._processing: set[K] = set()
        self._waiting: dict[K, _Waiting] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._shutting_down = False
        self._drain = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # -- adding ---------------------------------------------------------------------------

    def add(self, item: K, context: TraceContext | Iterable[TraceContext] | None = None) -> None:
        """Queue ``item`` unless it is already queued; keep ``context`` (one or several) with it.

        An item being processed is marked dirty and queued again when ``done`` is called.
        Ignored after shutdown.
        """
        if self._shutting_down:
            return
        self._add(item, _as_contexts(context))

    def _add(self, item: K, contexts: Iterable[TraceContext]) -> None:
        bag = self._dirty.get(item)
        if bag is not None:
            bag.extend(contexts, self._max_contexts)
            return
        if self._metrics is not None:
            self._metrics.add(item)
        bag = _Contexts()
        bag.extend(contexts, self._max_contexts)
        self._dirty[item] = bag
        if item in self._processing:
            return
        self._queue.append(item)
        self._wake_one()

    def add_after(
        self,
        item: K,
        delay: float,
        context: TraceContext | Iterable[TraceContext] | None = None,
    ) -> None:
        """Add ``item`` after ``delay`` seconds (at once if ``delay`` <= 0).

        An item already waiting keeps the earlier of its two ready times; the contexts of
        both adds are kept. Counts a retry in ``workqueue_retries_total``. Ignored after
        shutdown.
        """
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retry()
        if delay <= 0:
            self._add(item, _as_contexts(context))
            return
        ready_at = self._clock.now() + delay
        waiting = self._waiting.get(item)
        if waiting is None:
            waiting = _Waiting(ready_at, next(self._seq), _Contexts())
            self._waiting[item] = waiting
            heapq.heappush(self._heap, (ready_at, waiting.seq, item))
        elif ready_at < waiting.ready_at:
            waiting.ready_at = ready_at
            waiting.seq = next(self._seq)
            heapq.heappush(self._heap, (ready_at, waiting.seq, item))
        waiting.contexts.extend(_as_contexts(context), self._max_contexts)
        self._schedule_timer()

    def add_rate_limited(
        self, item: K, context: TraceContext | Iterable[TraceContext] | None = None
    ) -> None:
        """Add ``item`` after the delay the rate limiter gives it (which counts a requeue)."""
        if self._shutting_down:
            return
        self.add_after(item, self._rate_limiter.when(item), context)

    def forget(self, item: K) -> None:
        """Tell the rate limiter the item is done with retries; its backoff starts over.

        It does not remove the item from the queue.
        """
        self._rate_limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        """How many rate-limited requeues the item had since it was last forgotten."""
        return self._rate_limiter.num_requeues(item)

    # -- taking ---------------------------------------------------------------------------

    def get_nowait(self) -> QueueItem[K] | None:
        """Hand out the next ready item, or None when none is ready (or the queue shut down).

        The caller must call :meth:`done` with the key when finished with it.
        """
        self._promote_ready()
        if not self._queue:
            return None
        key = self._queue.popleft()
        if self._metrics is not None:
            self._metrics.get(key)
        self._processing.add(key)
        bag = self._dirty.pop(key)
        return QueueItem(key, tuple(bag.items), bag.dropped, bag.queued_at_ns, time.time_ns())

    async def get(self) -> QueueItem[K] | None:
        """Wait for the next item and hand it out; ``None`` means the queue has shut down.

        After shutdown, items still queued are handed out first. The caller must call
        :meth:`done` with the key when finished with it. Cancelling a waiting ``get`` takes
        nothing from the queue.
        """
        loop = asyncio.get_running_loop()
        while True:
            got = self.get_nowait()
            if got is not None:
                return got
            if self._shutting_down:
                return None
            self._schedule_timer()
            waiter: asyncio.Future[None] = loop.create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass on a wake-up this getter will not use
                raise
            finally:
                if waiter in self._getters:
                    self._getters.remove(waiter)

    def done(self, item: K) -> None:
        """Mark ``item`` finished; if it was added meanwhile, queue it again now.

        Calling it for an item that is not being processed does nothing.
        """
        if item not in self._processing:
            return
        if self._metrics is not None:
            self._metrics.done(item)
        self._processing.remove(item)
        if item in self._dirty:
            self._queue.append(item)
            self._wake_one()
        elif not self._processing:
            self._resolve(self._drain_waiters)

    # -- shutting down --------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop accepting adds and drop waiting items; waiting getters return what is left.

        Also ends a ``shut_down_with_drain`` that is still waiting.
        """
        self._shutting_down = True
        self._drain = False
        self._stop_waiting()
        self._resolve(self._drain_waiters)

    async def shut_down_with_drain(self) -> None:
        """Shut down like :meth:`shut_down`, then wait until no item is being processed.

        Items still queued are not waited for (workers may still ``get`` them). Calling
        :meth:`shut_down` meanwhile ends the wait at once. Cancelling it only stops the wait.
        """
        self._shutting_down = True
        self._drain = True
        self._stop_waiting()
        loop = asyncio.get_running_loop()
        while self._processing and self._drain:
            waiter: asyncio.Future[None] = loop.create_future()
            self._drain_waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._drain_waiters:
                    self._drain_waiters.remove(waiter)

    @property
    def shutting_down(self) -> bool:
        """True once ``shut_down`` or ``shut_down_with_drain`` was called."""
        return self._shutting_down

    # -- state ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Items queued and ready (not those being processed or still waiting)."""
        self._promote_ready()
        return len(self._queue)

    @property
    def processing(self) -> int:
        """How many items are handed out and not yet ``done``."""
        return len(self._processing)

    @property
    def waiting(self) -> int:
        """How many items wait for their ready time (``add_after``, ``add_rate_limited``)."""
        return len(self._waiting)

    # -- internals ------------------------------------------------------------------------

    def _promote_ready(self) -> None:
        if not self._heap:
            return
        now = self._clock.now()
        while self._heap and self._heap[0][0] <= now:
            _, seq, item = heapq.heappop(self._heap)
            waiting = self._waiting.get(item)
            if waiting is None or waiting.seq != seq:
                continue  # superseded by an earlier ready time
            del self._waiting[item]
            if not self._shutting_down:
                self._add(item, waiting.contexts.items)
                self._dirty[item].dropped += waiting.contexts.dropped

    def _next_ready_at(self) -> float | None:
        while self._heap:
            ready_at, seq, item = self._heap[0]
            waiting = self._waiting.get(item)
            if waiting is not None and waiting.seq == seq:
                return ready_at
            heapq.heappop(self._heap)
        return None

    def _schedule_timer(self) -> None:
        ready_at = self._next_ready_at()
        if ready_at is None:
            self._cancel_timer()
            return
        if self._timer is not None and self._timer_at <= ready_at:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: readers promote ready items themselves
        self._cancel_timer()
        self._timer_at = ready_at
        self._timer = loop.call_later(max(0.0, ready_at - self._clock.now()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._promote_ready()
        self._schedule_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _stop_waiting(self) -> None:
        self._waiting.clear()
        self._heap.clear()
        self._cancel_timer()
        self._resolve(self._getters)

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @staticmethod
    def _resolve(waiters: Iterable[asyncio.Future[None]]) -> None:
        for waiter in list(waiters):
            if not waiter.done():
                waiter.set_result(None)
