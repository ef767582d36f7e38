"""The package's one pods-mode cluster, shared by its modules.

Starting a cluster of real nodes with Steward as pods is the package's largest cost
(about two and a half minutes: Steward's images imported into the node, the core as its
static pods, every controller's Deployment Ready). ``test_pods.py`` checks the cluster
as its users deploy it, ``test_self_healing.py`` then breaks the same cluster on purpose
(its Steward side), and ``test_teardown.py`` takes it down last and checks that the
machine is left as it was. The modules run in that order, in one worker (the ``machine``
group, ``tests/workers.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import ClusterConfig, LocalCluster, nodes
from steward.cluster.progress import Progress
from tests.conftest import require_real_nodes


def host_state() -> dict[str, Any]:
    """What real nodes may change on the machine (see steward.cluster.nodes)."""
    return {
        "sysctls": nodes.read_sysctls(),
        "iptables": nodes.iptables_rules(),
        "links": nodes.links(),
        "mounts": sorted(
            line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
        ),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{nodes.CGROUP_PARENT}")),
        "dirs": [d for d in (*nodes.HOST_DIRS, str(nodes.RUNTIME_ROOT)) if Path(d).exists()],
    }


@pytest.fixture(scope="package")
def host_before() -> dict[str, Any]:
    """The machine before the package's cluster started."""
    return host_state()


@pytest.fixture(scope="package")
def pods_cluster(
    tmp_path_factory: pytest.TempPathFactory, host_before: dict[str, Any]
) -> Iterator[LocalCluster]:
    """Three kwok nodes and one real node, Steward as pods (``make up PODS=1``) with the
    resource metrics pipeline. Taken down at the end unless a test took it down."""
    require_real_nodes()
    cfg = ClusterConfig(
        name=f"steward-test-pods-{os.getpid()}",
        state_dir=tmp_path_factory.mktemp("pods-cluster"),
        nodes=3,
        real_nodes=1,
        steward_pods=True,
        metrics=True,
        die_with_parent=True,
    )
    started = time.monotonic()
    cluster = LocalCluster.up(cfg, progress=Progress(interval=15.0))
    print(f"\npods mode up in {time.monotonic() - started:.1f}s")
    try:
        yield cluster
    finally:
        if is_up(cluster):
            cluster.down(progress=Progress(quiet=True))


def is_up(cluster: LocalCluster) -> bool:
    """Whether ``cluster`` has not been taken down (``down`` removes its state file)."""
    return (cluster.directory / "state.json").exists()
