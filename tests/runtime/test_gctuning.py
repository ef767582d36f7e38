"""The garbage collector settings of Steward's processes (steward.gctuning)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from steward import gctuning

pytestmark = pytest.mark.unit


def test_threshold_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gctuning.ENV, raising=False)
    assert gctuning.threshold_from_env() == gctuning.YOUNG_THRESHOLD == 50_000
    monkeypatch.setenv(gctuning.ENV, "1234")
    assert gctuning.threshold_from_env() == 1234
    monkeypatch.setenv(gctuning.ENV, "0")
    assert gctuning.threshold_from_env() == 0
    monkeypatch.setenv(gctuning.ENV, "-5")
    with pytest.raises(ValueError, match="STEWARD_GC_THRESHOLD must be a non-negative integer"):
        gctuning.threshold_from_env()


def _in_a_fresh_process(code: str, env: dict[str, str] | None = None) -> str:
    import os

    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return result.stdout.strip()


PROBE = (
    "import gc; from steward import gctuning; gctuning.tune(); "
    "print(gc.get_threshold()[0], gc.get_freeze_count() > 0)"
)


def test_tune_raises_the_young_threshold_and_freezes_start_up() -> None:
    # A process of its own: the test runner's collector is left as it is.
    assert _in_a_fresh_process(PROBE, {gctuning.ENV: ""}) == "50000 True"
    assert _in_a_fresh_process(PROBE, {gctuning.ENV: "9000"}) == "9000 True"
    default = _in_a_fresh_process("import gc; print(gc.get_threshold()[0])")
    assert _in_a_fresh_process(PROBE, {gctuning.ENV: "0"}) == f"{default} False"
