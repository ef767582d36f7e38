"""Processes the local control plane starts, recorded so that exactly those are stopped.

A :class:`ProcessRecord` names a process by pid *and* its start time from
``/proc/<pid>/stat``, so a recycled pid is never mistaken for one of ours: ``stop`` only
ever signals a process whose identity still matches the record.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from steward.cluster.ports import reserve

_PR_SET_PDEATHSIG = 1

# Children started by this process, by pid, so they are reaped through their Popen
# object (whichever LocalCluster object stops them) and never linger as zombies.
_children: dict[int, subprocess.Popen[bytes]] = {}


def _proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # zombie or dead: not running any more
        return None
    return int(fields[19])


@dataclass
class ProcessRecord:
    """One started process: enough to find it again from another ``steward`` invocation."""

    name: str
    pid: int
    start_time: int
    argv: list[str]
    log: str

    def alive(self) -> bool:
        """True while the process that was started (not a later one with its pid) runs."""
        return _proc_start_time(self.pid) == self.start_time

    def rss_bytes(self) -> int:
        """Resident memory of the process now (0 when it is not running)."""
        if not self.alive():
            return 0
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except (FileNotFoundError, ProcessLookupError):
            pass
        return 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        return cls(**data)


# Resolved now, in the parent: between fork and exec (where _die_with_parent runs) a
# process with other threads must not load libraries or take locks, only call this.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_SETPRIV = shutil.which("setpriv")
"""util-linux's setpriv: sets the parent-death signal itself, then runs the command."""


def spawn(
    name: str,
    argv: Sequence[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = False,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``argv`` in its own session with stdout and stderr appended to ``log``.

    With ``die_with_parent`` the kernel kills the process when the thread that started it
    exits (Linux ``PR_SET_PDEATHSIG``): test clusters use it so that nothing outlives an
    interrupted or killed test run. The signal is set by ``setpriv --pdeathsig`` in front
    of the command when setpriv is installed, not by a ``preexec_fn``: that forces a real
    fork(), whose pthread_atfork handlers include gRPC's, and those can block forever in a
    process with gRPC channels in use (seen as a hung kube-apiserver restart).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    command = list(argv)
    preexec = None
    if die_with_parent and _SETPRIV:
        command = [_SETPRIV, "--pdeathsig", "KILL", "--", *command]
    elif die_with_parent:
        preexec = _die_with_parent
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=preexec,
        )
    _children[proc.pid] = proc
    start = _proc_start_time(proc.pid)
    record = ProcessRecord(name, proc.pid, start if start is not None else -1, list(argv), str(log))
    return proc, record


def stop(records: Sequence[ProcessRecord], *, grace: float = 10.0) -> list[str]:
    """Stop the recorded processes: SIGTERM, then SIGKILL after ``grace`` seconds.

    Processes are signalled in the order given (callers pass reverse start order).
    Returns the names of those that had to be killed.
    """
    killed: list[str] = []
    for record in records:
        _reap(record.pid)
        if not record.alive():
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while record.alive() and time.monotonic() < deadline:
            _reap(record.pid)
            time.sleep(0.05)
        if record.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
            killed.append(record.name)
            while record.alive():
                _reap(record.pid)
                time.sleep(0.02)
        _reap(record.pid, block=True)
    return killed


def _reap(pid: int, *, block: bool = False) -> None:
    """Collect the exit status of our own child so it does not linger as a zombie.

    With ``block`` wait (up to 10 s) for it: a multi-threaded process shows as a zombie
    as soon as its main thread exits, but can only be reaped once every thread has.
    """
    child = _children.get(pid)
    if child is not None:
        try:
            code = child.wait(timeout=10) if block else child.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: Path | str, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file (empty if there is none)."""
    try:
        data = Path(path).read_bytes()[-64 * 1024 :]
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for tests and benchmarks), outside the
    kernel's ephemeral range (:mod:`steward.cluster.ports`)."""
    return reserve(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports, each free on 127.0.0.1 right now (see
    :func:`free_port`)."""
    return reserve(count)
