"""Controller instances for the tests: in-process :class:`ManagerSession` wrappers, and
subprocesses running ``instance_main`` whose activity log proves who reconciled when."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from steward.runtime.session import ManagerSession, SessionOptions


@dataclass
class Events:
    """What an in-process instance's callbacks saw, in order."""

    log: list[str] = field(default_factory=list)


class Instance:
    """A :class:`ManagerSession` running as a task, recording its callbacks."""

    def __init__(self, target: str, controller: str, instance_id: str, standby: bool = False):
        self.events = Events()
        self.session = ManagerSession(
            target,
            SessionOptions(controller=controller, instance_id=instance_id, standby=standby),
            on_start=lambda epoch: self.events.log.append(f"start {epoch}"),
            on_drain=self._drain,
            on_stop=lambda reason: self.events.log.append("stop"),
        )
        self.task = asyncio.get_running_loop().create_task(self.session.run())

    async def _drain(self) -> None:
        self.events.log.append("drain")
        await asyncio.sleep(0.2)
        self.events.log.append("drained")

    async def close(self) -> None:
        if not self.task.done():
            await self.session.close()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self.task, 10)
        self.task.cancel()


async def eventually(check: Callable[[], bool], within: float = 15.0, what: str = "") -> float:
    """Wait until ``check()``; returns the time it became true (time.time()).

    Raises:
        AssertionError: not within ``within`` seconds.
    """
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what or check}")
        await asyncio.sleep(0.02)
    return time.time()


MAIN = Path(__file__).with_name("instance_main.py")


class InstanceProcess:
    """``instance_main`` in a subprocess; its activity log is ``path``."""

    def __init__(
        self, target: str, controller: str, instance_id: str, path: Path, standby: bool = True
    ) -> None:
        self.path = path
        self.instance_id = instance_id
        args = [sys.executable, str(MAIN), target, controller, instance_id, str(path)]
        if standby:
            args.append("--standby")
        self.stderr = path.with_suffix(".stderr")
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)

    def lines(self) -> list[tuple[str, list[str], float]]:
        """(kind, extra words, time) per complete line of the activity log."""
        if not self.path.exists():
            return []
        out = []
        for raw in self.path.read_text().splitlines():
            words = raw.split()
            if len(words) >= 2:
                out.append((words[0], words[1:-1], float(words[-1])))
        return out

    def first(self, kind: str) -> float | None:
        """Time of the first line of ``kind``."""
        return next((t for k, _, t in self.lines() if k == kind), None)

    def intervals(self) -> list[tuple[float, float]]:
        """Periods of activity: from each start to its last tick (or the start itself)."""
        found: list[tuple[float, float]] = []
        begin: float | None = None
        end = 0.0
        for kind, _, t in self.lines():
            if kind == "start":
                begin, end = t, t
            elif kind == "tick" and begin is not None:
                end = t
            elif kind == "stop" and begin is not None:
                found.append((begin, end))
                begin = None
        if begin is not None:
            found.append((begin, end))
        return found

    def signal(self, sig: signal.Signals) -> float:
        """Send ``sig``; returns the time it was sent."""
        sent = time.time()
        os.kill(self.proc.pid, sig)
        return sent

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)

    def stderr_text(self) -> str:
        return self.stderr.read_text() if self.stderr.exists() else ""


def assert_never_overlap(*instances: InstanceProcess) -> None:
    """No two instances' periods of activity overlap."""
    spans = [(a, inst.instance_id) for inst in instances for a in inst.intervals()]
    spans.sort()
    for ((s1, e1), who1), ((s2, e2), who2) in itertools.pairwise(spans):
        assert e1 < s2, f"{who1} active {s1:.3f}-{e1:.3f} overlaps {who2} active {s2:.3f}-{e2:.3f}"
