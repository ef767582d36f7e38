"""Simulated resource usage of pods on kwok's nodes, and the values of custom and external
metrics, for tests of the metrics pipeline.

With :attr:`~steward.cluster.ClusterConfig.metrics` (``make up``), kwok reports each
container's CPU and memory as its pod's annotations say (``deploy/kwok/metrics.yaml``):

- ``steward.io/cpu-usage`` / ``steward.io/memory-usage``: every container of the pod;
- ``cpu-usage.steward.io/<container>`` / ``memory-usage.steward.io/<container>``: that
  container only, before the pod-wide value;
- neither: 1m CPU and 1Mi memory (metrics-server drops a container that reports zero).

Values are Kubernetes quantities (``"250m"``, ``"1"``, ``"64Mi"``). metrics-server scrapes
every :data:`~steward.cluster.metrics.METRIC_RESOLUTION` (10 s) and serves a CPU
rate once it holds two samples: a new pod shows in ``metrics.k8s.io`` some 20-30 s after
it runs, and a changed usage some 10-20 s after the patch. A node's usage is the sum of its
pods'; a node without pods reports none and is absent from the node metrics.

Annotations can be given at creation (:func:`usage_annotations` into the pod's metadata)
or patched on a running pod (:func:`set_pod_usage`, :func:`set_usage_by_selector`);
:func:`pod_usage` and :func:`wait_for_pod_usage` read what the metrics API serves.

# Custom and external metrics
Steward's metrics adapter (``deploy/tools/metrics-adapter``) reads its values from the
cluster on every request, so a change shows at once:

- object metric ``<m>`` of any object, and pods metric ``<m>`` of each pod: the object's
  annotation ``metrics.steward.io/<m>`` (:func:`metric_annotations`,
  :func:`set_object_metric`, :func:`set_pod_metric`);
- external metric ``<m>`` in a namespace: key ``<m>`` of each ConfigMap there labelled
  ``metrics.steward.io/external=true`` whose labels the request's selector matches, one
  value per ConfigMap, labelled with its labels (:func:`set_external_metric`).

# Errors
Writes and reads go through kube-apiserver as the cluster admin; a refused request raises
:class:`~steward.cluster.errors.ClusterError` (a missing pod too, with its 404).
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steward.cluster.control_plane import LocalCluster

CPU_ANNOTATION = "steward.io/cpu-usage"
"""A pod's annotation: the CPU each of its containers uses (a quantity, e.g. ``250m``)."""
MEMORY_ANNOTATION = "steward.io/memory-usage"
"""A pod's annotation: the memory each of its containers uses (e.g. ``64Mi``)."""
CONTAINER_CPU_PREFIX = "cpu-usage.steward.io/"
"""Prefix of a pod's annotation ``cpu-usage.steward.io/<container>``: that container's CPU."""
CONTAINER_MEMORY_PREFIX = "memory-usage.steward.io/"
"""Prefix of a pod's annotation ``memory-usage.steward.io/<container>``: its memory."""

_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def quantity(value: str) -> Decimal:
    """A Kubernetes quantity as a number (``"250m"`` → 0.25, ``"64Mi"`` → 67108864).

    Raises:
        ValueError: ``value`` is not a quantity of the suffixes the metrics API uses.
    """
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and value.endswith(suffix):
            number = value[: -len(suffix)]
            break
    else:
        suffix, number = "", value
    try:
        return Decimal(number) * _SUFFIXES[suffix]
    except ArithmeticError:
        raise ValueError(f"not a quantity: {value!r}") from None


def usage_annotations(
    cpu: str | None = None, memory: str | None = None, *, container: str | None = None
) -> dict[str, str]:
    """The annotations that set a pod's usage: of every container, or of ``container``
    alone. Put them in a pod's ``metadata.annotations`` at creation, or merge-patch them.

    Raises:
        ValueError: a value is not a quantity.
    """
    result: dict[str, str] = {}
    for value, pod_wide, prefix in (
        (cpu, CPU_ANNOTATION, CONTAINER_CPU_PREFIX),
        (memory, MEMORY_ANNOTATION, CONTAINER_MEMORY_PREFIX),
    ):
        if value is None:
            continue
        quantity(value)  # refuse what kwok could not parse, before it is written
        result[f"{prefix}{container}" if container else pod_wide] = value
    return result


