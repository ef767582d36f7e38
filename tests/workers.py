"""The suite over two pytest workers (``make test``: pytest-xdist, ``-n 2``).

Most of the suite's time is spent waiting (on control planes, controllers, metrics
scrapes), not computing, so two workers share the machine's two cores well. What keeps
them from getting in each other's way is the unit of work a worker is given, a *group*:

- a package (``tests/<topic>``, ``tests/controllers/<name>``) is one group, so its
  package-scoped control plane starts once, in one worker;
- the modules of :data:`MACHINE_MODULES` form the one group ``machine``: real nodes,
  containerd and runc change the machine (bridges, iptables, mounts, cgroups), only one
  real-node cluster may run on it at a time, and some of these tests check that the
  machine is left as it was. They run one after the other, in one worker.

The groups are handed out heaviest first (:data:`HEAVIEST_FIRST`, from the ledger of a
clean run, ``docs/test-ledger.md``), so that no long group starts last while the other
worker has nothing left to do.

xdist's own ``--dist loadgroup`` marks groups by rewriting each test's node id, which
pytest 9 no longer allows; the scheduler here computes the group from the node id
instead, and is used whatever ``--dist`` says.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.ledger import module_of, package_of

MACHINE = "machine"
"""The group of the tests that change the machine."""

MACHINE_MODULES = (
    "tests/cluster/test_node_bootstrap.py",
    "tests/cluster/test_node_failure.py",
    "tests/cluster/test_real_node_services.py",
    "tests/images/",
    "tests/pods/",
    "tests/upstream_e2e/test_conformance.py",
)
"""Modules (or whole directories, ending in ``/``) that start real nodes, containerd or
runc. A test that starts real nodes outside them fails (:func:`check_machine_test`)."""

HEAVIEST_FIRST = (
    MACHINE,
    "tests/cluster",
    "tests/controllers/hpa",
    "tests/controllers/nodes",
    "tests/faults",
    "tests/deploy",
    "tests/tracing",
    "tests/controllers/job",
    "tests/controllers/identity",
    "tests/bench",
    "tests/e2e",
)
"""Groups that take longest (more than 90 s in a clean run), longest first; every other
group follows in the order of collection."""


def group_of(nodeid: str) -> str:
    """The group of a test: ``machine`` or its package."""
    module = module_of(nodeid)
    if module.startswith(MACHINE_MODULES):
        return MACHINE
    return package_of(module)


def order_heaviest_first(items: list[pytest.Item]) -> None:
    """Sort the collected tests by their group's place in :data:`HEAVIEST_FIRST` (a
    stable sort: within a group, and among the other groups, collection order stays)."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


def check_machine_test() -> None:
    """Fail the running test unless it belongs to the ``machine`` group."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    if current and group_of(current) != MACHINE:
        pytest.fail(
            f"{current} starts real nodes outside the modules of tests.workers.MACHINE_MODULES: "
            "add its module there, so that it runs in the one worker that may change the machine"
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduling by scope, with :func:`group_of` as the scope, heaviest first
    (the collection's order, see :func:`order_heaviest_first`)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # by test count otherwise, not by time
    return ByGroup(config, log)
