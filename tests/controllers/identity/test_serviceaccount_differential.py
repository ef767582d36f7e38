"""Differential scenarios of the serviceaccount and root-ca-cert-publisher controllers:
each scenario at once under upstream's controllers (the session's cluster) and under
Steward's (``id_cluster``), what they wrote compared field by field with only names,
uids, resourceVersions, timestamps, managedFields and the clusters' own CA bundles
masked (:mod:`tests.controllers.identity.serviceaccounts`)."""

from __future__ import annotations

from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.harness import upstream_kube
from tests.controllers.identity.serviceaccounts import (
    IdControllers,
    Side,
    both,
    cluster_ca,
    id_controllers,
    lifecycle,
    make_namespace,
    namespaces,
    terminating,
)

__all__ = ["id_controllers", "namespaces", "upstream_kube"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


def sides(
    cluster: LocalCluster, upstream_kube: KubeClient, id_cluster: LocalCluster, id_kube: KubeClient
) -> tuple[Side, Side]:
    return (
        Side("upstream", upstream_kube, cluster_ca(cluster).read_text()),
        Side("steward", id_kube, cluster_ca(id_cluster).read_text()),
    )


def start(id_controllers: IdControllers, id_cluster: LocalCluster) -> None:
    # As the local control plane will run them: the publisher given kube-controller-
    # manager's --root-ca-file.
    id_controllers.accounts.start()
    id_controllers.publisher.start(f"--root-ca-file={cluster_ca(id_cluster)}")


async def test_lifecycle_as_upstream(
    cluster: LocalCluster,
    upstream_kube: KubeClient,
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    id_controllers: IdControllers,
    namespaces: list[tuple[KubeClient, str]],
) -> None:
    """Creation, the account deleted, the ConfigMap's data edited, its annotation reworded
    and removed, the ConfigMap deleted: the same objects on both sides at every point."""
    start(id_controllers, id_cluster)
    upstream, steward = sides(cluster, upstream_kube, id_cluster, id_kube)
    shots: list[dict[str, Any]] = await both(
        lifecycle(upstream, make_namespace(upstream.kube, namespaces, "sa-life")),
        lifecycle(steward, make_namespace(steward.kube, namespaces, "sa-life")),
    )
    assert shots[1] == shots[0]
    # Spelled out, so that both sides cannot agree on something else.
    sa, cm = shots[1]["created"]
    assert sa["metadata"] == {} and "secrets" not in sa
    assert cm["data"] == {"ca.crt": "<CA>"}
    assert shots[1]["data restored"]["metadata"]["labels"] == {"mine": "kept"}


async def test_terminating_namespace_as_upstream(
    cluster: LocalCluster,
    upstream_kube: KubeClient,
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    id_controllers: IdControllers,
    namespaces: list[tuple[KubeClient, str]],
) -> None:
    """A namespace held Terminating: its account and ConfigMap, deleted by the namespace
    controller, come back on neither side; Steward's controllers fail no sync over it."""
    start(id_controllers, id_cluster)
    upstream, steward = sides(cluster, upstream_kube, id_cluster, id_kube)
    shots = await both(
        terminating(upstream, make_namespace(upstream.kube, namespaces, "sa-term")),
        terminating(steward, make_namespace(steward.kube, namespaces, "sa-term")),
    )
    assert shots[1] == shots[0]
    assert shots[1] == {"phase": "Terminating", "account": None, "configmap": None, "held": True}
    for starter in (id_controllers.accounts, id_controllers.publisher):
        status = starter.running[-1].controller.status()
        assert status.reconciles.get("error", 0) == 0, (starter.definition.name, status)