def set_pod_usage(
    cluster: LocalCluster,
    namespace: str,
    pod_name: str,
    cpu: str | None = None,
    memory: str | None = None,
    *,
    container: str | None = None,
) -> None:
    """Set the CPU and/or memory that pod ``namespace/pod_name`` uses (each container, or
    ``container`` only) with one merge patch of its annotations; kwok reports it from its
    next scrape on. A value left None keeps what the pod had.

    Raises:
        ClusterError: the patch was refused (e.g. no such pod).
        ValueError: a value is not a quantity.
    """
    _patch_usage(cluster, namespace, pod_name, usage_annotations(cpu, memory, container=container))


def _patch_usage(
    cluster: LocalCluster,
    namespace: str,
    pod_name: str,
    annotations: dict[str, str],
    *,
    gone_ok: bool = False,
) -> bool:
    """Merge ``annotations`` into the pod's; False if it is gone and ``gone_ok``."""
    answer = cluster.api(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{pod_name}",
        {"metadata": {"annotations": annotations}},
        ok=(200, 404) if gone_ok else (200,),
    )
    return answer.get("kind") != "Status"


def set_usage_by_selector(
    cluster: LocalCluster,
    namespace: str,
    label_selector: str,
    cpu: str | None = None,
    memory: str | None = None,
    *,
    container: str | None = None,
) -> list[str]:
    """:func:`set_pod_usage` for every pod of ``namespace`` that ``label_selector`` (e.g.
    ``app=web``) selects now; returns the names of those patched. A pod deleted between
    the list and its patch (a scale-down under way) is skipped. Pods created later keep
    the default usage unless their template carries :func:`usage_annotations`.

    Raises:
        ClusterError: the list or a patch was refused.
        ValueError: a value is not a quantity.
    """
    query = urllib.parse.urlencode({"labelSelector": label_selector})
    listing = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods?{query}")
    annotations = usage_annotations(cpu, memory, container=container)
    return [
        item["metadata"]["name"]
        for item in listing.get("items", [])
        if _patch_usage(cluster, namespace, item["metadata"]["name"], annotations, gone_ok=True)
    ]


METRIC_PREFIX = "metrics.steward.io/"
"""Prefix of an object's annotation ``metrics.steward.io/<metric>``: its value of a custom
(object or pods) metric."""
EXTERNAL_LABEL = "metrics.steward.io/external"
"""Label (``true``) of the ConfigMaps whose keys are external metrics' values."""


def metric_annotations(**values: str) -> dict[str, str]:
    """The annotations that give an object custom metrics' values, e.g.
    ``metric_annotations(requests_per_second="250")``.

    Raises:
        ValueError: a value is not a quantity.
    """
    for value in values.values():
        quantity(value)
    return {f"{METRIC_PREFIX}{name}": value for name, value in values.items()}


def set_object_metric(cluster: LocalCluster, path: str, metric: str, value: str) -> None:
    """Set custom metric ``metric`` of the object at API ``path`` (e.g.
    ``/apis/apps/v1/namespaces/ns/deployments/web``) to ``value`` with one merge patch.

    Raises:
        ClusterError: the patch was refused (e.g. no such object).
        ValueError: ``value`` is not a quantity.
    """
    cluster.api("PATCH", path, {"metadata": {"annotations": metric_annotations(**{metric: value})}})


def set_pod_metric(
    cluster: LocalCluster, namespace: str, pod_name: str, metric: str, value: str
) -> None:
    """Set pods metric ``metric`` of one pod (:func:`set_object_metric` of the pod)."""
    set_object_metric(cluster, f"/api/v1/namespaces/{namespace}/pods/{pod_name}", metric, value)


