"""What the HPA controller reads besides the mirror: the target's ``/scale`` subresource
and the three metrics APIs, as upstream's scale client and REST metrics client read them.

# Kinds to resources
A scale target or a described object names an ``apiVersion`` and a ``kind``; the resource
is found through the API server's discovery (:mod:`steward.runtime.discovery`), kept
and read again once when a kind is not in it (a custom resource defined since). For the
scale target every served version of the group is tried, the preferred one first, as
upstream's REST mapper offers them; the first that answers wins.

# Metrics
- **Resource** (``metrics.k8s.io/v1beta1``): the PodMetrics of the selected pods; a pod's
  value is the sum over its containers, and a pod with a container that lacks the
  resource has none. For a container metric, the named container's value; a pod whose
  metrics do not list that container is an error, as upstream.
- **Pods** (``custom.metrics.k8s.io/v1beta2``, ``pods/*/<metric>``): one value per pod.
- **Object**: the described object's value.
- **External** (``external.metrics.k8s.io/v1beta1``): the values of the series the
  selector picks.
Every value is in milli-units (:func:`steward.parse_quantity_milli`). No items at all is
an error naming the API, as upstream's texts; so is an API that is not served.

# Rate limits
Each metrics API is read through a client of its own, with a token bucket of its own of
the controller's ``--kube-api-qps`` and ``--kube-api-burst``, as kube-controller-manager
builds one client per metrics API from the same configuration.
"""

from __future__ import annotations

import urllib.parse
from datetime import datetime, timedelta
from typing import Any

import steward
from steward import ApiError, KubeClient, parse_quantity_milli
from steward.controllers.hpa.replicas import PodMetric, PodMetrics
from steward.runtime.discovery import Discovery, split_api_version

RESOURCE_METRICS = "/apis/metrics.k8s.io/v1beta1"
CUSTOM_METRICS = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL_METRICS = "/apis/external.metrics.k8s.io/v1beta1"
DEFAULT_WINDOW = timedelta(minutes=1)
"""A custom metric's window when the adapter gives none (upstream's)."""


class MetricsError(Exception):
    """A metric that could not be read; the text says why, as upstream's."""


def _query(**params: str) -> str:
    kept = {k: v for k, v in params.items() if v}
    return f"?{urllib.parse.urlencode(kept)}" if kept else ""


def _time(text: Any) -> datetime:
    parsed = steward.parse_time(text) if text else None
    return parsed if parsed is not None else steward.utc_now()


