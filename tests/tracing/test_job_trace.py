"""One trace per cause: a Job's creation, its reconcile, the POST that created its Pod with
kube-apiserver's spans beneath it, and the Pod's later events, all in one Jaeger trace."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from steward.cluster import LocalCluster, usage
from tests.tracing import jaeger

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def steward_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster as ``make up`` runs it: Steward's services exporting to its Jaeger."""
    state = tmp_path_factory.mktemp("trace-cluster")
    with jaeger.steward_cluster("steward-test-trace", state) as running:
        yield running


def test_a_job_reads_as_one_trace(steward_cluster: LocalCluster) -> None:
    api = config.new_client_from_config(config_file=str(steward_cluster.kubeconfig))
    batch = client.BatchV1Api(api)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="traced"),
        spec=client.V1JobSpec(
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="c", image="busybox:1.36")],
                )
            )
        ),
    )
    batch.create_namespaced_job("default", job)
    try:
        jaeger.wait_for_story(
            steward_cluster, "jobs.v1.batch", "traced", _check_story, "the Job's whole story"
        )
    finally:
        api.close()


def _check_story(trace: dict[str, Any]) -> str:
    """What the trace lacks of the story (empty when it is all there)."""
    spans = {s["spanID"]: s for s in trace["spans"]}
    service = {
        s["spanID"]: trace["processes"][s["processID"]]["serviceName"] for s in spans.values()
    }

    def parent(span: dict[str, Any]) -> dict[str, Any] | None:
        for ref in span.get("references") or []:
            if ref["refType"] == "CHILD_OF" and ref["spanID"] in spans:
                found: dict[str, Any] = spans[ref["spanID"]]
                return found
        return None

    def ancestors(span: dict[str, Any]) -> list[dict[str, Any]]:
        chain = []
        current = parent(span)
        while current is not None:
            chain.append(current)
            current = parent(current)
        return chain

    def first(check: Any) -> dict[str, Any] | None:
        return next((s for s in spans.values() if check(s)), None)

    event = first(lambda s: s["operationName"] == "informer ADDED jobs.v1.batch")
    if event is None:
        return "the informer's ADDED span of the Job"
    reconcile = first(lambda s: parent(s) is event and s["operationName"] == "reconcile job")
    if reconcile is None or service[reconcile["spanID"]] != "steward-controller-job":
        return "the job controller's reconcile span under the event"
    post = first(
        lambda s: (
            parent(s) is reconcile
            and s["operationName"] == "POST /api/v1/namespaces/{namespace}/pods"
        )
    )
    if post is None or jaeger.tags(post).get("span.kind") != "client":
        return "the client span of the pod's POST under the reconcile"
    beneath = [s for s in spans.values() if post in ancestors(s)]
    if not any(service[s["spanID"]] == "apiserver" for s in beneath):
        return "kube-apiserver spans beneath the POST"
    if not any(s["operationName"] == "etcdserverpb.KV/Txn" for s in beneath):
        return "etcd spans beneath the POST"
    # The Pod's later events continue the trace through its traceparent annotation.
    pod_events = [
        s for s in spans.values() if s["operationName"].startswith("informer MODIFIED pods")
    ]
    if not pod_events:
        return "the pod's later events"
    if not all(reconcile in ancestors(s) for s in pod_events):
        return "the pod's events under the reconcile"
    return ""


def test_a_rollout_reads_as_one_trace(steward_cluster: LocalCluster) -> None:
    """Deployment reconcile → ReplicaSet write → ReplicaSet reconcile → Pod writes, with
    kube-apiserver's spans beneath each write: one trace, across two controllers."""
    api = config.new_client_from_config(config_file=str(steward_cluster.kubeconfig))
    labels = {"app": "traced-web"}
    client.AppsV1Api(api).create_namespaced_deployment(
        "default",
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="traced-web"),
            spec=client.V1DeploymentSpec(
                replicas=2,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="web", image="nginx:1.27")]
                    ),
                ),
            ),
        ),
    )
    api.close()
    jaeger.wait_for_story(
        steward_cluster,
        "deployments.v1.apps",
        "traced-web",
        lambda trace: _check_rollout(jaeger.Tree(trace)),
        "the rollout's whole story",
    )


def _check_rollout(tree: jaeger.Tree) -> str:
    """What the trace lacks of the rollout's story (empty when it is all there)."""
    events = tree.find("informer ADDED deployments.v1.apps")
    if not events:
        return "the informer's ADDED span of the Deployment"
    reconciles = [
        s
        for s in tree.find("reconcile deployment")
        if tree.parent(s) is events[0] and tree.service(s) == "steward-controller-deployment"
    ]
    if not reconciles:
        return "the deployment controller's reconcile span under the event"
    post_rs = tree.find(
        "POST /apis/apps/v1/namespaces/{namespace}/replicasets", under=reconciles[0]
    )
    if not post_rs:
        return "the POST of the ReplicaSet under the Deployment's reconcile"
    if not any(tree.service(s) == "apiserver" for s in tree.below(post_rs[0])):
        return "kube-apiserver spans beneath the ReplicaSet's POST"
    rs_reconciles = [
        s
        for s in tree.find("reconcile replicaset", under=reconciles[0])
        if tree.service(s) == "steward-controller-replicaset"
    ]
    if not rs_reconciles:
        return "the replicaset controller's reconcile, continuing the Deployment's trace"
    post_pods = [
        p
        for r in rs_reconciles
        for p in tree.find("POST /api/v1/namespaces/{namespace}/pods", under=r)
    ]
    if len(post_pods) < 2:
        return "the POSTs of both pods under the ReplicaSet's reconciles"
    if not all(any(tree.service(s) == "apiserver" for s in tree.below(p)) for p in post_pods):
        return "kube-apiserver spans beneath each pod's POST"
    return ""