def set_external_metric(
    cluster: LocalCluster,
    namespace: str,
    metric: str,
    value: str,
    *,
    configmap: str = "external-metrics",
    labels: dict[str, str] | None = None,
) -> None:
    """Set external metric ``metric`` of ``namespace`` to ``value``: key ``metric`` of
    ConfigMap ``configmap`` there, created (marked with :data:`EXTERNAL_LABEL` and
    ``labels``, which a metric selector matches) or merge-patched.

    Raises:
        ClusterError: a write was refused.
        ValueError: ``value`` is not a quantity.
    """
    quantity(value)
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    meta = {"name": configmap, "labels": {**(labels or {}), EXTERNAL_LABEL: "true"}}
    created = cluster.api(
        "POST",
        path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {metric: value}},
        ok=(201, 409),
    )
    if created.get("kind") != "ConfigMap":
        cluster.api("PATCH", f"{path}/{configmap}", {"metadata": meta, "data": {metric: value}})


@dataclass(frozen=True)
class PodUsage:
    """What ``metrics.k8s.io`` serves for one pod: per container, CPU in cores and memory
    in bytes."""

    cpu: dict[str, Decimal]
    memory: dict[str, Decimal]
    timestamp: str
    window: str

    @property
    def total_cpu(self) -> Decimal:
        return sum(self.cpu.values(), Decimal(0))

    @property
    def total_memory(self) -> Decimal:
        return sum(self.memory.values(), Decimal(0))


def pod_usage(cluster: LocalCluster, namespace: str, pod_name: str) -> PodUsage | None:
    """The pod's metrics as metrics-server serves them through kube-apiserver, or None
    while it has none (404: not scraped twice yet).

    Raises:
        ClusterError: any other refusal (e.g. the APIService is not available).
    """
    path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{pod_name}"
    body = cluster.api("GET", path, ok=(200, 404))
    if body.get("kind") != "PodMetrics":
        return None
    return _pod_usage(body)


def _pod_usage(body: dict[str, Any]) -> PodUsage:
    containers = body.get("containers") or []
    return PodUsage(
        cpu={c["name"]: quantity(c["usage"]["cpu"]) for c in containers},
        memory={c["name"]: quantity(c["usage"]["memory"]) for c in containers},
        timestamp=body.get("timestamp", ""),
        window=body.get("window", ""),
    )


def wait_for_pod_usage(
    cluster: LocalCluster,
    namespace: str,
    pod_name: str,
    *,
    cpu: str | None = None,
    memory: str | None = None,
    tolerance: float = 0.02,
    timeout: float = 90.0,
) -> PodUsage:
    """Poll the metrics API until the pod's total CPU and/or memory (summed over its
    containers) is within ``tolerance`` (relative) of ``cpu``/``memory``; returns the
    matching sample. CPU is a rate over the last scrape window, so it lands a few
    parts per million off the set value.

    Raises:
        TimeoutError: not within ``timeout`` seconds; the message has the last sample.
        ClusterError: the metrics API refused a read.
    """
    deadline = time.monotonic() + timeout
    want_cpu = quantity(cpu) if cpu is not None else None
    want_memory = quantity(memory) if memory is not None else None
    last: PodUsage | None = None
    while True:
        last = pod_usage(cluster, namespace, pod_name)
        if last is not None and all(
            want is None or abs(got - want) <= want * Decimal(str(tolerance))
            for want, got in ((want_cpu, last.total_cpu), (want_memory, last.total_memory))
        ):
            return last
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"pod {namespace}/{pod_name} did not show cpu={cpu} memory={memory} in "
                f"metrics.k8s.io within {timeout:.0f}s; last: {last}"
            )
        time.sleep(1.0)


__all__ = [
    "CONTAINER_CPU_PREFIX",
    "CONTAINER_MEMORY_PREFIX",
    "CPU_ANNOTATION",
    "EXTERNAL_LABEL",
    "MEMORY_ANNOTATION",
    "METRIC_PREFIX",
    "PodUsage",
    "metric_annotations",
    "pod_usage",
    "quantity",
    "set_external_metric",
    "set_object_metric",
    "set_pod_metric",
    "set_pod_usage",
    "set_usage_by_selector",
    "usage_annotations",
    "wait_for_pod_usage",
]
