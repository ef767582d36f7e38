"""Fixtures of the deploy tests: a cluster where Steward's controllers have the field alone.

ReplicaSets, Deployments, Endpoints, DaemonSets and HPAs have no ``spec.managedBy``, so
upstream's controllers of them would fight Steward's over the same objects on the session
cluster. The tests that run the services (tests/deploy/test_identities.py,
test_rbac_mutations.py) therefore use ``apps_cluster``: a local control plane of their own
(one for this package) whose kube-controller-manager runs without its ``replicaset``,
``replicationcontroller``, ``deployment``, ``endpoint``, ``daemonset``,
``horizontalpodautoscaling``, ``garbagecollector`` and ``namespace`` controllers, as a
cluster running Steward's would (the last two act on objects of every type: with
upstream's on, a dependent would be collected and a namespace finalized without Steward's,
whatever its rights). Nothing here waits for a deleted namespace to go or a dependent to
be collected but the exercises of Steward's collector and namespace controller. Upstream's
Job controller stays on: the Job exercise names Steward's controller in
``spec.managedBy``. So does upstream's ``endpointslice`` controller: Steward's writes only
slices labelled as its own, and the EndpointSlice exercise checks that it runs beside
upstream's, leaving upstream's slices alone.

Upstream's identity and certificate controllers are off too, Steward's taking their place
in the RBAC mutation tests: ``serviceaccount``, ``root-ca-cert-publisher``,
``clusterrole-aggregation``, ``csrapproving``, ``csrsigning``, ``csrcleaner``,
``serviceaccount-token`` and ``legacy-service-account-token-cleaner`` (``bootstrapsigner``
and ``tokencleaner`` are off unless named). kube-controller-manager starts its tokens
controller whatever ``--controllers`` says whenever it has a signing key; the local
control plane gives it none while its ``serviceaccount-token`` is off. With
no serviceaccount controller of upstream's, a new namespace would never get its
``default`` ServiceAccount, which pods (and :func:`tests.deploy.harness.new_namespace`)
wait for: :class:`DefaultAccounts` makes it, as the cluster's admin, in every namespace
but those labelled :data:`STEWARD_ACCOUNTS`, which are left to Steward's controller.

So are upstream's node, pod, Job TTL and quota controllers (:data:`NODE_CONTROLLERS`), Steward's
taking their place in the RBAC mutation tests (tests/deploy/node_exercises.py). Of what
they do, the other tests here need one thing: kube-apiserver gives every new node the
``node.kubernetes.io/not-ready:NoSchedule`` taint (its TaintNodesByCondition admission),
which upstream's node lifecycle controller removes once the node is Ready; without it no
pod would be scheduled onto kwok's nodes, and the DaemonSet exercise would find no node to
run on. :func:`untaint_ready_nodes` removes it once, as the cluster's admin, when the
cluster is up (kwok keeps its nodes Ready; nothing puts the taint back). No other test
makes a ResourceQuota or waits for a pod to be collected.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from steward.cluster import LocalCluster
from tests.conftest import local_cluster
from tests.controllers.harness import renewing
from tests.deploy.harness import new_namespace
from tests.deploy.identity_exercises import STEWARD_ACCOUNTS

IDENTITY_CONTROLLERS = (
    "serviceaccount",
    "root-ca-cert-publisher",
    "clusterrole-aggregation",
    "csrapproving",
    "csrsigning",
    "csrcleaner",
    "serviceaccount-token",
    "legacy-service-account-token-cleaner",
)
"""Upstream's identity and certificate controllers on by default, off in ``apps_cluster``."""

NODE_CONTROLLERS = (
    "nodelifecycle",
    "taint-eviction-controller",
    "podgc",
    "ttl",
    "ttl-after-finished",
    "resourcequota",
)
"""Upstream's node, pod, Job TTL and quota controllers, off in ``apps_cluster``."""

