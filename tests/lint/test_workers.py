"""The suite's split over pytest-xdist workers (tests/conftest.py): a package stays in one
worker, the tests that change the machine share one group, and a test that starts real
nodes without saying so is stopped before it starts them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest

pytestmark = pytest.mark.unit


def item(nodeid: str, *, machine: bool = False) -> pytest.Item:
    marker = pytest.mark.machine.mark if machine else None
    return SimpleNamespace(  # type: ignore[return-value]
        nodeid=nodeid, get_closest_marker=lambda name: marker if name == "machine" else None
    )


def test_a_test_runs_with_its_package_or_in_the_machines_group() -> None:
    assert conftest.group_of(item("tests/controllers/job/test_a.py::t[1]")) == (
        "tests/controllers/job"
    )
    assert conftest.group_of(item("tests/informer/test_wire.py::t")) == "tests/informer"
    assert conftest.group_of(item("tests/pods/test_pods.py::t", machine=True)) == "machine"


def test_real_nodes_outside_the_machines_group_fail_before_they_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conftest, "_machine_tests", {"tests/pods/test_pods.py::t"})
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/cluster/test_x.py::t@tests/cluster (setup)")
    with pytest.raises(pytest.fail.Exception, match="not marked 'machine'"):
        conftest.require_real_nodes()


def test_every_module_that_starts_real_nodes_is_in_the_machines_group() -> None:
    """A static read of the suite: ``require_real_nodes()`` in a module means it is marked
    (the runtime check above catches what this misses, but only when the test runs)."""
    tests = Path(conftest.__file__).parent
    starting = [p for p in tests.rglob("test_*.py") if "require_real_nodes()" in p.read_text()]
    assert len(starting) >= 3, starting  # pods, upstream conformance, real-node Services
    unmarked = [str(p) for p in starting if "pytest.mark.machine" not in p.read_text()]
    assert unmarked == []
