"""The suite's ledger (``tests/ledger.py``) and its table (``scripts/test-ledger.py``):
times add up per module and per package, control planes are counted where they were
started, and a controller's package over its budget is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import pytest

from tests import ledger as ledger_module
from tests.ledger import CONTROLLER_BUDGET_S, Ledger, over_budget, package_of

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def report(nodeid: str, when: str, seconds: float) -> pytest.TestReport:
    return SimpleNamespace(nodeid=nodeid, when=when, duration=seconds)  # type: ignore[return-value]


def test_a_controllers_modules_make_one_package_other_topics_one_each() -> None:
    assert package_of("tests/controllers/job/test_scenarios.py") == "tests/controllers/job"
    assert package_of("tests/informer/test_wire.py") == "tests/informer"


def test_phases_add_up_and_control_planes_count_for_the_module_that_started_them() -> None:
    ledger = Ledger()
    a = "tests/controllers/job/test_a.py::test_x[1]"
    b = "tests/controllers/job/test_b.py::test_y"
    for nodeid, when, seconds in [(a, "setup", 20.0), (a, "call", 50.0), (a, "teardown", 5.0)]:
        ledger.add_report(report(nodeid, when, seconds))
    ledger.add_report(report(b, "call", 30.0))
    ledger.add_control_plane(f"{a} (setup)", real_nodes=0, seconds=9.0)
    ledger.add_control_plane(f"{b} (call)", real_nodes=2, seconds=25.0)
    modules = ledger.modules
    assert modules["tests/controllers/job/test_a.py"].seconds == 75.0
    assert modules["tests/controllers/job/test_a.py"].tests == 1
    assert modules["tests/controllers/job/test_a.py"].control_planes == 1
    assert modules["tests/controllers/job/test_b.py"].real_node_control_planes == 1
    job = ledger.packages()["tests/controllers/job"]
    assert (job.seconds, job.tests, job.control_planes) == (105.0, 2, 2)
    assert over_budget(ledger.packages()) == ["tests/controllers/job"]


def test_only_controllers_have_the_budget() -> None:
    ledger = Ledger()
    ledger.add_report(report("tests/images/test_build.py::t", "call", CONTROLLER_BUDGET_S * 3))
    ledger.add_report(report("tests/controllers/hpa/test_s.py::t", "call", CONTROLLER_BUDGET_S))
    assert over_budget(ledger.packages()) == []


def test_the_table_sums_packages_and_marks_those_over_budget(tmp_path: Path) -> None:
    ledger = Ledger()
    ledger.add_report(report("tests/controllers/job/test_a.py::t", "call", 60.0))
    ledger.add_report(report("tests/controllers/job/test_b.py::t", "call", 40.0))
    ledger.add_report(report("tests/informer/test_wire.py::t", "call", 3.0))
    ledger.add_control_plane("tests/controllers/job/test_a.py::t (setup)", 1, 20.0)
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(ledger.to_json()))
    table = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test-ledger.py"), str(path), "--run", "here"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "| **tests/controllers/job** — over the 90 s budget | **100** | **2** |" in table
    assert "| test_a.py | 60 | 1 | 1 (1 real-node) |" in table
    assert "| **tests/informer/test_wire.py** |" not in table
    assert "| **tests/informer** | **3** | **1** | **0** |" in table
    assert table.rstrip().endswith("| **total** | **103** | **3** | **1 (1 real-node)** |")


def test_a_control_plane_rides_on_its_phases_report_as_xdist_carries_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under pytest-xdist a worker starts the control plane and the controller keeps the
    ledger: the start must survive the report's trip between them, once per start."""
    monkeypatch.setattr(ledger_module, "_ledger", Ledger())
    monkeypatch.setattr(ledger_module, "_started", [(2, 25.0)])
    nodeid = "tests/pods/test_pods.py::test_x@machine"

    def phase(when: Literal["setup", "call", "teardown"]) -> pytest.TestReport:
        made = pytest.TestReport(nodeid, ("f", 1, "x"), {}, "passed", None, when, duration=1.0)
        hook = ledger_module.pytest_runtest_makereport(None, None)  # type: ignore[arg-type]
        next(hook)
        with pytest.raises(StopIteration):
            hook.send(SimpleNamespace(get_result=lambda: made))
        return pytest.TestReport._from_json(made._to_json())  # as xdist serializes it

    for when in ("setup", "call", "teardown"):
        ledger_module.pytest_runtest_logreport(phase(when))
    module = ledger_module._ledger.modules["tests/pods/test_pods.py"]
    assert (module.control_planes, module.real_node_control_planes) == (1, 1)
    assert (module.control_plane_seconds, module.seconds, module.tests) == (25.0, 3.0, 1)
