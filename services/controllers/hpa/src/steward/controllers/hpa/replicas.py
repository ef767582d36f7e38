"""The HPA controller's replica arithmetic: from a metric's current value and its target, the
replica count one metric asks for — upstream's ``ReplicaCalculator`` (``GetResourceReplicas``,
``GetRawResourceReplicas``, ``GetMetricReplicas``, ``GetObjectMetricReplicas``,
``GetObjectPerPodMetricReplicas``, ``GetExternalMetricReplicas``,
``GetExternalPerPodMetricReplicas``) with its pod grouping and request sums.

Nothing here talks to an API: :mod:`.controller` fetches the metrics and lists the pods the
scale target's selector selects, and hands both in. Values are milli-units throughout
(``Quantity.MilliValue``): millicores for CPU, bytes * 1000 for memory, a custom metric's
value * 1000.

# Pods
Of the selected pods, one being deleted or Failed is ignored, a Pending one is unready, and
one without a metric is missing. For CPU alone a pod whose sample may still carry its start-up
burst is unready too: within ``cpu_initialization_period`` of its start, when it is not Ready
or its sample was taken less than one metric window after its last Ready transition; after
that period, when it is not Ready and never was (it turned unready within
``delay_of_initial_readiness`` of its start). A pod with no Ready condition or no start time
is unready for CPU.

# The ratio
The usage ratio is the current value over the target: for utilization, the sum of the
counted pods' usage * 100 over the sum of their requests, in whole percent (truncated), over
the target percentage; for averages, the (truncated) mean over the target. A ratio within the
tolerances (``1 - scale_down <= ratio <= 1 + scale_up``) keeps the current count; otherwise
the count is ``ceil(ratio * ready pods)``.

When pods are missing, or some are unready and the ratio asks to scale up, the ratio is taken
again with the missing pods counted at the target (100 % of their request, or the target
percentage when it is above 100 %) on a scale-down and at zero on a scale-up, and the unready
pods at zero on a scale-up. If that second ratio is within the tolerances, or points the other
way, or its count (``ceil(ratio * pods counted)``) moves against the direction, the current
count stays.

# Errors
A calculation that cannot be done raises :class:`ReplicaError`, whose text is upstream's (the
controller puts it in the ScalingActive condition and an Event).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import steward
from steward import parse_quantity, parse_quantity_milli

Obj = dict[str, Any]

MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)
MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)

_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
"""What an absent timestamp compares as (Go's zero ``time.Time``)."""

_POD_LEVEL_RESOURCES = ("cpu", "memory")
_HUGEPAGES_PREFIX = "hugepages-"


# --- Go's number conversions ----------------------------------------------------------------


def _go_int32(value: float) -> int:
    """``int32(value)`` as Go on amd64 converts a float: truncated toward zero; NaN and values
    outside the int32 range give the minimum int32."""
    if math.isnan(value) or not MIN_INT32 <= value < MAX_INT32 + 1:
        return MIN_INT32
    return int(value)


def _go_int64(value: float) -> int:
    """``int64(value)`` as Go on amd64 converts a float (out of range: the minimum int64)."""
    if math.isnan(value) or not float(MIN_INT64) <= value < float(MAX_INT64):
        return MIN_INT64
    return int(value)


def _go_div(numerator: float, denominator: float) -> float:
    """IEEE division, as Go's float64 ``/`` (a zero denominator gives ±Inf or NaN)."""
    if denominator == 0:
        if numerator == 0 or math.isnan(numerator):
            return math.nan
        return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)
    return numerator / denominator


def _quotient(numerator: int, denominator: int) -> int:
    """Integer division truncated toward zero (Go's ``/`` on integers)."""
    q = abs(numerator) // abs(denominator)
    return q if (numerator < 0) == (denominator < 0) else -q


