"""Clocks for the controller runtime: the monotonic one it runs on, and a fake one tests move."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of the current time in seconds, monotonic (never goes backwards)."""

    def now(self) -> float:
        """The current time in seconds; only differences between readings mean anything."""
        ...


class MonotonicClock:
    """The real clock: :func:`time.monotonic`, the clock asyncio's event loop also runs on."""

    def now(self) -> float:
        """Seconds since an arbitrary fixed point (see :func:`time.monotonic`)."""
        return time.monotonic()


class FakeClock:
    """A clock that stands still until :meth:`advance` moves it: exact tests, no sleeping."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        """The time last set by the constructor or :meth:`advance`."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``; a negative value raises :class:`ValueError`."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds})")
        self._now += seconds