class MetricsClient:
    """Upstream's REST metrics client over the three aggregated APIs (see the module)."""

    def __init__(self, api: KubeClient, discovery: Discovery) -> None:
        # One client, and so one rate limiter, per metrics API, as upstream's.
        self.clients = {
            "resource metrics": api.with_own_rate_limit(),
            "custom metrics": api.with_own_rate_limit(),
            "external metrics": api.with_own_rate_limit(),
        }
        self.discovery = discovery

    async def _get(self, path: str, what: str) -> dict[str, Any]:
        """One read of a metrics API (raw: its lists by label selector and its per-metric
        paths are no object of a resource type, which the typed client reads)."""
        try:
            return await self.clients[what].arequest("GET", path)
        except ApiError as err:
            raise MetricsError(f"unable to fetch metrics from {what} API: {err}") from err

    async def resource(
        self, resource: str, namespace: str, selector: str, container: str
    ) -> tuple[PodMetrics, datetime]:
        """Per pod, the usage of ``resource`` (the pod's sum, or ``container``'s)."""
        found = await self._get(
            f"{RESOURCE_METRICS}/namespaces/{namespace}/pods{_query(labelSelector=selector)}",
            "resource metrics",
        )
        items = list(found.get("items") or ())
        if not items:
            raise MetricsError("no metrics returned from resource metrics API")
        metrics: PodMetrics = {}
        for item in items:
            meta = item.get("metadata") or {}
            name = str(meta.get("name", ""))
            window = _window(item.get("window"))
            stamp = _time(item.get("timestamp"))
            containers = list(item.get("containers") or ())
            if container:
                entry = next((c for c in containers if c.get("name") == container), None)
                if entry is None:
                    raise MetricsError(
                        f"failed to get container metrics: container {container} not present "
                        f"in metrics for pod {meta.get('namespace', namespace)}/{name}"
                    )
                usage = (entry.get("usage") or {}).get(resource)
                if usage is not None:
                    metrics[name] = PodMetric(stamp, window, parse_quantity_milli(usage))
                continue
            total, missing = 0, not containers
            for entry in containers:
                usage = (entry.get("usage") or {}).get(resource)
                if usage is None:
                    missing = True
                    break
                total += parse_quantity_milli(usage)
            if not missing:
                metrics[name] = PodMetric(stamp, window, total)
        return metrics, _time(items[0].get("timestamp"))

    async def pods_metric(
        self, metric: str, namespace: str, selector: str, metric_selector: str
    ) -> tuple[PodMetrics, datetime]:
        """Per pod, the custom metric ``metric`` of the selected pods."""
        path = (
            f"{CUSTOM_METRICS}/namespaces/{namespace}/pods/*/{urllib.parse.quote(metric)}"
            f"{_query(labelSelector=selector, metricLabelSelector=metric_selector)}"
        )
        found = await self._get(path, "custom metrics")
        items = list(found.get("items") or ())
        if not items:
            raise MetricsError("no metrics returned from custom metrics API")
        metrics: PodMetrics = {}
        for item in items:
            name = str((item.get("describedObject") or {}).get("name", ""))
            window = (
                timedelta(seconds=int(item["windowSeconds"]))
                if item.get("windowSeconds")
                else DEFAULT_WINDOW
            )
            metrics[name] = PodMetric(
                _time(item.get("timestamp")), window, parse_quantity_milli(item.get("value", 0))
            )
        return metrics, _time(items[0].get("timestamp"))

    async def object_metric(
        self, metric: str, namespace: str, described: dict[str, Any], metric_selector: str
    ) -> tuple[int, datetime]:
        """The custom metric ``metric`` of the described object."""
        kind, name = str(described.get("kind", "")), str(described.get("name", ""))
        try:
            group, version = split_api_version(str(described.get("apiVersion", "")))
        except ValueError as err:
            raise MetricsError(str(err)) from err
        target = await self.discovery.find(group, version, kind)
        if target is None:
            raise MetricsError(
                f"unable to map kind {kind}.{group or 'core'} to a resource: no matches for kind"
            )
        scope = "" if kind == "Namespace" else f"/namespaces/{namespace}"
        gr = target.plural if not group else f"{target.plural}.{group}"
        path = (
            f"{CUSTOM_METRICS}{scope}/{gr}/{name}/{urllib.parse.quote(metric)}"
            f"{_query(metricLabelSelector=metric_selector)}"
        )
        found = await self._get(path, "custom metrics")
        items = list(found.get("items") or ())
        if not items:
            raise MetricsError("no metrics returned from custom metrics API")
        return parse_quantity_milli(items[0].get("value", 0)), _time(items[0].get("timestamp"))

    async def external_metric(
        self, metric: str, namespace: str, metric_selector: str
    ) -> tuple[list[int], datetime]:
        """The values of the external metric's series that the selector picks."""
        path = (
            f"{EXTERNAL_METRICS}/namespaces/{namespace}/{urllib.parse.quote(metric)}"
            f"{_query(labelSelector=metric_selector)}"
        )
        found = await self._get(path, "external metrics")
        items = list(found.get("items") or ())
        if not items:
            raise MetricsError("no metrics returned from external metrics API")
        values = [parse_quantity_milli(item.get("value", 0)) for item in items]
        return values, _time(items[0].get("timestamp"))


def _window(text: Any) -> timedelta:
    """A Go duration as metrics-server writes it (``"10.5s"``, ``"1m0s"``)."""
    if not text:
        return DEFAULT_WINDOW
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    rest = str(text)
    while rest:
        i = 0
        while i < len(rest) and (rest[i].isdigit() or rest[i] == "."):
            i += 1
        number, rest = rest[:i], rest[i:]
        j = 0
        while j < len(rest) and not (rest[j].isdigit() or rest[j] == "."):
            j += 1
        unit, rest = rest[:j], rest[j:]
        if not number or unit not in units:
            return DEFAULT_WINDOW
        total += float(number) * units[unit]
    return timedelta(seconds=total)
