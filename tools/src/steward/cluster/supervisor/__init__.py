"""The supervisor of a local cluster's Steward services: restarts each one when it exits.

``steward cluster up`` starts its processes and exits, so something has to outlive it to
bring back a Steward service (the informer, the manager, a controller) that crashed or
was killed. That is one supervisor process per cluster (``python -m
steward.cluster.supervisor``), recorded in ``state.json`` like every other component and
stopped by ``steward cluster down``. It starts each service the cluster asks for and
restarts it whenever it exits, as kubelet restarts a container of a pod with
``restartPolicy: Always``.

# Files
Both live in the cluster's state directory and are replaced atomically:

* ``supervisor-spec.json`` (:func:`write_spec`, written by ``up``): the services, in start
  order. The supervisor reads it again whenever it changes and starts the services it
  does not run yet, so ``up`` can add them one by one and wait for each to be healthy. A
  running service whose spec changed (its command or environment) is replaced, as a
  Deployment replaces a pod whose template changed: stopped, then started by the new
  spec at once (several changed together are all stopped first). A service left out of
  the spec keeps running.
* ``supervisor-status.json`` (:func:`read_status`, written by the supervisor): each
  service's current process (pid and start time, as :class:`ProcessRecord`), its restarts,
  and how and when it last exited. ``steward cluster status`` shows them.

# Backoff
:class:`RestartBackoff`: kubelet's crash-loop backoff. A service that exits is started
again after 10 s, then 20 s, 40 s, ... up to 5 minutes after each further exit; a run of
10 minutes or more before an exit starts the sequence over. Exits with status 0 count
the same: a service is meant to run until the cluster is stopped.

# Recovery
SIGTERM or SIGINT stops the supervisor: it stops its services (SIGTERM, then SIGKILL after
a grace period), in reverse start order, records their exits and exits 0. Should the
supervisor itself die, its services keep running unsupervised (``status`` shows the
supervisor not running) and ``down`` still stops them from the status file; with
``--die-with-parent`` (test clusters) the services die with it instead, and the
supervisor with the process that started the cluster.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from steward.cluster.process import ProcessRecord, spawn, stop

SPEC_FILE = "supervisor-spec.json"
"""The services to run, in start order (written by ``up``)."""

STATUS_FILE = "supervisor-status.json"
"""Each service's process, restarts and last exit (written by the supervisor)."""

POLL_SECONDS = 0.2
"""How often the supervisor looks for exited services and a changed spec."""

STOP_GRACE_SECONDS = 10.0
"""Seconds a service has to exit after SIGTERM before it is killed."""


@dataclass(frozen=True)
class RestartBackoff:
    """How long a service that exited waits before it is started again.

    The defaults are kubelet's: 10 s after the first exit, doubling after each further
    one up to 300 s, and back to 10 s for an exit after a run of at least 600 s.

    Raises:
        ValueError: a time is not positive, or ``maximum`` is below ``initial``.
    """

    initial: float = 10.0
    """Seconds before the first restart. Defaults to 10."""
    maximum: float = 300.0
    """Seconds no restart waits longer than. Defaults to 300."""
    reset_after: float = 600.0
    """Seconds of running after which an exit counts as the first again. Defaults to 600."""

    def __post_init__(self) -> None:
        for name in ("initial", "maximum", "reset_after"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"restart backoff {name} must be a positive number, not {value}")
        if self.maximum < self.initial:
            raise ValueError(
                f"restart backoff maximum ({self.maximum}) is below initial ({self.initial})"
            )

    def next_delay(self, previous: float | None, ran_for: float) -> float:
        """Seconds to wait before starting a service again that exited after running
        ``ran_for`` seconds, when it last waited ``previous`` seconds (None: never)."""
        if previous is None or ran_for >= self.reset_after:
            return self.initial
        return min(max(previous, self.initial) * 2, self.maximum)

    def args(self) -> list[str]:
        """The supervisor's command-line flags for this policy."""
        return [
            f"--backoff-initial={self.initial:g}",
            f"--backoff-max={self.maximum:g}",
            f"--backoff-reset={self.reset_after:g}",
        ]


