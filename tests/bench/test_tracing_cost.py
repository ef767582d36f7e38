"""The cost of tracing in the controllers benchmark (bench/controllers.py): the order of its
rounds, how dropped spans are counted, and the cost computed from the rounds' means."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import controllers

pytestmark = pytest.mark.unit


def test_rounds_alternate_off_on_on_off() -> None:
    assert controllers.tracing_order(4) == [False, True, True, False]
    assert controllers.tracing_order(8) == [False, True, True, False] * 2
    assert controllers.tracing_order(0) == []


def _round(traced: bool, jobs_per_s: float, cpu: float, api: float, dropped: int = 0) -> Any:
    return {
        "traced": traced,
        "seconds": 500 / jobs_per_s,
        "jobs_per_s": jobs_per_s,
        "steward_cpu_per_job": cpu,
        "apiserver_cpu_per_job": api,
        "spans_dropped": dropped,
    }


def test_cost_is_from_the_means_of_the_rounds_on_and_off() -> None:
    rounds = [
        _round(False, 30.0, 0.020, 0.035),
        _round(True, 24.0, 0.026, 0.036, dropped=3),
        _round(True, 26.0, 0.024, 0.036, dropped=1),
        _round(False, 20.0, 0.020, 0.035),
    ]
    result = controllers.summarize_tracing(rounds)
    assert result["rounds"] == rounds
    assert result["throughput_cost"] == pytest.approx(0.0)  # mean 25 on, 25 off
    assert result["cpu_cost"] == pytest.approx(0.25)
    assert result["apiserver_cpu_cost"] == pytest.approx(0.029, abs=1e-3)
    assert result["spans_dropped"] == 4
    rows = controllers._tracing_rows(result)
    assert "off 30, on 24, on 26, off 20" in rows[0][2]
    assert "throughput 0.0 %" in rows[1][2] and "+25.0 %" in rows[1][2]
    assert "spans dropped 4" in rows[1][2]


def test_one_kind_of_round_alone_gives_no_cost() -> None:
    assert controllers.summarize_tracing([_round(False, 30.0, 0.02, 0.03)]) == {
        "rounds": [_round(False, 30.0, 0.02, 0.03)]
    }


def test_dropped_spans_are_counted_in_what_the_logs_gained(tmp_path: Path) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in controllers.STEWARD_PROCESSES}
    cluster: Any = SimpleNamespace(state=SimpleNamespace(log=lambda name: logs[name]))
    informer = logs["informer"]
    informer.write_text(f"WARNING {controllers.SPANS_DROPPED} span.\n")
    since = controllers.log_sizes(cluster)
    assert since["informer"] == informer.stat().st_size and since["manager"] == 0
    with informer.open("a") as f:
        f.write(f"x\nWARNING {controllers.SPANS_DROPPED} span.\n" * 2)
    logs["job-controller"].write_text(f"{controllers.SPANS_DROPPED} span.\n")
    assert controllers.spans_dropped(cluster, since) == 3
