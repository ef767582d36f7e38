"""The per-zone queues of nodes waiting for their NoExecute taint, rate limited
(upstream's ``RateLimitedTimedQueue`` in
pkg/controller/nodelifecycle/scheduler/rate_limited_queue.go), without I/O.

# The queue
A node is queued once (by name, with its uid); queued again while it waits, it keeps its
place. :meth:`TaintQueue.attempt` takes nodes in order of when they are due, each only
with a token of the zone's limiter (burst 1), and hands each to the action: done, it
leaves the queue but stays *remembered*, so that queueing it again is refused until
:meth:`TaintQueue.remove` forgets it (upstream's ``RemoveFromQueue`` against
``Remove``: a node tainted once is not tainted again until it is Ready, or its taint is
seen missing); not done, it is due again after the delay the action asked for. A token
is spent on each node looked at, due or not, as upstream's ``Try`` does.

# The limiter
``qps`` tokens a second, burst 1, full at the start; a limiter of qps 0 never gives a
token (``NewFakeNeverRateLimiter``). Swapping the rate (:meth:`TaintQueue.swap_limiter`)
keeps the queue; the new limiter starts empty if the old one was (so a zone cannot
gain a token by changing state).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

BURST = 1
"""Tokens a zone's limiter holds at most (``EvictionRateLimiterBurst``)."""
PASS_PERIOD = 0.1
"""Seconds between two passes over the queues (``NodeEvictionPeriod``)."""


class Limiter:
    """A token bucket of ``qps`` a second and burst 1 (client-go's
    ``NewTokenBucketRateLimiter``); with qps 0 or less it never gives a token."""

    def __init__(self, qps: float, now: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self._now = now
        self._tokens = float(BURST)
        self._at = now()

    def _refill(self) -> None:
        now = self._now()
        if self.qps > 0:
            self._tokens = min(float(BURST), self._tokens + (now - self._at) * self.qps)
        self._at = now

    def try_accept(self) -> bool:
        """Take a token if one is there."""
        if self.qps <= 0:
            return False
        self._refill()
        if self._tokens >= 1.0 - 1e-9:
            self._tokens -= 1.0
            return True
        return False

    def wait(self) -> float:
        """Seconds until a token is there (inf for a limiter that never gives one)."""
        if self.qps <= 0:
            return math.inf
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self.qps)


@dataclass(order=True)
class _Entry:
    due: float
    seq: int
    name: str = field(compare=False)
    uid: str = field(compare=False)


Action = Callable[[str, str], Awaitable[tuple[bool, float]]]
"""What :meth:`TaintQueue.attempt` does with a due node (name, uid): (done, seconds until
it is due again when not done)."""


class TaintQueue:
    """One zone's nodes waiting for their NoExecute taint; see the module docs."""

    def __init__(self, qps: float, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self.limiter = Limiter(qps, now)
        self._heap: list[_Entry] = []
        self._remembered: set[str] = set()
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self._heap)

    def add(self, name: str, uid: str) -> bool:
        """Queue ``name`` now; False when it is queued or remembered already."""
        if name in self._remembered:
            return False
        heapq.heappush(self._heap, _Entry(self._now(), next(self._seq), name, uid))
        self._remembered.add(name)
        return True

    def remove(self, name: str) -> bool:
        """Forget ``name`` (queued or remembered); True when it was either."""
        if name not in self._remembered:
            return False
        self._remembered.discard(name)
        self._drop(name)
        return True

    def _drop(self, name: str) -> bool:
        for i, entry in enumerate(self._heap):
            if entry.name == name:
                self._heap.pop(i)
                heapq.heapify(self._heap)
                return True
        return False

    async def attempt(self, action: Action) -> None:
        """Hand due nodes to ``action`` while the limiter gives tokens (upstream's
        ``Try``); see the module docs. A node removed while its action runs is not
        queued again."""
        while self._heap:
            if not self.limiter.try_accept():
                return
            head = self._heap[0]
            now = self._now()
            if now < head.due:
                return
            done, wait = await action(head.name, head.uid)
            if not any(e is head for e in self._heap):
                continue  # removed (or done) meanwhile
            self._heap.remove(head)
            heapq.heapify(self._heap)
            if not done:
                head.due = now + wait + 1e-9
                head.seq = next(self._seq)
                heapq.heappush(self._heap, head)

    def next_due(self) -> float:
        """Seconds until :meth:`attempt` may do something: 0 when a node is due and a
        token there, inf when the queue is empty or the limiter never gives a token."""
        if not self._heap:
            return math.inf
        return max(self.limiter.wait(), self._heap[0].due - self._now(), 0.0)

    def swap_limiter(self, qps: float) -> None:
        """Change the rate (``SwapLimiter``): nothing when it is the same; a new limiter
        otherwise, without a token when the old one had none."""
        if self.limiter.qps == qps:
            return
        old = self.limiter
        new = Limiter(qps, self._now)
        if qps > 0 and not old.try_accept():
            new.try_accept()
        self.limiter = new
