"""The one launcher of every controller, ``python -m steward run <name | module:ATTR>``:
a declared name and its definition's ``module:ATTR`` give the same controller (its
``--help`` differs only in the program's name); a target that names no controller
definition is a usage error naming the declared ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from steward import launcher

pytestmark = pytest.mark.unit


def _launch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steward", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_a_name_and_its_definition_run_the_same_controller() -> None:
    by_name = _launch("run", "job", "--help")
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.startswith("usage: python -m steward run job ")
    assert "--take-unmanaged" in by_name.stdout  # the Job controller's own flag
    target = "steward.controllers.job.controller:CONTROLLER"
    by_ref = _launch("run", target, "--help")
    assert by_ref.returncode == 0, by_ref.stderr

    def body(text: str, prog: str) -> str:
        return " ".join(text.replace(prog, "PROG").split())

    assert body(by_ref.stdout, f"python -m steward run {target}") == body(
        by_name.stdout, "python -m steward run job"
    )


def test_list_prints_the_declared_controllers() -> None:
    done = _launch("list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == list(launcher.declared_names())
    assert "job" in done.stdout.split()


def test_an_unknown_name_is_a_usage_error_naming_the_declared_ones() -> None:
    done = _launch("run", "no-such-controller")
    assert done.returncode == 2
    assert "no controller named 'no-such-controller'" in done.stderr
    assert "job" in done.stderr


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("steward.launcher:GROUP", "is not a controller definition"),
        ("steward.launcher:NO_SUCH", "has no NO_SUCH"),
        ("steward.no_such_module:CONTROLLER", "cannot import steward.no_such_module"),
    ],
)
def test_a_target_that_is_no_definition_is_refused(target: str, says: str) -> None:
    with pytest.raises(launcher.LaunchError, match=says):
        launcher.resolve(target)


def test_the_registry_launches_with_this_command() -> None:
    assert launcher.command("job") == ("-m", "steward", "run", "job")
    definition = launcher.resolve("job")
    assert definition.name == "job"
    assert launcher.resolve("steward.controllers.job.controller:CONTROLLER") is definition
