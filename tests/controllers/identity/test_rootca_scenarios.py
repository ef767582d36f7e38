"""Steward's root-ca-cert-publisher on ``id_cluster`` (no upstream publisher there): the
bundle without ``--root-ca-file`` (the CA of its own kubeconfig) and with it (another CA:
what exists is corrected at start), and a write the API server refuses, retried and
counted in upstream's metrics by its status code."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.identity.serviceaccounts import (
    CM,
    WITHIN,
    IdControllers,
    cluster_ca,
    cm_path,
    eventually,
    get,
    id_controllers,
    make_namespace,
    namespaces,
    other_ca,
    uid,
)

__all__ = ["id_controllers", "namespaces"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


def syncs(code: str) -> float:
    value = REGISTRY.get_sample_value("root_ca_cert_publisher_sync_total", {"code": code})
    return value or 0.0


def bundle(kube: KubeClient, ns: str) -> str | None:
    return ((get(kube, cm_path(ns)) or {}).get("data") or {}).get("ca.crt")


async def test_the_bundle_from_the_kubeconfig_or_the_flag(
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    id_controllers: IdControllers,
    namespaces: list[tuple[KubeClient, str]],
) -> None:
    """Without the flag the cluster's CA (the controller's kubeconfig trusts it); started
    again with ``--root-ca-file`` of another CA, every existing ConfigMap is corrected to
    that one; and back."""
    ours, other = cluster_ca(id_cluster).read_text(), other_ca(id_cluster).read_text()
    assert ours != other
    ns = make_namespace(id_kube, namespaces, "rootca-flag")
    publisher = id_controllers.publisher
    first = publisher.start()
    await eventually(lambda: bundle(id_kube, ns) == ours, "the kubeconfig's CA", WITHIN)
    await first.stop()

    again = publisher.start(f"--root-ca-file={other_ca(id_cluster)}")
    await eventually(lambda: bundle(id_kube, ns) == other, "the flag's CA", WITHIN)
    await again.stop()

    # Leave the cluster's ConfigMaps as kube-controller-manager's flag would have them.
    publisher.start(f"--root-ca-file={cluster_ca(id_cluster)}")
    await eventually(lambda: bundle(id_kube, ns) == ours, "the cluster's CA again", WITHIN)


async def test_a_refused_update_is_retried_and_counted(
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    id_controllers: IdControllers,
    namespaces: list[tuple[KubeClient, str]],
) -> None:
    """An immutable ``kube-root-ca.crt`` of other data: the update is refused (422), the
    sync fails and is counted under ``code=422`` (and successes under 200); once the
    ConfigMap is deleted it is created right."""
    ns = make_namespace(id_kube, namespaces, "rootca-immutable")
    wrong = {"metadata": {"name": CM}, "data": {"ca.crt": "wrong"}, "immutable": True}
    made = id_kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", wrong)
    refused, succeeded = syncs("422"), syncs("200")
    running = id_controllers.publisher.start(f"--root-ca-file={cluster_ca(id_cluster)}")
    await eventually(lambda: syncs("422") > refused, "a refused sync counted", WITHIN)
    assert running.controller.status().reconciles.get("error", 0) >= 1
    assert syncs("200") > succeeded  # the other namespaces
    assert bundle(id_kube, ns) == "wrong"

    id_kube.request("DELETE", cm_path(ns))
    ours = cluster_ca(id_cluster).read_text()
    await eventually(
        lambda: bundle(id_kube, ns) == ours and uid(get(id_kube, cm_path(ns))) != uid(made),
        "created right",
        WITHIN,
    )