# --- tolerances -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerances:
    """How far the usage ratio may be from 1 before the count changes: below 1 by at most
    ``scale_down``, above by at most ``scale_up``."""

    scale_down: float = 0.1
    scale_up: float = 0.1

    def within(self, ratio: float) -> bool:
        """Whether ``ratio`` is close enough to 1 to keep the current count."""
        return 1.0 - self.scale_down <= ratio <= 1.0 + self.scale_up

    @classmethod
    def of(cls, hpa: Mapping[str, Any], default: float = 0.1) -> Tolerances:
        """An HPA's tolerances: ``spec.behavior.scaleUp.tolerance`` and
        ``spec.behavior.scaleDown.tolerance`` (quantities such as ``"0.05"`` or ``"50m"``)
        where set, ``default`` (the controller's ``--horizontal-pod-autoscaler-tolerance``)
        otherwise. A tolerance that is not a quantity counts as unset."""
        behavior = (hpa.get("spec") or {}).get("behavior") or {}
        return cls(
            scale_down=_tolerance((behavior.get("scaleDown") or {}).get("tolerance"), default),
            scale_up=_tolerance((behavior.get("scaleUp") or {}).get("tolerance"), default),
        )


def _tolerance(raw: Any, default: float) -> float:
    if raw is None:
        return default
    try:
        return float(parse_quantity(raw))
    except ValueError:
        return default


class ReplicaError(Exception):
    """A replica count that cannot be computed; the text is upstream's message."""


# --- pods -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodMetric:
    """One pod's sample: when it was taken, over what window, and its value in milli-units."""

    timestamp: datetime
    window: timedelta
    value: int


PodMetrics = dict[str, PodMetric]


@dataclass(frozen=True)
class PodGroups:
    """The selected pods sorted as upstream's ``groupPods`` sorts them."""

    ready_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    ignored: frozenset[str]


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _time(value: Any) -> datetime:
    return steward.parse_time(value) or _ZERO_TIME


def group_pods(
    pods: Sequence[Obj],
    metrics: Mapping[str, PodMetric],
    resource: str,
    cpu_initialization_period: timedelta,
    delay_of_initial_readiness: timedelta,
    now: datetime,
) -> PodGroups:
    """Sort the selected pods into ready (counted), unready, missing (no metric) and ignored
    (being deleted or Failed); see the module docs for the CPU rules."""
    ready = 0
    unready: set[str] = set()
    missing: set[str] = set()
    ignored: set[str] = set()
    for pod in pods:
        name = _name(pod)
        phase = steward.pods.phase(pod)
        if steward.pods.is_deleting(pod) or phase == "Failed":
            ignored.add(name)
            continue
        if phase == "Pending":
            unready.add(name)
            continue
        metric = metrics.get(name)
        if metric is None:
            missing.add(name)
            continue
        if resource == "cpu" and _cpu_unready(
            pod, metric, cpu_initialization_period, delay_of_initial_readiness, now
        ):
            unready.add(name)
            continue
        ready += 1
    return PodGroups(ready, frozenset(unready), frozenset(missing), frozenset(ignored))


def _cpu_unready(
    pod: Obj,
    metric: PodMetric,
    cpu_initialization_period: timedelta,
    delay_of_initial_readiness: timedelta,
    now: datetime,
) -> bool:
    status = pod.get("status") or {}
    condition = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    if condition is None or status.get("startTime") is None:
        return True
    started = _time(status.get("startTime"))
    transition = _time(condition.get("lastTransitionTime"))
    not_ready = condition.get("status") == "False"
    if started + cpu_initialization_period > now:
        return not_ready or metric.timestamp < transition + metric.window
    return not_ready and started + delay_of_initial_readiness > transition


def _ready_pod_count(pods: Sequence[Obj]) -> int:
    if not pods:
        raise ReplicaError(
            "unable to calculate ready pods: "
            "no pods returned by selector while calculating replica count"
        )
    return sum(
        1 for pod in pods if steward.pods.phase(pod) == "Running" and steward.pods.is_ready(pod)
    )


# --- requests -------------------------------------------------------------------------------


def _request(container: Mapping[str, Any], resource: str) -> int | None:
    requests = (container.get("resources") or {}).get("requests") or {}
    if resource not in requests:
        return None
    return parse_quantity_milli(requests[resource])