@dataclass
class ServiceSpec:
    """One service the supervisor runs."""

    name: str
    argv: list[str]
    log: str
    """File its standard output and error are appended to, across restarts."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables set on top of the supervisor's own environment."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServiceSpec:
        return cls(
            name=str(data["name"]),
            argv=[str(a) for a in data["argv"]],
            log=str(data["log"]),
            env={str(k): str(v) for k, v in data.get("env", {}).items()},
        )


@dataclass
class ServiceStatus:
    """What the supervisor knows of one service."""

    name: str
    process: ProcessRecord | None = None
    """The running process; None while the service waits to be started again."""
    restarts: int = 0
    """How often it was started again after an exit."""
    last_exit_code: int | None = None
    """Its last exit status, when it exited by itself."""
    last_exit_signal: str | None = None
    """The signal that ended it last, e.g. ``SIGKILL``."""
    last_exit_at: str = ""
    """When it last exited (ISO 8601, UTC); empty if it never did."""
    restart_at: str = ""
    """While it waits: when it is started again (ISO 8601, UTC)."""

    @property
    def last_exit(self) -> str:
        """``signal SIGKILL``, ``exit code 1``, or empty if it never exited."""
        if self.last_exit_signal:
            return f"signal {self.last_exit_signal}"
        if self.last_exit_code is not None:
            return f"exit code {self.last_exit_code}"
        return ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["process"] = self.process.to_json() if self.process else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServiceStatus:
        process = data.get("process")
        return cls(
            name=str(data["name"]),
            process=ProcessRecord.from_json(process) if process else None,
            restarts=int(data.get("restarts", 0)),
            last_exit_code=data.get("last_exit_code"),
            last_exit_signal=data.get("last_exit_signal"),
            last_exit_at=str(data.get("last_exit_at", "")),
            restart_at=str(data.get("restart_at", "")),
        )


def write_spec(directory: Path, services: Sequence[ServiceSpec]) -> None:
    """Tell the supervisor of ``directory`` to run ``services`` (in this order)."""
    _write_json(directory / SPEC_FILE, {"services": [s.to_json() for s in services]})


def read_spec(directory: Path) -> list[ServiceSpec]:
    """The services of ``directory``'s spec; none if there is no spec yet."""
    try:
        data = json.loads((directory / SPEC_FILE).read_text())
    except FileNotFoundError:
        return []
    return [ServiceSpec.from_json(s) for s in data["services"]]


def read_status(directory: Path) -> list[ServiceStatus] | None:
    """The services' status as the supervisor of ``directory`` last wrote it; None when
    it has written none (no supervisor, or it is just starting)."""
    try:
        data = json.loads((directory / STATUS_FILE).read_text())
    except FileNotFoundError:
        return None
    return [ServiceStatus.from_json(s) for s in data["services"]]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass
class _Running:
    """The supervisor's own bookkeeping of one service."""

    spec: ServiceSpec
    status: ServiceStatus
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    """Monotonic time of the current process's start."""
    delay: float | None = None
    """The last backoff waited (None: never waited)."""
    restart_at: float | None = None
    """Monotonic time to start it again, while it waits."""


