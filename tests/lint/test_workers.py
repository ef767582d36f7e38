"""The suite's split over pytest-xdist workers (tests/workers.py): a package stays in one
worker, the tests that change the machine share one group, the groups go out heaviest
first, and a test that starts real nodes outside the machine's group is stopped before it
starts them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import workers

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_a_test_runs_with_its_package_or_in_the_machines_group() -> None:
    assert workers.group_of("tests/controllers/job/test_a.py::t[1]") == "tests/controllers/job"
    assert workers.group_of("tests/informer/test_wire.py::t") == "tests/informer"
    assert workers.group_of("tests/pods/test_pods.py::t") == "machine"
    assert workers.group_of("tests/images/test_build.py::t[x]") == "machine"
    assert workers.group_of("tests/cluster/test_real_node_services.py::t") == "machine"
    assert workers.group_of("tests/cluster/test_nodes.py::t") == "tests/cluster"


def test_heaviest_groups_go_first_and_collection_order_stays_within() -> None:
    ids = [
        "tests/informer/test_a.py::t",
        "tests/cluster/test_real_node_services.py::t",
        "tests/cluster/test_b.py::t",
        "tests/pods/test_pods.py::t1",
        "tests/lint/test_c.py::t",
        "tests/pods/test_pods.py::t2",
    ]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    workers.order_heaviest_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/cluster/test_real_node_services.py::t",
        "tests/pods/test_pods.py::t1",
        "tests/pods/test_pods.py::t2",
        "tests/cluster/test_b.py::t",
        "tests/informer/test_a.py::t",
        "tests/lint/test_c.py::t",
    ]


def test_real_nodes_outside_the_machines_group_fail_before_they_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/cluster/test_x.py::t (setup)")
    with pytest.raises(pytest.fail.Exception, match="outside the modules"):
        workers.check_machine_test()
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/pods/test_pods.py::t (setup)")
    workers.check_machine_test()


def test_every_module_that_starts_real_nodes_is_in_the_machines_group() -> None:
    """A static read of the suite (the runtime check catches what it misses, but only
    when that test runs)."""
    tests = REPO / "tests"
    call = re.compile(r"^\s+require_real_nodes\(\)$", re.MULTILINE)
    starting = [p for p in tests.rglob("test_*.py") if call.search(p.read_text())]
    assert len(starting) >= 3, starting  # pods, upstream conformance, real-node Services
    outside = [str(p) for p in starting if workers.group_of(str(p.relative_to(REPO))) != "machine"]
    assert outside == []


def test_two_workers_keep_each_group_in_one_of_them(tmp_path: Path) -> None:
    """A real xdist run of a small suite with this scheduler: every group's tests ran in
    one worker, and both workers had work."""
    for package, modules in {
        "tests/a": 2,
        "tests/b": 2,
        "tests/pods": 1,
        "tests/images": 1,
    }.items():
        for m in range(modules):
            path = tmp_path / package / f"test_{package[6:]}_{m}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                "import os, pytest\n"
                "@pytest.mark.parametrize('i', range(4))\n"
                "def test_x(i):\n"
                "    with open(os.environ['LOG'], 'a') as f:\n"
                "        f.write(os.environ['PYTEST_XDIST_WORKER'] + ' '"
                " + os.environ['PYTEST_CURRENT_TEST'] + '\\n')\n"
            )
    (tmp_path / "conftest.py").write_text(
        "from tests.workers import order_heaviest_first, pytest_xdist_make_scheduler\n"
        "def pytest_collection_modifyitems(items):\n"
        "    order_heaviest_first(items)\n"
    )
    log = tmp_path / "log"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            "/dev/null",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        env={"PATH": "/usr/bin:/bin", "LOG": str(log), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        worker, nodeid = line.split(" ", 2)[:2]
        ran.setdefault(workers.group_of(nodeid), set()).add(worker)
    assert set(ran) == {"tests/a", "tests/b", "machine"}
    assert all(len(w) == 1 for w in ran.values()), ran
    assert len(set().union(*ran.values())) == 2, ran
