"""The supervisor of Steward's services: kubelet's restart backoff, restarts on exit with
the exit recorded, new services picked up from the spec, and a clean stop."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from steward.cluster.supervisor import (
    RestartBackoff,
    ServiceSpec,
    ServiceStatus,
    Supervisor,
    read_status,
    write_spec,
)
from tests.polling import wait_for

pytestmark = pytest.mark.unit

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


# The policy -------------------------------------------------------------------------------


def test_backoff_defaults_are_kubelets() -> None:
    backoff = RestartBackoff()
    assert (backoff.initial, backoff.maximum, backoff.reset_after) == (10.0, 300.0, 600.0)


def test_backoff_doubles_from_10s_up_to_5_minutes() -> None:
    backoff = RestartBackoff()
    delays: list[float] = []
    previous: float | None = None
    for _ in range(8):
        previous = backoff.next_delay(previous, ran_for=1.0)
        delays.append(previous)
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]


def test_backoff_starts_over_after_10_minutes_of_running() -> None:
    backoff = RestartBackoff()
    assert backoff.next_delay(300.0, ran_for=599.9) == 300.0
    assert backoff.next_delay(300.0, ran_for=600.0) == 10.0
    assert backoff.next_delay(80.0, ran_for=3600.0) == 10.0


def test_backoff_times_are_configurable() -> None:
    backoff = RestartBackoff(initial=1, maximum=3, reset_after=5)
    assert backoff.next_delay(None, ran_for=0) == 1
    assert backoff.next_delay(1, ran_for=0) == 2
    assert backoff.next_delay(2, ran_for=0) == 3
    assert backoff.next_delay(3, ran_for=4.9) == 3
    assert backoff.next_delay(3, ran_for=5) == 1
    assert backoff.args() == ["--backoff-initial=1", "--backoff-max=3", "--backoff-reset=5"]


@pytest.mark.parametrize(
    ("initial", "maximum", "reset_after", "message"),
    [
        (0, 300, 600, "initial must be a positive number"),
        (10, 300, -1, "reset_after must be a positive number"),
        (float("nan"), 300, 600, "initial must be a positive number"),
        (10, 5, 600, r"maximum \(5\) is below initial \(10\)"),
    ],
)
def test_backoff_refuses_nonsense(
    initial: float, maximum: float, reset_after: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RestartBackoff(initial, maximum, reset_after)


def test_last_exit_says_how() -> None:
    assert ServiceStatus("x").last_exit == ""
    assert ServiceStatus("x", last_exit_signal="SIGKILL").last_exit == "signal SIGKILL"
    assert ServiceStatus("x", last_exit_code=3).last_exit == "exit code 3"


# The supervisor, driven step by step on a clock of the test's own -----------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _status(directory: Path) -> dict[str, ServiceStatus]:
    return {s.name: s for s in read_status(directory) or []}


def _step_until(supervisor: Supervisor, check: Callable[[], object], what: str) -> None:
    def stepped() -> bool:
        supervisor.step()
        return bool(check())

    wait_for(stepped, what, within=10)


def test_a_killed_service_is_started_again_after_the_backoff(tmp_path: Path) -> None:
    clock = FakeClock()
    supervisor = Supervisor(
        tmp_path, RestartBackoff(initial=10, maximum=15), out=io.StringIO(), clock=clock
    )
    write_spec(tmp_path, [ServiceSpec("sleeper", SLEEPER, str(tmp_path / "sleeper.log"))])
    try:
        supervisor.step()
        first = _status(tmp_path)["sleeper"]
        assert first.process is not None and first.process.alive()
        assert first.restarts == 0 and first.last_exit == ""

        clock.now += 30
        os.kill(first.process.pid, signal.SIGKILL)
        _step_until(supervisor, lambda: _status(tmp_path)["sleeper"].last_exit, "the exit")
        waiting = _status(tmp_path)["sleeper"]
        assert waiting.process is None
        assert waiting.last_exit == "signal SIGKILL"
        assert waiting.last_exit_at and waiting.restart_at
        assert waiting.restarts == 0

        clock.now += 9.9  # not yet: the first restart waits 10 s
        supervisor.step()
        assert _status(tmp_path)["sleeper"].process is None
        clock.now += 0.1
        supervisor.step()
        second = _status(tmp_path)["sleeper"]
        assert second.process is not None and second.process.alive()
        assert second.process.pid != first.process.pid
        assert (second.restarts, second.last_exit, second.restart_at) == (1, "signal SIGKILL", "")

        # It exits by itself at once: the next wait is doubled, up to the maximum.
        os.kill(second.process.pid, signal.SIGTERM)
        _step_until(
            supervisor, lambda: _status(tmp_path)["sleeper"].process is None, "the second exit"
        )
        assert _status(tmp_path)["sleeper"].last_exit == "signal SIGTERM"
        clock.now += 14.9
        supervisor.step()
        assert _status(tmp_path)["sleeper"].process is None
        clock.now += 0.1
        supervisor.step()
        assert _status(tmp_path)["sleeper"].restarts == 2
        log = (tmp_path / "sleeper.log").read_text()
        assert "started again by the supervisor (restart 2; last exit: signal SIGTERM)" in log
    finally:
        supervisor.shutdown()
    after = _status(tmp_path)["sleeper"]
    assert after.process is None and after.restart_at == ""
    assert after.last_exit == "signal SIGTERM"  # stopped by the supervisor


def test_exit_status_is_recorded(tmp_path: Path) -> None:
    clock = FakeClock()
    supervisor = Supervisor(tmp_path, out=io.StringIO(), clock=clock)
    argv = [sys.executable, "-c", "raise SystemExit(3)"]
    write_spec(tmp_path, [ServiceSpec("failing", argv, str(tmp_path / "failing.log"))])
    try:
        _step_until(supervisor, lambda: _status(tmp_path)["failing"].last_exit, "the exit")
        status = _status(tmp_path)["failing"]
        assert status.last_exit == "exit code 3"
        assert status.process is None
    finally:
        supervisor.shutdown()


def test_an_unstartable_service_is_retried_with_backoff(tmp_path: Path) -> None:
    out = io.StringIO()
    supervisor = Supervisor(tmp_path, out=out, clock=FakeClock())
    missing = str(tmp_path / "no-such-program")
    write_spec(tmp_path, [ServiceSpec("missing", [missing], str(tmp_path / "missing.log"))])
    supervisor.step()
    status = _status(tmp_path)["missing"]
    assert (status.process, status.last_exit) == (None, "exit code 127")
    assert "missing could not be started" in out.getvalue()
    assert status.restart_at
    supervisor.shutdown()  # it waits no longer
    assert _status(tmp_path)["missing"].restart_at == ""


# The supervisor as the process the cluster runs ------------------------------------------


def test_supervisor_process_adds_services_restarts_them_and_stops_them(tmp_path: Path) -> None:
    write_spec(tmp_path, [ServiceSpec("one", SLEEPER, str(tmp_path / "one.log"))])
    with (tmp_path / "supervisor.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "steward.cluster.supervisor",
                f"--state-dir={tmp_path}",
                *RestartBackoff(initial=0.2).args(),
                "--die-with-parent",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        one = wait_for(lambda: _status(tmp_path).get("one"), "service one to run").process
        # A service added later (as `up` adds them one by one) is started too.
        write_spec(
            tmp_path,
            [
                ServiceSpec("one", SLEEPER, str(tmp_path / "one.log")),
                ServiceSpec("two", SLEEPER, str(tmp_path / "two.log")),
            ],
        )
        two = wait_for(lambda: _status(tmp_path).get("two"), "service two to run").process
        assert one is not None and two is not None
        os.kill(one.pid, signal.SIGKILL)

        def restarted() -> ServiceStatus | None:
            status = _status(tmp_path)["one"]
            return status if status.restarts == 1 and status.process else None

        again = wait_for(restarted, "service one to be started again", within=15)
        assert again.last_exit == "signal SIGKILL"
        assert again.process is not None and again.process.alive()
        assert two.alive() and _status(tmp_path)["two"].restarts == 0

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not again.process.alive() and not two.alive()
        assert all(s.process is None for s in _status(tmp_path).values())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = (tmp_path / "supervisor.log").read_text()
    assert "one exited (signal SIGKILL)" in text
    assert "stopping one, two" in text


def test_supervisor_refuses_a_bad_backoff(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "steward.cluster.supervisor",
            f"--state-dir={tmp_path}",
            "--backoff-initial=0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "initial must be a positive number" in out.stderr


def test_a_spec_that_is_not_valid_is_ignored(tmp_path: Path) -> None:
    out = io.StringIO()
    supervisor = Supervisor(tmp_path, out=out, clock=FakeClock())
    (tmp_path / "supervisor-spec.json").write_text('{"services": [{"name": "x"}]}')
    supervisor.step()
    assert supervisor.services == {}
    assert "not a valid spec" in out.getvalue()


def test_a_changed_spec_replaces_the_running_service(tmp_path: Path) -> None:
    """A service whose command or environment changed is stopped and started by its new
    spec at once, with no backoff and not counted as a restart; an unchanged one runs on."""
    clock = FakeClock()
    out = io.StringIO()
    supervisor = Supervisor(tmp_path, out=out, clock=clock)
    env_printer = [
        sys.executable,
        "-c",
        "import os, time; print('MODE=' + os.environ.get('MODE', ''), flush=True); time.sleep(600)",
    ]
    one = ServiceSpec("one", env_printer, str(tmp_path / "one.log"), {"MODE": "off"})
    two = ServiceSpec("two", SLEEPER, str(tmp_path / "two.log"))
    write_spec(tmp_path, [one, two])
    try:
        supervisor.step()
        before = _status(tmp_path)
        first, other = before["one"].process, before["two"].process
        assert first is not None and other is not None
        wait_for(
            lambda: "MODE=off" in (tmp_path / "one.log").read_text(),
            "the first process to print its environment",
            within=10,
        )

        write_spec(tmp_path, [ServiceSpec(one.name, one.argv, one.log, {"MODE": "on"}), two])
        supervisor.step()
        after = _status(tmp_path)
        replaced = after["one"]
        assert replaced.process is not None and replaced.process.pid != first.pid
        assert not first.alive()
        assert (replaced.restarts, replaced.last_exit, replaced.restart_at) == (
            0,
            "signal SIGTERM",
            "",
        )
        assert after["two"].process == other and other.alive()
        assert "spec changed: replacing one" in out.getvalue()
        wait_for(
            lambda: "MODE=on" in (tmp_path / "one.log").read_text(),
            "the new process to print its environment",
            within=10,
        )
        log = (tmp_path / "one.log").read_text()
        assert log.index("MODE=off") < log.index("with a changed spec") < log.index("MODE=on")
    finally:
        supervisor.shutdown()
