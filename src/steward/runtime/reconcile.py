"""What a reconcile gets and returns: ``Request`` in, ``Result`` out, ``TerminalError``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol


class Request(NamedTuple):
    """The key of one object to reconcile: namespace ("" for cluster-scoped) and name."""

    namespace: str
    name: str

    @classmethod
    def from_key(cls, key: str) -> Request:
        """Parse ``namespace/name`` or ``name`` (cluster-scoped); more slashes raise ValueError."""
        parts = key.split("/")
        if len(parts) == 1:
            return cls("", parts[0])
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        raise ValueError(f"not a namespace/name key: {key!r}")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Result:
    """What to do after a reconcile that did not raise.

    The default, ``Result()``, means done: the key's backoff is forgotten and it is not
    queued again until something adds it. ``requeue_after`` (seconds, > 0) forgets the
    backoff and adds the key again after that delay; ``requeue=True`` adds it again with
    rate limiting (its backoff grows). When both are set, ``requeue_after`` wins, as in
    controller-runtime. A negative or non-finite ``requeue_after`` raises ValueError.
    """

    requeue: bool = False
    requeue_after: float = 0.0

    def __post_init__(self) -> None:
        if self.requeue_after < 0 or not math.isfinite(self.requeue_after):
            raise ValueError(f"requeue_after must be a finite number >= 0: {self.requeue_after}")


class TerminalError(Exception):
    """Raised by a reconcile to say retrying will not help: the key is not requeued.

    It is still recorded, logged and counted as an error (and in
    ``controller_runtime_terminal_reconcile_errors_total``). The key comes back only when
    something adds it again (a new event, a resync).
    """


class RetryAfter(Exception):
    """Raised by a reconcile that failed and must be retried after ``seconds`` exactly, not
    with the growing backoff (upstream's fixed-interval rate limiters: the HPA controller
    retries a failed HPA at its sync period). Recorded, logged and counted as an error;
    ``__cause__`` (``raise RetryAfter(s) from err``) is the failure it reports."""

    def __init__(self, seconds: float, message: str = "") -> None:
        if seconds <= 0 or seconds != seconds or seconds == float("inf"):
            raise ValueError(f"RetryAfter needs a finite number of seconds > 0: {seconds}")
        super().__init__(message or f"retry after {seconds:g} s")
        self.seconds = seconds


class Reconciler(Protocol):
    """Brings the world in line with one object, read fresh by key (level-triggered).

    It runs inside the reconcile's span, which links the trace contexts of every event
    coalesced into this key, so its writes continue those traces. Return a
    :class:`Result`; raise :class:`TerminalError` to give up on the key,
    :class:`RetryAfter` to have it retried after a fixed delay, any other exception to
    have it retried with rate limiting. Cancellation
    (``asyncio.CancelledError``) means the worker pool is shutting down and its grace
    period is over.
    """

    async def reconcile(self, request: Request) -> Result:
        """Reconcile the object named by ``request``."""
        ...