def _restartable(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else a + b


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _supported_pod_level(resource: str) -> bool:
    return resource in _POD_LEVEL_RESOURCES or resource.startswith(_HUGEPAGES_PREFIX)


def _pod_level_requests_set(pod: Mapping[str, Any]) -> bool:
    requests = (((pod.get("spec") or {}).get("resources")) or {}).get("requests") or {}
    return any(_supported_pod_level(name) for name in requests)


def _pod_level_request(pod: Mapping[str, Any], resource: str) -> int:
    """The pod's request as the scheduler counts it (``PodRequests``): the pod-level request
    where set, else its containers' (regular and sidecar containers summed, at least the
    largest init container's need), plus the pod overhead."""
    spec = pod.get("spec") or {}
    pod_requests = (spec.get("resources") or {}).get("requests") or {}
    total: int | None
    if _supported_pod_level(resource) and resource in pod_requests:
        total = parse_quantity_milli(pod_requests[resource])
    else:
        total = None
        for c in spec.get("containers") or ():
            total = _add(total, _request(c, resource))
        sidecars: int | None = None
        init_peak: int | None = None
        for c in spec.get("initContainers") or ():
            own = _request(c, resource)
            if _restartable(c):
                total = _add(total, own)
                sidecars = _add(sidecars, own)
                need = sidecars
            else:
                need = _add(own, sidecars)
            init_peak = _max(init_peak, need)
        total = _max(total, init_peak)
    overhead = spec.get("overhead") or {}
    if resource in overhead:
        total = _add(total, parse_quantity_milli(overhead[resource]))
    if total is None:
        raise ReplicaError(f"missing pod-level request for {resource} in Pod {_name(pod)}")
    return total


def _container_requests(pod: Mapping[str, Any], container: str | None, resource: str) -> int:
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or ())
    containers += [c for c in spec.get("initContainers") or () if _restartable(c)]
    total = 0
    for c in containers:
        cname = c.get("name")
        if not container or container == cname:
            value = _request(c, resource)
            if value is None:
                raise ReplicaError(
                    f"missing request for {resource} in container {cname} of Pod {_name(pod)}"
                )
            total += value
        if container and container == cname:
            return total
    if container:
        raise ReplicaError(f"container {container} not found in Pod {_name(pod)}")
    return total


def calculate_requests(pods: Sequence[Obj], container: str | None, resource: str) -> dict[str, int]:
    """Each pod's request of ``resource`` in milli-units (upstream's ``calculateRequests``):
    the named container's, else the pod-level request when the pod sets one, else the sum
    over its containers and sidecar (restartable init) containers.

    Raises:
        ReplicaError: a counted container requests nothing of ``resource``, the named
            container is not in a pod, or a pod with pod-level requests has none for it.
    """
    out: dict[str, int] = {}
    for pod in pods:
        if not container and _pod_level_requests_set(pod):
            out[_name(pod)] = _pod_level_request(pod, resource)
        else:
            out[_name(pod)] = _container_requests(pod, container, resource)
    return out


# --- ratios ---------------------------------------------------------------------------------


def resource_utilization_ratio(
    values: Mapping[str, int], requests: Mapping[str, int], target_utilization: int
) -> tuple[float, int, int]:
    """(usage ratio, utilization in percent, mean value) over the pods that have both a value
    and a request (upstream's ``GetResourceUtilizationRatio``).

    Raises:
        ReplicaError: no pod has both, or the percentage does not fit an int32.
    """
    used = requested = count = 0
    for name, value in values.items():
        if name not in requests:
            continue
        used += value
        requested += requests[name]
        count += 1
    if requested == 0:
        raise ReplicaError("no metrics returned matched known pods")
    percent = _quotient(used * 100, requested)
    if not MIN_INT32 <= percent <= MAX_INT32:
        raise ReplicaError(f"resource utilization {percent} is outside the int32 range")
    return _go_div(float(percent), float(target_utilization)), percent, _quotient(used, count)


def metric_usage_ratio(values: Mapping[str, int], target: int) -> tuple[float, int]:
    """(usage ratio, mean value) of the values (upstream's ``GetMetricUsageRatio``)."""
    mean = _quotient(sum(values.values()), len(values))
    return _go_div(float(mean), float(target)), mean


# --- the calculator -------------------------------------------------------------------------


