"""Fixtures of the deploy tests: a cluster where Steward's controllers have the field alone.

ReplicaSets, Deployments, Endpoints, DaemonSets and HPAs have no ``spec.managedBy``, so
upstream's controllers of them would fight Steward's over the same objects on the session
cluster. The tests that run the services (tests/deploy/test_identities.py,
test_rbac_mutations.py) therefore use ``apps_cluster``: a local control plane of their own
(one for this package) whose kube-controller-manager runs without its ``replicaset``,
``deployment``, ``endpoint``, ``daemonset``, ``horizontalpodautoscaling``,
``garbagecollector`` and ``namespace`` controllers, as a cluster running Steward's would
(the last two act on objects of every type: with upstream's on, a dependent would be
collected and a namespace finalized without Steward's, whatever its rights). Nothing here
waits for a deleted namespace to go or a dependent to be collected but the exercises of
Steward's collector and namespace controller. Upstream's Job controller
stays on: the Job exercise names Steward's controller in ``spec.managedBy``. So does
upstream's ``endpointslice`` controller: Steward's writes only slices labelled as its own,
and the EndpointSlice exercise checks that it runs beside upstream's, leaving upstream's
slices alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from steward.cluster import LocalCluster
from tests.conftest import local_cluster
from tests.deploy.harness import new_namespace

APPS_CONTROLLERS = (
    "*,-replicaset,-deployment,-endpoint,-daemonset,-horizontalpodautoscaling"
    ",-garbagecollector,-namespace"
)
"""kube-controller-manager's ``--controllers`` in ``apps_cluster`` (``endpointslice`` on,
beside Steward's)."""


@pytest.fixture(scope="package")
def apps_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane (3 kwok nodes) without upstream's ReplicaSet, Deployment,
    Endpoints, DaemonSet, HorizontalPodAutoscaler, garbage collector and namespace
    controllers."""
    yield from local_cluster(tmp_path_factory, "deploy", controllers=APPS_CONTROLLERS)


@pytest.fixture
def apps_namespace(apps_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``apps_cluster`` for one test, deleted afterwards."""
    base = request.node.name.lower().replace("_", "-")
    name = new_namespace(apps_cluster, "".join(c for c in base if c.isalnum() or c == "-"))
    try:
        yield name
    finally:
        apps_cluster.api("DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))