def test_a_daemonset_reads_as_one_trace(steward_cluster: LocalCluster) -> None:
    """DaemonSet created → its reconcile → the ControllerRevision's and every node's pod's
    POST, kube-apiserver's spans beneath each: one trace."""
    api = config.new_client_from_config(config_file=str(steward_cluster.kubeconfig))
    nodes = [n.metadata.name for n in client.CoreV1Api(api).list_node().items]
    labels = {"app": "traced-daemon"}
    client.AppsV1Api(api).create_namespaced_daemon_set(
        "default",
        client.V1DaemonSet(
            metadata=client.V1ObjectMeta(name="traced-daemon"),
            spec=client.V1DaemonSetSpec(
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="agent", image="agent:1")],
                        tolerations=[client.V1Toleration(operator="Exists")],
                    ),
                ),
            ),
        ),
    )
    api.close()
    jaeger.wait_for_story(
        steward_cluster,
        "daemonsets.v1.apps",
        "traced-daemon",
        lambda trace: _check_daemonset(jaeger.Tree(trace), len(nodes)),
        f"the DaemonSet's whole story ({len(nodes)} nodes)",
    )


def _check_daemonset(tree: jaeger.Tree, nodes: int) -> str:
    """What the trace lacks of the DaemonSet's story (empty when it is all there)."""
    events = tree.find("informer ADDED daemonsets.v1.apps")
    if not events:
        return "the informer's ADDED span of the DaemonSet"
    reconciles = [
        s
        for s in tree.find("reconcile daemonset")
        if tree.parent(s) is events[0] and tree.service(s) == "steward-controller-daemonset"
    ]
    if not reconciles:
        return "the daemonset controller's reconcile span under the event"
    revisions = tree.find(
        "POST /apis/apps/v1/namespaces/{namespace}/controllerrevisions", under=reconciles[0]
    )
    if not revisions:
        return "the POST of the ControllerRevision under the reconcile"
    pods = tree.find("POST /api/v1/namespaces/{namespace}/pods", under=reconciles[0])
    if len(pods) < nodes:
        return f"a pod's POST per node under the reconcile ({len(pods)} of {nodes})"
    if not all(
        any(tree.service(s) == "apiserver" for s in tree.below(p)) for p in [*revisions, *pods]
    ):
        return "kube-apiserver spans beneath each POST"
    return ""


def test_an_hpa_scale_decision_reads_as_one_trace(steward_cluster: LocalCluster) -> None:
    """HPA created → its reconcile → the target's scale read, its pods' metrics read through
    the aggregated metrics.k8s.io, and the scale written, kube-apiserver's spans beneath
    the write: one trace."""
    api = config.new_client_from_config(config_file=str(steward_cluster.kubeconfig))
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    labels = {"app": "traced-hpa"}
    apps.create_namespaced_deployment(
        "default",
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="traced-hpa"),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(
                        labels=labels, annotations=usage.usage_annotations(cpu="200m")
                    ),
                    spec=client.V1PodSpec(
                        containers=[
                            client.V1Container(
                                name="c",
                                image="busybox:1.36",
                                resources=client.V1ResourceRequirements(requests={"cpu": "100m"}),
                            )
                        ]
                    ),
                ),
            ),
        ),
    )
    # The HPA comes once its pod's use is served, so that its first sync scales.
    deadline = time.monotonic() + 120
    pods: list[Any] = []
    while not pods:
        pods = [
            p
            for p in core.list_namespaced_pod("default", label_selector="app=traced-hpa").items
            if p.status.phase == "Running"
        ]
        assert time.monotonic() < deadline, "the Deployment's pod never ran"
        time.sleep(0.5)
    usage.wait_for_pod_usage(steward_cluster, "default", pods[0].metadata.name, cpu="200m")
    # A CPU sample taken within one metrics window of the pod's readiness counts the pod
    # as not yet ready (upstream's CPU initialization rule): let one more scrape pass.
    time.sleep(12)
    hpa: Any = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "traced-hpa"},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "traced-hpa",
            },
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50},
                    },
                }
            ],
        },
    }
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler("default", hpa)
    api.close()
    jaeger.wait_for_story(
        steward_cluster,
        "horizontalpodautoscalers.v2.autoscaling",
        "traced-hpa",
        lambda trace: _check_hpa(jaeger.Tree(trace)),
        "the HPA's scale decision",
    )


def _check_hpa(tree: jaeger.Tree) -> str:
    """What the trace lacks of the HPA's scale decision (empty when it is all there)."""
    events = tree.find("informer ADDED horizontalpodautoscalers.v2.autoscaling")
    if not events:
        return "the informer's ADDED span of the HPA"
    reconciles = [
        s
        for s in tree.find("reconcile horizontalpodautoscaling")
        if tree.parent(s) is events[0]
        and tree.service(s) == "steward-controller-horizontalpodautoscaling"
    ]
    if not reconciles:
        return "the HPA controller's reconcile span under the event"
    scale = "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"
    if not tree.find(f"GET {scale}", under=reconciles[0]):
        return "the GET of the target's scale under the reconcile"
    metrics = "GET /apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods"
    if not tree.find(metrics, under=reconciles[0]):
        return "the GET of the pods' metrics under the reconcile"
    writes = tree.find(f"PUT {scale}", under=reconciles[0])
    if not writes:
        return "the PUT of the target's scale under the reconcile"
    if not any(tree.service(s) == "apiserver" for s in tree.below(writes[0])):
        return "kube-apiserver spans beneath the scale's PUT"
    return ""
