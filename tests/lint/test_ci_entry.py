"""CI's entry point (``.ci/run``) runs every test tier whatever the caller's environment
says: neither ``PYTEST_ARGS`` (which make takes from the environment, or from ``MAKEFLAGS``)
nor ``PYTEST_ADDOPTS`` (which pytest reads) reach the tests.

The script runs for real (bash) in a copy of the repository's root holding ``.ci/run`` and
the ``Makefile``, with a ``make`` on ``PATH`` that records its arguments and environment
and then asks the real make what the ``Makefile``'s ``$(PYTEST_ARGS)`` comes to with
them, in place of running the ``test`` target; ``pgrep`` is stubbed too, so that the
script's backstop does not see this test run's own processes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

MAKE_STUB = """#!/usr/bin/env bash
# Record the arguments and the environment, then print what the Makefile's PYTEST_ARGS
# is with those arguments (the goal "test" replaced by a probe target).
printf '%s\\0' "$@" > {record}/args
env -0 > {record}/env
args=()
for a in "$@"; do [[ $a == test ]] || args+=("$a"); done
exec {make} --no-print-directory "${{args[@]}}" \\
  --eval 'ci-probe: ; @printf "%s" "$(PYTEST_ARGS)" > {record}/pytest-args' ci-probe
"""

CALLER = {
    "PYTEST_ARGS": "-m unit",
    "PYTEST_ADDOPTS": "-m unit -x",
    "MAKEFLAGS": "PYTEST_ARGS=-m\\ unit",
}
"""A caller's environment that, passed on, would narrow the run to the unit tier."""


def _run_ci(tmp_path: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    """Run a copy of ``.ci/run`` under ``env`` with the stubs; returns make's arguments,
    make's environment and the Makefile's PYTEST_ARGS as make sees them."""
    make = shutil.which("make")
    if make is None:
        skip_or_fail("no make on PATH")
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", repo / ".ci" / "run")
    shutil.copy2(ROOT / "Makefile", repo / "Makefile")
    record = tmp_path / "record"
    record.mkdir()
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "make").write_text(MAKE_STUB.format(record=record, make=make))
    (stubs / "pgrep").write_text("#!/bin/sh\nexit 1\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {**env, "PATH": f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    done = subprocess.run(
        ["bash", str(repo / ".ci" / "run")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    args = (record / "args").read_text().split("\0")[:-1]
    pairs = (entry.split("=", 1) for entry in (record / "env").read_text().split("\0") if entry)
    return args, dict(pairs), (record / "pytest-args").read_text()


def test_ci_runs_every_tier_whatever_the_callers_environment(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), **CALLER}
    args, make_env, pytest_args = _run_ci(tmp_path, env)
    assert args[0] == "test", args
    assert make_env.get("CI") == "true"
    for name in CALLER:
        assert name not in make_env, (name, make_env.get(name))
    assert pytest_args == "", f"make test would run pytest {pytest_args}"


def test_the_probe_sees_what_the_caller_passes(tmp_path: Path) -> None:
    """The stubs' own check: without .ci/run in between, make does take PYTEST_ARGS from
    the environment, so the case above would see one that reached it."""
    make = shutil.which("make")
    assert make is not None
    (tmp_path / "Makefile").write_bytes((ROOT / "Makefile").read_bytes())
    for env in ({"PYTEST_ARGS": "-m unit"}, {"MAKEFLAGS": "PYTEST_ARGS=-m\\ unit"}):
        probe = subprocess.run(
            [
                make,
                "--no-print-directory",
                "-C",
                str(tmp_path),
                "--eval",
                'ci-probe: ; @printf "%s" "$(PYTEST_ARGS)"',
                "ci-probe",
            ],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
            capture_output=True,
            text=True,
            check=True,
        )
        assert probe.stdout == "-m unit", (env, probe.stdout, probe.stderr)