APPS_CONTROLLERS = ",".join(
    [
        "*",
        "-replicaset",
        "-replicationcontroller",
        "-deployment",
        "-endpoint",
        "-daemonset",
        "-horizontalpodautoscaling",
        "-garbagecollector",
        "-namespace",
        *(f"-{name}" for name in IDENTITY_CONTROLLERS),
        *(f"-{name}" for name in NODE_CONTROLLERS),
        "-cronjob",
        "-disruption",
        "-statefulset",
    ]
)
"""kube-controller-manager's ``--controllers`` in ``apps_cluster`` (``endpointslice`` on,
beside Steward's)."""
ACCOUNTS_EVERY = 0.2
"""Seconds between two looks of :class:`DefaultAccounts` in ``apps_cluster``."""


class DefaultAccounts:
    """Makes the ``default`` ServiceAccount, as the cluster's admin, in every active
    namespace without one (but those labelled :data:`STEWARD_ACCOUNTS`), one look each
    call: what upstream's serviceaccount controller would do, when run every
    :data:`ACCOUNTS_EVERY` seconds (:func:`tests.controllers.harness.renewing`)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def __call__(self) -> None:
        selector = f"{STEWARD_ACCOUNTS}!=steward"
        namespaces = self.cluster.api("GET", f"/api/v1/namespaces?labelSelector={selector}")
        active = {
            n["metadata"]["name"]
            for n in namespaces.get("items") or []
            if (n.get("status") or {}).get("phase") == "Active"
        }
        accounts = self.cluster.api(
            "GET", "/api/v1/serviceaccounts?fieldSelector=metadata.name%3Ddefault"
        )
        have = {a["metadata"]["namespace"] for a in accounts.get("items") or []}
        for name in sorted(active - have):
            body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
            self.cluster.api(
                "POST", f"/api/v1/namespaces/{name}/serviceaccounts", body, ok=(201, 403, 409)
            )


NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def untaint_ready_nodes(cluster: LocalCluster, deadline: float = 30.0) -> None:
    """Remove :data:`NOT_READY` from every node once its Ready condition is True (waiting
    for that at most ``deadline`` seconds): what upstream's node lifecycle controller
    does for a node that became Ready."""
    end = time.monotonic() + deadline
    while True:
        tainted = []
        for node in cluster.api("GET", "/api/v1/nodes").get("items") or []:
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or ()
            )
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [
                t for t in taints if {"key": t.get("key"), "effect": t.get("effect")} != NOT_READY
            ]
            if len(kept) == len(taints):
                continue
            tainted.append(node["metadata"]["name"])
            if ready:
                patch = {
                    "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                    "spec": {"taints": kept or None},
                }
                cluster.api(
                    "PATCH", f"/api/v1/nodes/{node['metadata']['name']}", patch, ok=(200, 409)
                )
        if not tainted:
            return
        if time.monotonic() > end:
            raise AssertionError(f"nodes still tainted {NOT_READY['key']}: {tainted}")
        time.sleep(0.2)


@pytest.fixture(scope="package")
def apps_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane (3 kwok nodes) without upstream's ReplicaSet, Deployment,
    Endpoints, DaemonSet, HorizontalPodAutoscaler, garbage collector and namespace
    controllers, nor its identity and certificate controllers (:data:`IDENTITY_CONTROLLERS`)
    and node, pod and quota controllers (:data:`NODE_CONTROLLERS`), the ``default``
    ServiceAccounts made by :class:`DefaultAccounts`, its nodes rid of the not-ready
    taint (:func:`untaint_ready_nodes`)."""
    plane = local_cluster(tmp_path_factory, "deploy", controllers=APPS_CONTROLLERS)
    cluster = next(plane)
    try:
        untaint_ready_nodes(cluster)
        with renewing(ACCOUNTS_EVERY, DefaultAccounts(cluster), "default-accounts", at_once=False):
            yield cluster
    finally:
        next(plane, None)  # the plane's teardown


@pytest.fixture
def apps_namespace(apps_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``apps_cluster`` for one test, deleted afterwards."""
    base = request.node.name.lower().replace("_", "-")
    name = new_namespace(apps_cluster, "".join(c for c in base if c.isalnum() or c == "-"))
    try:
        yield name
    finally:
        apps_cluster.api("DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))
