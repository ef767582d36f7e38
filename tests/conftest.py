"""Test wiring: one real local control plane per test session, a fresh namespace per test.

The cluster is started the way ``make up`` starts one (same code), in a temporary state
directory, with every component tied to the test process so nothing outlives the run.
With ``CI=true`` a cluster that cannot start fails the run; it is never skipped.

``make test`` runs the suite in two pytest-xdist workers, each package whole in one of
them and the tests that change the machine all in one: see ``tests/workers.py``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from steward.cluster import ClusterConfig, LocalCluster, ToolchainError
from steward.cluster.progress import Progress
from steward.serving.security import DEVELOPMENT
from tests.ledger import (  # noqa: F401  (the ledger's hooks and fixture, see tests/ledger.py)
    _count_control_planes,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
from tests.services import running_informer
from tests.workers import (  # noqa: F401  (xdist's scheduler, see tests/workers.py)
    check_machine_test,
    order_heaviest_first,
    pytest_xdist_make_scheduler,
)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

TIERS = ("unit", "integration", "e2e")
"""Every test carries one of these markers, so that ``-m <tier>`` selects all of a tier."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test without a tier marker: ``-m integration`` would silently drop it.
    Runs before ``-m`` deselects anything, so a selection by tier checks every test."""
    untiered = sorted(
        {
            item.nodeid.split("[")[0]
            for item in items
            if not any(mark.name in TIERS for mark in item.iter_markers())
        }
    )
    if untiered:
        raise pytest.UsageError(
            f"tests without a tier marker ({', '.join(TIERS)}); mark each (or its module's "
            "pytestmark):\n  " + "\n  ".join(untiered)
        )
    order_heaviest_first(items)


def skip_or_fail(reason: str) -> None:
    """A prerequisite is missing: skip locally; in CI fail the run (never a silent skip)."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def require_real_nodes() -> None:
    """Root and the real nodes' Debian packages (``make node-packages``), else
    :func:`skip_or_fail`. The calling test must be in the ``machine`` group
    (``tests/workers.py``): real nodes change the machine, and only one real-node cluster
    may run on it at a time."""
    from steward.cluster import packages

    check_machine_test()

    lacking = packages.missing(packages.ALL)
    if os.geteuid() != 0 or lacking:
        skip_or_fail(f"real nodes need root and {packages.install_command(lacking or ['-'])}")


def local_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    *,
    nodes: int = 3,
    controllers: str = "*",
    metrics: bool = False,
    kcm_flags: tuple[str, ...] = (),
) -> Iterator[LocalCluster]:
    """A local control plane ``steward-test-<name>-<pid>`` for a fixture to yield from
    (``metrics``: with the metrics pipeline, see :attr:`ClusterConfig.metrics`;
    ``kcm_flags``: more flags of kube-controller-manager):
    torn down afterwards, also on failure. Without the Go toolchain it skips, except in
    CI, where it fails."""
    cfg = ClusterConfig(
        name=f"steward-test-{name}-{os.getpid()}",
        state_dir=tmp_path_factory.mktemp(f"{name}-cluster"),
        nodes=nodes,
        die_with_parent=True,
        controllers=controllers,
        metrics=metrics,
        kcm_flags=kcm_flags,
    )
    try:
        running = LocalCluster.up(cfg, progress=Progress(interval=15.0))
    except ToolchainError as err:
        if IN_CI:
            raise
        pytest.skip(f"no local control plane: {err}")
    try:
        yield running
    finally:
        running.down(progress=Progress(quiet=True))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The session's local control plane (upstream controllers all on)."""
    yield from local_cluster(tmp_path_factory, "session")


@pytest.fixture(scope="session")
def api_client(cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """A Kubernetes client configured from the cluster's admin kubeconfig."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def dev_informer(cluster: LocalCluster) -> Iterator[str]:
    """A plaintext informer (development security) with the informer's own identity, on
    a loop of its own (its address)."""
    yield from running_informer(str(cluster.component_kubeconfig("informer")), DEVELOPMENT)


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    base = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)
