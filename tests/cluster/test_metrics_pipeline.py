"""The local control plane's resource metrics pipeline (``ClusterConfig.metrics``): usage
set on a pod through the cluster reaches ``metrics.k8s.io`` by the real path — kwok's
simulated kubelet, metrics-server's scrape, kube-apiserver's aggregation layer — and
follows a change; node metrics are served too. Custom and external metrics set through
annotations and ConfigMaps come back from Steward's metrics adapter through the same
aggregation layer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.cluster.identities import METRICS_SERVER_USER
from steward.cluster.usage import (
    metric_annotations,
    quantity,
    set_external_metric,
    set_object_metric,
    set_pod_metric,
    set_pod_usage,
    set_usage_by_selector,
    usage_annotations,
    wait_for_pod_usage,
)
from tests.conftest import local_cluster
from tests.polling import wait_for

pytestmark = pytest.mark.integration

NAMESPACE = "metrics-pipeline"
NODE = "kwok-node-1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = local_cluster(tmp_path_factory, "metrics", nodes=2, metrics=True)
    yield from running


def _pod(name: str, annotations: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations, "labels": labels},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "app", "image": "app"}, {"name": "sidecar", "image": "s"}],
        },
    }


@pytest.fixture(scope="module")
def web(cluster: LocalCluster) -> str:
    """A pod bound to a kwok node: each container 200m and 64Mi, the sidecar 100m alone."""
    cluster.api(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        ok=(201, 409),
    )
    wait_for(
        lambda: (
            cluster.api(
                "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default", ok=(200, 404)
            ).get("kind")
            == "ServiceAccount"
        ),
        "the namespace's default service account",
        within=60,
    )
    annotations = {
        **usage_annotations("200m", "64Mi"),
        **usage_annotations("100m", container="sidecar"),
    }
    body = _pod("web-0", annotations, {"app": "web"})
    cluster.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body, ok=(201,))
    return "web-0"


def test_the_api_service_is_available(cluster: LocalCluster) -> None:
    service = cluster.api(
        "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io"
    )
    conditions = {c["type"]: c["status"] for c in service["status"].get("conditions", [])}
    assert conditions.get("Available") == "True", service["status"]
    # metrics-server runs as its own user, not as an admin.
    assert cluster.directory.joinpath("metrics-server.kubeconfig").is_file()
    kubeconfig = cluster.directory.joinpath("metrics-server.kubeconfig").read_text()
    assert METRICS_SERVER_USER in kubeconfig


def test_pod_usage_shows_then_follows_a_change(cluster: LocalCluster, web: str) -> None:
    first = wait_for_pod_usage(cluster, NAMESPACE, web, cpu="300m", memory="128Mi", timeout=120)
    assert first.cpu["app"] == pytest.approx(Decimal("0.2"), rel=Decimal("0.02"))
    assert first.cpu["sidecar"] == pytest.approx(Decimal("0.1"), rel=Decimal("0.02"))
    assert first.memory == {"app": quantity("64Mi"), "sidecar": quantity("64Mi")}

    changed = time.monotonic()
    set_pod_usage(cluster, NAMESPACE, web, cpu="1500m", memory="256Mi")
    # The sidecar keeps its own CPU; its memory follows the pod-wide value.
    after = wait_for_pod_usage(cluster, NAMESPACE, web, cpu="1600m", memory="512Mi", timeout=60)
    print(f"usage change shown in metrics.k8s.io after {time.monotonic() - changed:.1f}s")
    assert after.cpu["app"] == pytest.approx(Decimal("1.5"), rel=Decimal("0.02"))
    assert after.memory["sidecar"] == quantity("256Mi")


def test_node_metrics_are_the_sum_of_their_pods(cluster: LocalCluster, web: str) -> None:
    wait_for_pod_usage(cluster, NAMESPACE, web, memory="512Mi", timeout=120)

    def node_memory() -> Decimal | None:
        body = cluster.api("GET", f"/apis/metrics.k8s.io/v1beta1/nodes/{NODE}", ok=(200, 404))
        if body.get("kind") != "NodeMetrics":
            return None
        memory = quantity(body["usage"]["memory"])
        return memory if memory == quantity("512Mi") else None

    wait_for(node_memory, f"{NODE}'s memory to be its one pod's 512Mi", within=60)
    listing = cluster.api("GET", "/apis/metrics.k8s.io/v1beta1/nodes")
    names = {item["metadata"]["name"] for item in listing["items"]}
    # kwok-node-0 runs no pod, so reports no usage, and metrics-server leaves it out.
    assert NODE in names


def test_usage_by_selector(cluster: LocalCluster, web: str) -> None:
    names = set_usage_by_selector(cluster, NAMESPACE, "app=web", memory="96Mi")
    assert names == [web]
    wait_for_pod_usage(cluster, NAMESPACE, web, memory="192Mi", timeout=60)


def test_usage_annotations_refuse_what_is_not_a_quantity() -> None:
    assert usage_annotations("250m") == {"steward.io/cpu-usage": "250m"}
    assert usage_annotations(memory="1Gi", container="c") == {"memory-usage.steward.io/c": "1Gi"}
    assert quantity("250002059n") == Decimal("0.250002059")
    with pytest.raises(ValueError, match="not a quantity"):
        usage_annotations("lots")


CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"


def test_custom_object_metric_is_the_objects_annotation(cluster: LocalCluster, web: str) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "annotations": metric_annotations(requests_per_second="250")},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    cluster.api("POST", f"/api/v1/namespaces/{NAMESPACE}/services", service, ok=(201,))
    path = f"{CUSTOM}/namespaces/{NAMESPACE}/services/web/requests_per_second"
    item = cluster.api("GET", path)["items"][0]
    assert item["describedObject"] == {
        "kind": "Service",
        "namespace": NAMESPACE,
        "name": "web",
        "apiVersion": "/v1",
    }
    assert item["metric"]["name"] == "requests_per_second"
    assert quantity(item["value"]) == 250

    set_object_metric(
        cluster, f"/api/v1/namespaces/{NAMESPACE}/services/web", "requests_per_second", "1500m"
    )
    assert quantity(cluster.api("GET", path)["items"][0]["value"]) == Decimal("1.5")
    missing = cluster.api("GET", f"{CUSTOM}/namespaces/{NAMESPACE}/services/web/nope", ok=(404,))
    assert missing["code"] == 404


def test_custom_pods_metric_is_each_pods_annotation(cluster: LocalCluster, web: str) -> None:
    set_pod_metric(cluster, NAMESPACE, web, "queue_length", "7")
    listing = cluster.api(
        "GET", f"{CUSTOM}/namespaces/{NAMESPACE}/pods/*/queue_length?labelSelector=app%3Dweb"
    )
    assert [(i["describedObject"]["name"], quantity(i["value"])) for i in listing["items"]] == [
        (web, Decimal(7))
    ]
    none = cluster.api(
        "GET", f"{CUSTOM}/namespaces/{NAMESPACE}/pods/*/queue_length?labelSelector=app%3Dother"
    )
    assert none["items"] == []


def test_external_metric_is_a_configmap_key(cluster: LocalCluster) -> None:
    set_external_metric(cluster, NAMESPACE, "messages_ready", "30", labels={"queue": "jobs"})
    set_external_metric(
        cluster, NAMESPACE, "messages_ready", "5", configmap="other", labels={"queue": "mail"}
    )
    path = f"{EXTERNAL}/namespaces/{NAMESPACE}/messages_ready"
    jobs = cluster.api("GET", f"{path}?labelSelector=queue%3Djobs")["items"]
    assert [(i["metricLabels"]["queue"], quantity(i["value"])) for i in jobs] == [
        ("jobs", Decimal(30))
    ]
    both = cluster.api("GET", path)["items"]
    assert sorted(quantity(i["value"]) for i in both) == [5, 30]

    set_external_metric(cluster, NAMESPACE, "messages_ready", "45", labels={"queue": "jobs"})
    jobs = cluster.api("GET", f"{path}?labelSelector=queue%3Djobs")["items"]
    assert quantity(jobs[0]["value"]) == 45
