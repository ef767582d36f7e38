"""The suite's ledger: what each test module costs, so that the budget in
``docs/testing.md`` can be kept as controllers multiply.

For every test module it adds up the time of each test's setup, call and teardown, and
counts the local control planes started while that module's tests ran (a package- or
session-scoped cluster counts for the module whose test first asked for it), with the
time their start took. At the end of the session the figures go to
``.test-results/ledger.json`` (``STEWARD_TEST_LEDGER`` chooses another file), and the
terminal summary prints them per package with the controllers over their budget named.
``scripts/test-ledger.py`` turns the file into the table of ``docs/testing.md``.

Under pytest-xdist the process that starts a control plane (a worker) is not the one
that keeps the ledger (the controller): each start rides on the report of the test phase
it happened in (attribute ``steward_control_planes``), which xdist carries over, and
only the controller writes the file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import LocalCluster

CONTROLLER_BUDGET_S = 90.0
"""What one controller's tests (``tests/controllers/<name>``) may take in a clean run."""

LEDGER = Path(".test-results") / "ledger.json"


@dataclass
class Module:
    """One test module's cost."""

    seconds: float = 0.0
    tests: int = 0
    control_planes: int = 0
    real_node_control_planes: int = 0
    control_plane_seconds: float = 0.0


@dataclass
class Ledger:
    modules: dict[str, Module] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def module(self, name: str) -> Module:
        return self.modules.setdefault(name, Module())

    def add_report(self, report: pytest.TestReport) -> None:
        entry = self.module(module_of(report.nodeid))
        entry.seconds += report.duration
        if report.when == "call":
            entry.tests += 1

    def add_control_plane(self, nodeid: str, real_nodes: int, seconds: float) -> None:
        entry = self.module(module_of(nodeid))
        entry.control_planes += 1
        entry.real_node_control_planes += real_nodes > 0
        entry.control_plane_seconds += seconds

    def packages(self) -> dict[str, Module]:
        """The modules summed per package (``tests/<topic>`` or
        ``tests/controllers/<name>``)."""
        out: dict[str, Module] = {}
        for name, m in self.modules.items():
            total = out.setdefault(package_of(name), Module())
            total.seconds += m.seconds
            total.tests += m.tests
            total.control_planes += m.control_planes
            total.real_node_control_planes += m.real_node_control_planes
            total.control_plane_seconds += m.control_plane_seconds
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_seconds": round(time.monotonic() - self.started, 1),
            "modules": {
                n: {k: round(v, 1) if isinstance(v, float) else v for k, v in asdict(m).items()}
                for n, m in sorted(self.modules.items())
            },
        }


def module_of(nodeid: str) -> str:
    """``tests/a/test_b.py::test_c[x] (call)`` → ``tests/a/test_b.py``."""
    return nodeid.split("::")[0].split(" ")[0]


def package_of(module: str) -> str:
    parts = module.split("/")
    depth = 3 if len(parts) > 3 and parts[1] == "controllers" else 2
    return "/".join(parts[:depth]) if len(parts) > depth else module


def over_budget(packages: dict[str, Module]) -> list[str]:
    """The controllers' packages whose tests took longer than :data:`CONTROLLER_BUDGET_S`."""
    return sorted(
        name
        for name, m in packages.items()
        if name.startswith("tests/controllers/") and m.seconds > CONTROLLER_BUDGET_S
    )


_ledger = Ledger()

_started: list[tuple[int, float]] = []
"""Control planes started in this process since the last report: (real nodes, seconds)."""


def _counting(up: Callable[..., LocalCluster]) -> Callable[..., LocalCluster]:
    def counted(cls: type[LocalCluster], config: Any, **kwargs: Any) -> LocalCluster:
        began = time.monotonic()
        running = up(cls, config, **kwargs)
        _started.append((config.real_nodes, round(time.monotonic() - began, 1)))
        return running

    return counted


@pytest.fixture(scope="session", autouse=True)
def _count_control_planes() -> Iterator[None]:
    original = LocalCluster.__dict__["up"]
    setattr(LocalCluster, "up", classmethod(_counting(original.__func__)))  # noqa: B010
    try:
        yield
    finally:
        setattr(LocalCluster, "up", original)  # noqa: B010


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """The control planes started during this phase of the test ride on its report."""
    outcome = yield
    report = outcome.get_result()
    report.steward_control_planes = [list(s) for s in _started]
    _started.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _ledger.add_report(report)
    for real_nodes, seconds in getattr(report, "steward_control_planes", ()):
        _ledger.add_control_plane(report.nodeid, real_nodes, seconds)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller keeps the ledger
    path = Path(os.environ.get("STEWARD_TEST_LEDGER") or session.config.rootpath / LEDGER)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_ledger.to_json(), indent=1) + "\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    packages = _ledger.packages()
    if not packages:
        return
    write = terminalreporter.write_line
    terminalreporter.section("time per package (the ledger, docs/testing.md)")
    write(f"{'package':<40} {'seconds':>8} {'tests':>6} {'control planes':>15}")
    for name, m in sorted(packages.items(), key=lambda kv: -kv[1].seconds):
        planes = f"{m.control_planes} ({m.control_plane_seconds:.0f} s)"
        write(f"{name:<40} {m.seconds:>8.0f} {m.tests:>6} {planes:>15}")
    total = sum(m.seconds for m in packages.values())
    write(f"{'total':<40} {total:>8.0f} {sum(m.tests for m in packages.values()):>6}")
    for name in over_budget(packages):
        write(
            f"over budget: {name} took {packages[name].seconds:.0f} s, more than the "
            f"{CONTROLLER_BUDGET_S:.0f} s a controller's tests may take (docs/testing.md)"
        )