class Supervisor:
    """Runs the services of one cluster's spec, each restarted on exit (see module docs).

    :meth:`step` does one round of work and is what :meth:`run` repeats; tests drive it
    directly. ``clock`` is monotonic seconds.
    """

    def __init__(
        self,
        directory: Path,
        backoff: RestartBackoff | None = None,
        *,
        die_with_parent: bool = False,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.backoff = backoff or RestartBackoff()
        self.die_with_parent = die_with_parent
        self.out = out if out is not None else sys.stderr
        self.clock = clock
        self.services: dict[str, _Running] = {}
        self._spec_seen: tuple[int, int, int] | None = None
        self._stopping = False

    def say(self, message: str) -> None:
        print(f"{_now_iso()} {message}", file=self.out, flush=True)

    def run(self) -> int:
        """Supervise until SIGTERM or SIGINT, then stop every service; returns 0."""

        def stop_soon(signum: int, _frame: FrameType | None) -> None:
            self._stopping = True

        signal.signal(signal.SIGTERM, stop_soon)
        signal.signal(signal.SIGINT, stop_soon)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.say(
            f"supervising the services of {self.directory} (pid {os.getpid()}; restart "
            f"backoff {self.backoff.initial:g}s doubling to {self.backoff.maximum:g}s, "
            f"reset after {self.backoff.reset_after:g}s running)"
        )
        self._write_status()
        while not self._stopping:
            self.step()
            time.sleep(POLL_SECONDS)
        self.shutdown()
        return 0

    def step(self) -> None:
        """Start new services of the spec, record exits, start again those whose backoff
        has passed, and write the status file if anything changed."""
        changed = self._read_spec()
        now = self.clock()
        for service in self.services.values():
            if service.proc is not None:
                code = service.proc.poll()
                if code is not None:
                    self._exited(service, code, now)
                    changed = True
            elif service.restart_at is not None and now >= service.restart_at:
                service.status.restarts += 1
                self._start(service, now)
                changed = True
        if changed:
            self._write_status()

    def shutdown(self) -> None:
        """Stop every service (reverse start order) and record how each exited."""
        self._stopping = True
        running = [s for s in self.services.values() if s.status.process is not None]
        self.say(f"stopping {', '.join(s.spec.name for s in running) or 'nothing'}")
        stop(
            [s.status.process for s in reversed(running) if s.status.process is not None],
            grace=STOP_GRACE_SECONDS,
        )
        for service in self.services.values():
            if service.proc is not None:
                self._record_exit(service, service.proc.poll())
            service.status.process = None
            service.proc = None
            service.restart_at = None
            service.status.restart_at = ""
        self._write_status()

    def _read_spec(self) -> bool:
        path = self.directory / SPEC_FILE
        try:
            info = path.stat()
        except FileNotFoundError:
            return False
        seen = (info.st_ino, info.st_mtime_ns, info.st_size)
        if seen == self._spec_seen:
            return False
        self._spec_seen = seen
        try:
            specs = read_spec(self.directory)
        except (ValueError, KeyError, TypeError) as err:
            self.say(f"ignoring {path}, which is not a valid spec: {err}")
            return False
        changed = self._replace([s for s in specs if self._changed(s)])
        for spec in specs:
            if spec.name in self.services:
                continue
            service = _Running(spec=spec, status=ServiceStatus(name=spec.name))
            self.services[spec.name] = service
            self._start(service, self.clock())
            changed = True
        return changed

    def _changed(self, spec: ServiceSpec) -> bool:
        service = self.services.get(spec.name)
        return service is not None and service.spec != spec

    def _replace(self, specs: list[ServiceSpec]) -> bool:
        """Run the services of ``specs`` (already running ones whose spec changed) by their
        new specs: every old process is stopped first (reverse spec order, as
        :meth:`shutdown`), then each is started at once, its backoff forgotten. A
        replacement is not a restart: ``restarts`` stays as it was."""
        if not specs:
            return False
        replaced = [self.services[s.name] for s in specs]
        self.say(f"spec changed: replacing {', '.join(s.name for s in specs)}")
        stop(
            [s.status.process for s in reversed(replaced) if s.status.process is not None],
            grace=STOP_GRACE_SECONDS,
        )
        now = self.clock()
        for service, spec in zip(replaced, specs, strict=True):
            if service.proc is not None:
                self._record_exit(service, service.proc.poll())
            service.spec = spec
            service.proc = None
            service.status.process = None
            service.delay = None
            service.restart_at = None
            self._log_marker(spec, "started again by the supervisor with a changed spec")
            self._start(service, now)
        return True

    @staticmethod
    def _log_marker(spec: ServiceSpec, what: str) -> None:
        log = Path(spec.log)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write(f"--- {_now_iso()} {what} ---\n")

    def _start(self, service: _Running, now: float) -> None:
        spec = service.spec
        log = Path(spec.log)
        if service.status.restarts and service.restart_at is not None:
            self._log_marker(
                spec,
                f"started again by the supervisor (restart {service.status.restarts}; last exit: "
                f"{service.status.last_exit})",
            )
        try:
            proc, record = spawn(
                spec.name,
                spec.argv,
                log,
                env={**os.environ, **spec.env},
                cwd=self.directory,
                die_with_parent=self.die_with_parent,
            )
        except OSError as err:
            # Not startable at all (a missing executable): treated as an exit, retried.
            self.say(f"{spec.name} could not be started: {err}")
            service.started = now
            self._exited(service, 127, now)
            return
        service.proc = proc
        service.started = now
        service.restart_at = None
        service.status.process = record
        service.status.restart_at = ""
        self.say(f"started {spec.name} (pid {record.pid})")

    def _exited(self, service: _Running, code: int, now: float) -> None:
        ran_for = now - service.started
        self._record_exit(service, code)
        service.proc = None
        service.status.process = None
        delay = self.backoff.next_delay(service.delay, ran_for)
        service.delay = delay
        service.restart_at = now + delay
        service.status.restart_at = (
            datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=delay)
        ).isoformat(timespec="seconds")
        self.say(
            f"{service.spec.name} exited ({service.status.last_exit}) after {ran_for:.1f}s; "
            f"starting it again in {delay:g}s"
        )

    @staticmethod
    def _record_exit(service: _Running, code: int | None) -> None:
        if code is None:
            return
        status = service.status
        status.last_exit_at = _now_iso()
        if code < 0:
            status.last_exit_signal = _signal_name(-code)
            status.last_exit_code = None
        else:
            status.last_exit_signal = None
            status.last_exit_code = code

    def _write_status(self) -> None:
        _write_json(
            self.directory / STATUS_FILE,
            {
                "pid": os.getpid(),
                "updated_at": _now_iso(),
                "services": [s.status.to_json() for s in self.services.values()],
            },
        )