@dataclass(frozen=True)
class Calculator:
    """The replica counts one metric asks for, with the controller's settings (upstream's
    ``--horizontal-pod-autoscaler-tolerance``, ``-cpu-initialization-period`` and
    ``-initial-readiness-delay``)."""

    tolerance: float = 0.1
    cpu_initialization_period: timedelta = timedelta(minutes=5)
    delay_of_initial_readiness: timedelta = timedelta(seconds=30)

    def tolerances(self, hpa: Mapping[str, Any]) -> Tolerances:
        """The HPA's tolerances over this calculator's default."""
        return Tolerances.of(hpa, self.tolerance)

    def _group(
        self, pods: Sequence[Obj], metrics: Mapping[str, PodMetric], resource: str, now: datetime
    ) -> tuple[PodGroups, dict[str, int]]:
        if not pods:
            raise ReplicaError("no pods returned by selector while calculating replica count")
        groups = group_pods(
            pods,
            metrics,
            resource,
            self.cpu_initialization_period,
            self.delay_of_initial_readiness,
            now,
        )
        values = {
            name: m.value
            for name, m in metrics.items()
            if name not in groups.ignored and name not in groups.unready
        }
        if not values:
            raise ReplicaError("did not receive metrics for targeted pods (pods might be unready)")
        return groups, values

    def resource_replicas(
        self,
        current_replicas: int,
        target_utilization: int,
        resource: str,
        pods: Sequence[Obj],
        metrics: PodMetrics,
        container: str | None,
        now: datetime,
        tolerances: Tolerances,
    ) -> tuple[int, int, int]:
        """A Resource or ContainerResource metric with a Utilization target: (replicas,
        utilization in percent, mean value in milli-units). ``metrics`` holds each pod's
        usage (the named container's for a ContainerResource metric).

        Raises:
            ReplicaError: no pods, no usable metrics, a missing request, or metrics of
                no listed pod.
        """
        groups, values = self._group(pods, metrics, resource, now)
        requests = calculate_requests(pods, container, resource)
        ratio, utilization, raw = resource_utilization_ratio(values, requests, target_utilization)

        up_with_unready = bool(groups.unready) and ratio > 1.0
        if not up_with_unready and not groups.missing:
            if tolerances.within(ratio):
                return current_replicas, utilization, raw
            return _go_int32(_ceil(ratio * float(groups.ready_count))), utilization, raw

        if groups.missing:
            if ratio < 1.0:
                fallback = max(100, target_utilization)
                for name in groups.missing:
                    values[name] = _quotient(requests[name] * fallback, 100)
            elif ratio > 1.0:
                for name in groups.missing:
                    values[name] = 0
        if up_with_unready:
            for name in groups.unready:
                values[name] = 0

        new_ratio, _, _ = resource_utilization_ratio(values, requests, target_utilization)
        if _keep(ratio, new_ratio, tolerances):
            return current_replicas, utilization, raw
        replicas = _go_int32(_ceil(new_ratio * float(len(values))))
        if _against(new_ratio, replicas, current_replicas):
            return current_replicas, utilization, raw
        return replicas, utilization, raw

    def raw_resource_replicas(
        self,
        current_replicas: int,
        target_average_value: int,
        resource: str,
        pods: Sequence[Obj],
        metrics: PodMetrics,
        container: str | None,
        now: datetime,
        tolerances: Tolerances,
    ) -> tuple[int, int]:
        """A Resource or ContainerResource metric with an AverageValue target: (replicas,
        mean value). ``container`` only chose which usage ``metrics`` holds."""
        del container
        return self._plain(
            current_replicas, target_average_value, resource, pods, metrics, now, tolerances
        )

    def metric_replicas(
        self,
        current_replicas: int,
        target_average_value: int,
        pods: Sequence[Obj],
        metrics: PodMetrics,
        now: datetime,
        tolerances: Tolerances,
    ) -> tuple[int, int]:
        """A Pods metric (an AverageValue target): (replicas, mean value)."""
        return self._plain(
            current_replicas, target_average_value, "", pods, metrics, now, tolerances
        )

    def _plain(
        self,
        current_replicas: int,
        target: int,
        resource: str,
        pods: Sequence[Obj],
        metrics: Mapping[str, PodMetric],
        now: datetime,
        tolerances: Tolerances,
    ) -> tuple[int, int]:
        groups, values = self._group(pods, metrics, resource, now)
        ratio, usage = metric_usage_ratio(values, target)

        up_with_unready = bool(groups.unready) and ratio > 1.0
        if not up_with_unready and not groups.missing:
            if tolerances.within(ratio):
                return current_replicas, usage
            return _go_int32(_ceil(ratio * float(groups.ready_count))), usage

        if groups.missing:
            if ratio < 1.0:
                for name in groups.missing:
                    values[name] = target
            elif ratio > 1.0:
                for name in groups.missing:
                    values[name] = 0
        if up_with_unready:
            for name in groups.unready:
                values[name] = 0

        new_ratio, _ = metric_usage_ratio(values, target)
        if _keep(ratio, new_ratio, tolerances):
            return current_replicas, usage
        replicas = _go_int32(_ceil(new_ratio * float(len(values))))
        if _against(new_ratio, replicas, current_replicas):
            return current_replicas, usage
        return replicas, usage

    def object_replicas(
        self,
        current_replicas: int,
        target_value: int,
        usage: int,
        pods: Sequence[Obj],
        now: datetime,
        tolerances: Tolerances,
    ) -> tuple[int, int]:
        """An Object metric with a Value target: (replicas, usage). The ratio scales the
        count of Running and Ready pods; from zero replicas, ``ceil(ratio)``.

        Raises:
            ReplicaError: the count has to be scaled and no pods are selected.
        """
        del now
        ratio = _go_div(float(usage), float(target_value))
        return _usage_ratio_replicas(current_replicas, ratio, pods, tolerances), usage

    def object_per_pod_replicas(
        self,
        status_replicas: int,
        target_average_value: int,
        usage: int,
        tolerances: Tolerances,
    ) -> tuple[int, int]:
        """An Object metric with an AverageValue target: (replicas, usage per replica).
        Outside the tolerances the count is ``ceil(usage / target)``."""
        replicas = status_replicas
        ratio = _go_div(float(usage), float(target_average_value) * float(status_replicas))
        if not tolerances.within(ratio):
            replicas = _go_int32(_ceil(_go_div(float(usage), float(target_average_value))))
        return replicas, _go_int64(_ceil(_go_div(float(usage), float(status_replicas))))

    def external_replicas(
        self,
        current_replicas: int,
        target_value: int,
        values: Sequence[int],
        pods: Sequence[Obj],
        now: datetime,
        tolerances: Tolerances,
    ) -> tuple[int, int]:
        """An External metric with a Value target: (replicas, the sum of the values, capped
        at the largest int64), scaled as :meth:`object_replicas`."""
        del now
        usage = 0
        for value in values:
            if value > 0 and usage > MAX_INT64 - value:
                usage = MAX_INT64
                break
            usage += value
        ratio = _go_div(float(usage), float(target_value))
        return _usage_ratio_replicas(current_replicas, ratio, pods, tolerances), usage

    def external_per_pod_replicas(
        self,
        status_replicas: int,
        target_average_value: int,
        values: Sequence[int],
        tolerances: Tolerances,
    ) -> tuple[int, int]:
        """An External metric with an AverageValue target: (replicas, the values' sum per
        replica), as :meth:`object_per_pod_replicas` with the sum (capped at the largest
        int64) as usage; the count is capped at the largest int32."""
        usage = 0
        for value in values:
            usage += value
            if usage > MAX_INT64:
                usage = MAX_INT64
                break
        replicas = status_replicas
        ratio = _go_div(float(usage), float(target_average_value) * float(status_replicas))
        if not tolerances.within(ratio):
            wanted = _ceil(_go_div(float(usage), float(target_average_value)))
            replicas = MAX_INT32 if wanted > float(MAX_INT32) else _go_int32(wanted)
        if float(usage) >= float(MAX_INT64):
            return replicas, MAX_INT64
        return replicas, _go_int64(_ceil(_go_div(float(usage), float(status_replicas))))


def _ceil(value: float) -> float:
    """``math.Ceil`` (infinities and NaN stay as they are)."""
    return value if not math.isfinite(value) else float(math.ceil(value))


def _keep(ratio: float, new_ratio: float, tolerances: Tolerances) -> bool:
    """Whether the second ratio keeps the current count: within the tolerances, or pointing
    the other way than the first."""
    return (
        tolerances.within(new_ratio)
        or (ratio < 1.0 and new_ratio > 1.0)
        or (ratio > 1.0 and new_ratio < 1.0)
    )


def _against(new_ratio: float, replicas: int, current_replicas: int) -> bool:
    """Whether the count moves against the ratio's direction."""
    return (new_ratio < 1.0 and replicas > current_replicas) or (
        new_ratio > 1.0 and replicas < current_replicas
    )


def _usage_ratio_replicas(
    current_replicas: int, ratio: float, pods: Sequence[Obj], tolerances: Tolerances
) -> int:
    if current_replicas == 0:
        return _go_int32(_ceil(ratio))
    if tolerances.within(ratio):
        return current_replicas
    wanted = ratio * float(_ready_pod_count(pods))
    if wanted > MAX_INT32:
        return MAX_INT32
    return _go_int32(_ceil(wanted))
