"""Progress lines for long work (builds, waits) on standard error."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Writes progress for long work to a stream (standard error by default).

    ``say`` always prints a line; ``tick`` is for periodic updates and prints at most once
    per :attr:`interval` seconds. Both prefix the time since the object was created.
    """

    def __init__(
        self, stream: TextIO | None = None, *, interval: float = 10.0, quiet: bool = False
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.quiet = quiet
        self._start = time.monotonic()
        self._last_tick = self._start

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def say(self, message: str) -> None:
        if self.quiet:
            return
        print(f"[{self.elapsed():6.1f}s] {message}", file=self.stream, flush=True)

    def tick(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_tick >= self.interval * 0.9:
            self._last_tick = now
            self.say(message)
