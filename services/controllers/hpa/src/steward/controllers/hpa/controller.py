"""The HorizontalPodAutoscaler controller: autoscaling/v2 HPAs from the mirror, their
target's ``/scale`` and the metrics APIs (:mod:`.metrics`), :mod:`.replicas`' and
:mod:`.behavior`'s decisions, and the writes (scale, status, Events), step by step as
upstream's ``reconcileAutoscaler``.

# A sync
The target's scale is read through its ``/scale`` subresource (any kind that has one,
found through discovery). A target at zero replicas while ``minReplicas`` is above zero
has autoscaling switched off (``ScalingDisabled``). A target outside ``minReplicas`` ..
``maxReplicas`` is brought inside. Otherwise every metric gives a proposal (Resource,
ContainerResource, Pods, Object, External; the largest wins), over the pods that the
scale's ``status.selector`` selects in the mirror; the proposal is stabilized and limited
(:class:`~.behavior.Normalizer`: without ``spec.behavior`` upstream's five-minute
scale-down stabilization and scale-up limit, with it the windows and policies it gives).
A changed count is written to ``/scale`` with a ``SuccessfulRescale`` Event. Then the
status (current and desired replicas, current metrics, last scale time, the conditions
AbleToScale, ScalingActive and ScalingLimited) is written when it changed.

# Metrics that fail
A metric that cannot be computed gives a ``ScalingActive=False`` condition of its reason
(``FailedGetResourceMetric`` and the like) and a Warning Event. When every metric fails,
or some fail and the others would scale down, nothing is scaled and the sync ends with
the error; otherwise the sync scales on the ones that worked and still ends with the
error (upstream's ``computeReplicasForMetrics``).

# Selectors
The scale's selector must be given and parse; and the pods it selects must not be
selected by another HPA's selector as last seen by this controller
(``AmbiguousSelector``), as upstream's selector registry.

# Rate limits
As kube-controller-manager's, the controller reads and writes through several clients,
each with a token bucket of its own of ``--kube-api-qps`` and ``--kube-api-burst``: its
own (HPAs, Events, discovery), the scale client, and one per metrics API.

# Timing
Every HPA is synced every ``--horizontal-pod-autoscaler-sync-period`` (15 s) while it
exists, and on a spec change; a failed sync is retried at the same period, never
sooner (upstream's fixed-interval rate limiter). Its status writes queue nothing. Pods
are read from the mirror at each sync; their changes queue nothing, as upstream's.

# What it reads
HPAs whole; of a pod only :data:`POD_FIELDS`, which is all the mirror holds of it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import steward
from steward import (
    HORIZONTAL_POD_AUTOSCALERS,
    PODS,
    ApiError,
    ConflictError,
    Request,
    Resource,
    Result,
)
from steward.controllers.hpa.behavior import Normalizer
from steward.controllers.hpa.metrics import MetricsClient, MetricsError
from steward.controllers.hpa.replicas import (
    Calculator,
    ReplicaError,
    Tolerances,
)
from steward.kube import error_message
from steward.runtime.discovery import Discovery, split_api_version

log = logging.getLogger(__name__)

NAME = "horizontalpodautoscaling"
"""The controller's name with the manager (kube-controller-manager's --controllers name)."""
COMPONENT = "horizontal-pod-autoscaler"
"""The Events' source component, as upstream's."""
QUEUE = "horizontalpodautoscaler"
"""Upstream's work queue name (the ``name`` label of ``workqueue_*``)."""
CONFLICT_TRIES = 5
"""Tries of a scale write that conflicts (upstream's ``retry.DefaultRetry``)."""
SYNC_PERIOD = 15.0
"""Seconds between two syncs of an HPA (``--horizontal-pod-autoscaler-sync-period``)."""
POD_FIELDS = (
    "metadata.labels",
    "metadata.deletionTimestamp",
    "spec.resources.requests",
    "spec.overhead",
    "spec.containers.name",
    "spec.containers.resources.requests",
    "spec.initContainers.name",
    "spec.initContainers.restartPolicy",
    "spec.initContainers.resources.requests",
    "status.phase",
    "status.startTime",
    "status.conditions.type",
    "status.conditions.status",
    "status.conditions.lastTransitionTime",
)
"""What the controller reads of a pod: its labels (the scale's selector) and deletion mark,
the requests (pod-level, of each container and sidecar, with the overhead) and its phase,
start time and Ready condition (:mod:`.replicas`)."""


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The HPA controller's own flags, named and defaulted as kube-controller-manager's."""
    parser.add_argument(
        "--horizontal-pod-autoscaler-sync-period",
        type=_positive,
        default=SYNC_PERIOD,
        metavar="SECONDS",
        help=f"seconds between two syncs of each HPA (default {SYNC_PERIOD:g})",
    )
    parser.add_argument(
        "--horizontal-pod-autoscaler-downscale-stabilization",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how far back scale-down recommendations are kept without spec.behavior (default 300)",
    )
    parser.add_argument(
        "--horizontal-pod-autoscaler-tolerance",
        type=float,
        default=0.1,
        help="the ratio of usage to target within which nothing is scaled (default 0.1)",
    )
    parser.add_argument(
        "--horizontal-pod-autoscaler-cpu-initialization-period",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="after a pod starts, how long its CPU samples may be skipped (default 300)",
    )
    parser.add_argument(
        "--horizontal-pod-autoscaler-initial-readiness-delay",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="after a pod starts, how long its readiness changes count as initial (default 30)",
    )


# Status ----------------------------------------------------------------------------------
_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")


def format_milli(value: int) -> str:
    """A milli-value as Kubernetes writes a DecimalSI quantity (``1500m``, ``2``, ``3k``)."""
    if value % 1000:
        return f"{value}m"
    whole, step = value // 1000, 0
    while whole and whole % 1000 == 0 and step < len(_SUFFIXES) - 1:
        whole //= 1000
        step += 1
    return f"{whole}{_SUFFIXES[step]}"


def set_condition(
    status: dict[str, Any], ctype: str, value: bool, reason: str, message: str, now: datetime
) -> None:
    """Upstream's ``setCondition``: the condition of ``ctype`` added or changed in place;
    its transition time moves only when its status does."""
    wanted = "True" if value else "False"
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    found = next((c for c in conditions if c.get("type") == ctype), None)
    if found is None:
        found = {"type": ctype}
        conditions.append(found)
    if found.get("status") != wanted:
        found["lastTransitionTime"] = steward.format_time(now)
    found["status"] = wanted
    found["reason"] = reason
    found["message"] = message


def _clean(status: dict[str, Any]) -> dict[str, Any]:
    """The status as the API server returns it: empty fields left out."""
    return {k: v for k, v in status.items() if v not in (None, [], {}, "")}


def go_selector(selector: dict[str, Any] | None) -> str:
    """A metric selector as upstream's messages print it (Go's ``%+v`` of the pointer)."""
    if selector is None:
        return "nil"
    labels = "".join(f"{k}: {v}," for k, v in sorted((selector.get("matchLabels") or {}).items()))
    exprs = "".join(
        f"LabelSelectorRequirement{{Key:{e.get('key')},Operator:{e.get('operator')},"
        f"Values:[{' '.join(e.get('values') or ())}],}},"
        for e in selector.get("matchExpressions") or ()
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )


@dataclass
class Proposal:
    """One metric's outcome: a replica count and its status, or a failure."""

    replicas: int = 0
    name: str = ""
    status: dict[str, Any] = field(default_factory=dict)
    timestamp: datetime | None = None
    error: str = ""
    """The failure as the sync's error says it."""
    reason: str = ""
    inner: str = ""
    """The failure as its Event and the ScalingActive condition say it."""


@dataclass(frozen=True)
class Inputs:
    """What every metric of one sync is computed over."""

    ns: str
    spec_replicas: int
    """The target's ``spec.replicas`` (the scale's)."""
    status_replicas: int
    """The target's ``status.replicas`` (per-pod Object and External targets divide by it)."""
    selector: str
    """The scale's ``status.selector``, as text."""
    pods: list[dict[str, Any]]
    """The pods it selects, from the mirror."""
    tolerances: Tolerances
    now: datetime


class MetricFailure(Exception):
    """A metric that gave no proposal: ``inner`` as its Event and condition say it,
    ``outer`` as the sync's error does (upstream wraps the one in the other)."""

    def __init__(self, inner: str, outer: str) -> None:
        super().__init__(outer)
        self.inner = inner
        self.outer = outer


class SyncError(ApiError):
    """A sync that ended with upstream's error (retried at the sync period)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class HPAReconciler:
    """Reconciles one HPA by key; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.api = ctx.api
        self.hpas = ctx.client(HORIZONTAL_POD_AUTOSCALERS)
        self.events = ctx.event_recorder(COMPONENT)
        flags = ctx.flags
        self.period = float(getattr(flags, "horizontal_pod_autoscaler_sync_period", SYNC_PERIOD))
        self.calculator = Calculator(
            tolerance=float(getattr(flags, "horizontal_pod_autoscaler_tolerance", 0.1)),
            cpu_initialization_period=timedelta(
                seconds=float(
                    getattr(flags, "horizontal_pod_autoscaler_cpu_initialization_period", 300.0)
                )
            ),
            delay_of_initial_readiness=timedelta(
                seconds=float(
                    getattr(flags, "horizontal_pod_autoscaler_initial_readiness_delay", 30.0)
                )
            ),
        )
        self.normalizer = Normalizer(
            timedelta(
                seconds=float(
                    getattr(flags, "horizontal_pod_autoscaler_downscale_stabilization", 300.0)
                )
            )
        )
        self.discovery = Discovery(self.api)
        self.metrics = MetricsClient(self.api, self.discovery)
        self.scales = steward.Client(self.api.with_own_rate_limit())
        """The scale subresource's client, a rate limiter of its own (upstream's scale
        client); HPAs, Events and discovery go through the controller's own client."""
        self.selectors: dict[tuple[str, str], dict[str, Any] | None] = {}
        """Each HPA's selector as last seen (None: registered, not yet known)."""

    # Reconcile ---------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        ns, name = request.namespace, request.name
        key = f"{ns}/{name}"
        found = self.mirror.get(HORIZONTAL_POD_AUTOSCALERS, ns, name)
        if found is None:
            self.normalizer.forget(key)
            self.selectors.pop((ns, name), None)
            return Result()
        self.selectors.setdefault((ns, name), None)
        try:
            await self.sync(steward.copy_json(found.object), key)
        except ApiError as err:  # SyncError too: retried at the period, never sooner
            raise steward.RetryAfter(self.period) from err
        return Result(requeue_after=self.period)

    async def sync(self, hpa: dict[str, Any], key: str) -> None:
        """Upstream's ``reconcileAutoscaler`` (see the module docs); raises
        :class:`SyncError` with upstream's text when the sync ends with an error."""
        meta, spec = hpa["metadata"], hpa.get("spec") or {}
        ns = meta.get("namespace", "")
        original = steward.copy_json(_clean(hpa.get("status") or {}))
        status: dict[str, Any] = steward.copy_json(hpa.get("status") or {})
        ref = spec.get("scaleTargetRef") or {}
        reference = f"{ref.get('kind')}/{ns}/{ref.get('name')}"
        now = steward.utc_now()

        scale, target, failure = await self._get_scale(ns, ref)
        if scale is None or target is None:
            self.events.event(hpa, "Warning", "FailedGetScale", failure)
            set_condition(
                status,
                "AbleToScale",
                False,
                "FailedGetScale",
                f"the HPA controller was unable to get the target's current scale: {failure}",
                now,
            )
            await self._update_status(hpa, original, status, swallow=True)
            raise SyncError(f"failed to query scale subresource for {reference}: {failure}")
        set_condition(
            status,
            "AbleToScale",
            True,
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
            now,
        )
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        self.normalizer.record_initial(key, current, now)
        min_replicas = int(spec["minReplicas"]) if spec.get("minReplicas") is not None else 1
        max_replicas = int(spec.get("maxReplicas") or 0)
        desired, reason, rescale, compute = 0, "", True, True
        statuses: list[dict[str, Any]] = []
        error: SyncError | None = None
        # Scale to zero (HPAScaleToZero, on by default): a target an HPA with an Object or
        # External metric scaled to zero is still autoscaled from there.
        from_metrics = any(
            m.get("type") in ("Object", "External") for m in spec.get("metrics") or ()
        )
        at_zero = any(
            c.get("type") == "ScaledToZero" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        if current == 0:
            if not ((min_replicas != 0 and at_zero) or (at_zero and from_metrics)):
                compute = rescale = False
                set_condition(
                    status,
                    "ScalingActive",
                    False,
                    "ScalingDisabled",
                    "scaling is disabled since the replica count of the target is zero",
                    now,
                )
        elif current > max_replicas:
            reason, desired = "Current number of replicas above Spec.MaxReplicas", max_replicas
            compute = False
        elif current < min_replicas:
            reason, desired = "Current number of replicas below Spec.MinReplicas", min_replicas
            compute = False
        if compute:
            proposed, metric, statuses, failed = await self._compute(hpa, scale, status, now)
            if proposed < 0:
                self._set_status(hpa, status, current, None, statuses, False, now)
                await self._update_status(hpa, original, status, swallow=True)
                self.events.event(hpa, "Warning", "FailedComputeMetricsReplicas", failed)
                raise SyncError(
                    "failed to compute desired number of replicas based on listed metrics "
                    f"for {reference}: {failed}"
                )
            if failed:
                error = SyncError(failed)
            rescale_metric = ""
            if proposed > desired:
                desired, rescale_metric = proposed, metric
            if desired > current:
                reason = f"{rescale_metric} above target"
            if desired < current:
                reason = "All metrics below target"
            desired, limited, able = self.normalizer.normalize(key, hpa, current, desired, now)
            set_condition(status, "AbleToScale", True, able.reason, able.message, now)
            set_condition(
                status, "ScalingLimited", limited.status, limited.reason, limited.message, now
            )
            if current == 0 and min_replicas != 0 and at_zero and desired < min_replicas:
                desired = min_replicas
                reason = reason or "Current number of replicas below Spec.MinReplicas"
            rescale = desired != current

        if rescale:
            try:
                await self._write_scale(target, ns, ref, scale, desired)
            except ApiError as err:
                text = error_message(err)
                self.events.event(
                    hpa,
                    "Warning",
                    "FailedRescale",
                    f"New size: {desired}; reason: {reason}; error: {text}",
                )
                set_condition(
                    status,
                    "AbleToScale",
                    False,
                    "FailedUpdateScale",
                    f"the HPA controller was unable to update the target scale: {text}",
                    now,
                )
                self._set_status(hpa, status, current, None, statuses, False, now)
                await self._update_status(hpa, original, status, swallow=True)
                raise SyncError(f"failed to rescale {reference}: {text}") from err
            set_condition(
                status,
                "AbleToScale",
                True,
                "SucceededRescale",
                f"the HPA controller was able to update the target scale to {desired}",
                now,
            )
            self.events.event(
                hpa, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}"
            )
            self.normalizer.record_scale(key, hpa, current, desired, now)
            if current > 0 and desired == 0 and min_replicas == 0 and from_metrics:
                set_condition(
                    status,
                    "ScaledToZero",
                    True,
                    "ScaledToZero",
                    "the HPA controller scaled the workload to zero",
                    now,
                )
            else:
                set_condition(
                    status,
                    "ScaledToZero",
                    False,
                    "NotScaledToZero",
                    "the HPA controller did not scale the workload to zero",
                    now,
                )
            log.info("rescaled %s from %d to %d: %s", reference, current, desired, reason)
        else:
            desired = current
        self._set_status(hpa, status, current, desired, statuses, rescale, now)
        await self._update_status(hpa, original, status, swallow=False)
        if error is not None:
            raise error

    # Scale -------------------------------------------------------------------------------
    async def _get_scale(
        self, ns: str, ref: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, Resource | None, str]:
        try:
            group, _ = split_api_version(str(ref.get("apiVersion", "")))
        except ValueError as err:
            return None, None, str(err)
        kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
        targets = await self.discovery.targets(group, kind)
        if not targets:
            return None, None, f'no matches for kind "{kind}" in group "{group}"'
        first = ""
        for target in targets:
            try:
                scale = await self.scales(target).get(ns, name, subresource="scale")
            except ApiError as err:
                first = first or error_message(err)
                continue
            return scale, target, ""
        return None, None, first

    async def _write_scale(
        self, target: Resource, ns: str, ref: dict[str, Any], scale: dict[str, Any], desired: int
    ) -> None:
        """PUT the desired count to ``/scale``; on a conflict read the scale again and
        retry, five tries in all (upstream's ``retry.DefaultRetry``)."""
        name = str(ref.get("name", ""))
        body = steward.copy_json(scale)
        for attempt in range(CONFLICT_TRIES):
            body.setdefault("spec", {})["replicas"] = desired
            body.setdefault("metadata", {}).update(namespace=ns, name=name)
            try:
                await self.scales(target).update(body, subresource="scale")
                return
            except ConflictError:
                if attempt == CONFLICT_TRIES - 1:
                    raise
                with contextlib.suppress(ApiError):
                    body = await self.scales(target).get(ns, name, subresource="scale")
                await asyncio.sleep(0.01)

    # Metrics -----------------------------------------------------------------------------
    def _selected_pods(self, ns: str, selector: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            p.object
            for p in self.mirror.objects(PODS, ns)
            if steward.selector_matches(
                selector, (p.object.get("metadata") or {}).get("labels") or {}
            )
        ]

    def _validate_selector(
        self, hpa: dict[str, Any], text: str, status: dict[str, Any], now: datetime
    ) -> dict[str, Any] | str:
        """The parsed selector, or the error text (upstream's validateAndParseSelector)."""
        meta = hpa["metadata"]
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if not text:
            self.events.event(hpa, "Warning", "SelectorRequired", "selector is required")
            set_condition(
                status,
                "ScalingActive",
                False,
                "InvalidSelector",
                "the HPA target's scale is missing a selector",
                now,
            )
            return "selector is required"
        try:
            selector = steward.parse_selector(text)
        except steward.SelectorSyntaxError as err:
            message = (
                f"couldn't convert selector into a corresponding internal selector object: {err}"
            )
            self.events.event(hpa, "Warning", "InvalidSelector", message)
            set_condition(status, "ScalingActive", False, "InvalidSelector", message, now)
            return message
        if (ns, name) not in self.selectors:
            return f"HPA {ns}/{name} was deleted during reconciliation"
        self.selectors[(ns, name)] = selector
        pods = self._selected_pods(ns, selector)
        label_sets = {
            tuple(sorted(((p.get("metadata") or {}).get("labels") or {}).items())) for p in pods
        }
        others = sorted(
            f"{ons}/{oname}"
            for (ons, oname), other in self.selectors.items()
            if ons == ns
            and other is not None
            and any(
                steward.selector_matches(other, dict(labels), empty_matches_all=True)
                for labels in label_sets
            )
        )
        if len(others) > 1:
            message = (
                f"pods by selector {text} are controlled by more than one HPA "
                f"(e.g. [{' '.join(others[:2])}])"
            )
            self.events.event(hpa, "Warning", "AmbiguousSelector", message)
            set_condition(status, "ScalingActive", False, "AmbiguousSelector", message, now)
            return message
        return selector

    async def _compute(
        self, hpa: dict[str, Any], scale: dict[str, Any], status: dict[str, Any], now: datetime
    ) -> tuple[int, str, list[dict[str, Any]], str]:
        """(replicas or -1, metric name, metric statuses, error text): upstream's
        ``computeReplicasForMetrics``."""
        spec = hpa.get("spec") or {}
        text = str((scale.get("status") or {}).get("selector") or "")
        selector = self._validate_selector(hpa, text, status, now)
        if isinstance(selector, str):
            return -1, "", [], selector
        spec_replicas = int((scale.get("spec") or {}).get("replicas") or 0)
        status_replicas = int((scale.get("status") or {}).get("replicas") or 0)
        metrics = list(spec.get("metrics") or ())
        ns = hpa["metadata"].get("namespace", "")
        at = Inputs(
            ns=ns,
            spec_replicas=spec_replicas,
            status_replicas=status_replicas,
            selector=text,
            pods=self._selected_pods(ns, selector),
            tolerances=Tolerances.of(hpa, self.calculator.tolerance),
            now=now,
        )
        statuses: list[dict[str, Any]] = [{} for _ in metrics]
        replicas, name, invalid, first = 0, "", 0, Proposal()
        for i, metric in enumerate(metrics):
            proposal = await self._one(hpa, metric, at)
            statuses[i] = proposal.status
            if proposal.error:
                if invalid == 0:
                    first = proposal
                invalid += 1
                continue
            if replicas == 0 or proposal.replicas > replicas:
                replicas, name = proposal.replicas, proposal.name
        failed = ""
        if invalid:
            failed = (
                f"invalid metrics ({invalid} invalid out of {len(metrics)}), "
                f"first error is: {first.error}"
            )
        if invalid >= len(metrics) or (invalid and replicas < spec_replicas):
            set_condition(
                status,
                "ScalingActive",
                False,
                first.reason,
                f"the HPA was unable to compute the replica count: {first.inner}",
                now,
            )
            return -1, "", statuses, failed
        set_condition(
            status,
            "ScalingActive",
            True,
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {name}",
            now,
        )
        return replicas, name, statuses, failed

    async def _one(self, hpa: dict[str, Any], metric: dict[str, Any], at: Inputs) -> Proposal:
        """One metric's proposal (upstream's ``computeReplicasForMetric``); a failure
        records its Warning Event."""
        mtype = metric.get("type")
        reason = {
            "Object": "FailedGetObjectMetric",
            "Pods": "FailedGetPodsMetric",
            "Resource": "FailedGetResourceMetric",
            "ContainerResource": "FailedGetContainerResourceMetric",
            "External": "FailedGetExternalMetric",
        }.get(str(mtype), "InvalidMetricSourceType")
        try:
            return await self._evaluate(metric, at)
        except MetricFailure as failure:
            self.events.event(hpa, "Warning", reason, failure.inner)
            return Proposal(error=failure.outer, reason=reason, inner=failure.inner)

    async def _evaluate(self, metric: dict[str, Any], at: Inputs) -> Proposal:
        """One metric's proposal; :class:`MetricFailure` with upstream's texts when there
        is none."""
        mtype = metric.get("type")
        if mtype in ("Resource", "ContainerResource"):
            return await self._resource(metric, str(mtype), at)
        if mtype == "Pods":
            return await self._pods(metric, at)
        if mtype == "Object":
            return await self._object(metric, at)
        if mtype == "External":
            return await self._external(metric, at)
        text = f'unknown metric source type "{mtype}"'
        raise MetricFailure(text, text)

    async def _resource(self, metric: dict[str, Any], mtype: str, at: Inputs) -> Proposal:
        ns, spec_replicas, selector, pods = at.ns, at.spec_replicas, at.selector, at.pods
        tolerances, now = at.tolerances, at.now
        source = metric.get("resource" if mtype == "Resource" else "containerResource") or {}
        resource = str(source.get("name", ""))
        container = str(source.get("container", "")) if mtype == "ContainerResource" else ""
        target = source.get("target") or {}
        outer = (
            f"failed to get {resource} resource metric value"
            if mtype == "Resource"
            else f"failed to get {container} container metric value"
        )
        by_value = target.get("averageValue") is not None
        if not by_value and target.get("averageUtilization") is None:
            inner = (
                "invalid resource metric source: neither an average utilization target nor "
                "an average value (usage) target was set"
            )
            raise MetricFailure(inner, f"{outer}: {inner}")
        what = "usage" if by_value else "utilization"
        try:
            try:
                values, stamp = await self.metrics.resource(resource, ns, selector, container)
            except MetricsError as err:
                raise ReplicaError(f"unable to get metrics for resource {resource}: {err}") from err
            current: dict[str, Any]
            if by_value:
                replicas, raw = self.calculator.raw_resource_replicas(
                    spec_replicas,
                    _milli(target["averageValue"]),
                    resource,
                    pods,
                    values,
                    container or None,
                    now,
                    tolerances,
                )
                current = {"averageValue": format_milli(raw)}
                label = f"{resource} resource"
            else:
                replicas, utilization, raw = self.calculator.resource_replicas(
                    spec_replicas,
                    int(target["averageUtilization"]),
                    resource,
                    pods,
                    values,
                    container or None,
                    now,
                    tolerances,
                )
                current = {"averageUtilization": utilization, "averageValue": format_milli(raw)}
                kind = "container resource" if mtype == "ContainerResource" else "resource"
                label = f"{resource} {kind} utilization (percentage of request)"
        except (ReplicaError, ValueError) as err:
            inner = f"failed to get {resource} {what}: {err}"
            raise MetricFailure(inner, f"{outer}: {inner}") from err
        if mtype == "Resource":
            status = {"type": "Resource", "resource": {"name": resource, "current": current}}
        else:
            status = {
                "type": "ContainerResource",
                "containerResource": {"name": resource, "container": container, "current": current},
            }
        return Proposal(replicas, label, status, stamp)

    async def _pods(self, metric: dict[str, Any], at: Inputs) -> Proposal:
        ns, spec_replicas, selector, pods = at.ns, at.spec_replicas, at.selector, at.pods
        tolerances, now = at.tolerances, at.now
        source = metric.get("pods") or {}
        ident = source.get("metric") or {}
        name = str(ident.get("name", ""))
        outer = "failed to get pods metric value"
        try:
            metric_selector = steward.format_selector(ident.get("selector"))
            try:
                values, stamp = await self.metrics.pods_metric(name, ns, selector, metric_selector)
            except MetricsError as err:
                raise ReplicaError(f"unable to get metric {name}: {err}") from err
            wanted = _milli((source.get("target") or {}).get("averageValue"))
            replicas, usage = self.calculator.metric_replicas(
                spec_replicas, wanted, pods, values, now, tolerances
            )
        except (ReplicaError, ValueError) as err:
            raise MetricFailure(str(err), f"{outer}: {err}") from err
        status = {
            "type": "Pods",
            "pods": {
                "metric": _identifier(ident),
                "current": {"averageValue": format_milli(usage)},
            },
        }
        return Proposal(replicas, f"pods metric {name}", status, stamp)

    async def _object(self, metric: dict[str, Any], at: Inputs) -> Proposal:
        ns, spec_replicas, status_replicas, pods = (
            at.ns,
            at.spec_replicas,
            at.status_replicas,
            at.pods,
        )
        tolerances, now = at.tolerances, at.now
        source = metric.get("object") or {}
        ident = source.get("metric") or {}
        name = str(ident.get("name", ""))
        described = source.get("describedObject") or {}
        target = source.get("target") or {}
        outer = "failed to get object metric value"
        by_value = target.get("type") == "Value" and target.get("value") is not None
        by_average = target.get("type") == "AverageValue" and target.get("averageValue") is not None
        if not by_value and not by_average:
            inner = (
                "invalid object metric source: neither a value target nor an average value "
                "target was set"
            )
            raise MetricFailure(inner, f"{outer}: {inner}")
        try:
            metric_selector = steward.format_selector(ident.get("selector"))
            try:
                usage, stamp = await self.metrics.object_metric(
                    name, ns, described, metric_selector
                )
            except MetricsError as err:
                raise ReplicaError(
                    f"unable to get metric {name}: {described.get('kind')} on "
                    f"{ns} {described.get('name')}/{err}"
                ) from err
            if by_value:
                replicas, usage = self.calculator.object_replicas(
                    spec_replicas, _milli(target["value"]), usage, pods, now, tolerances
                )
            else:
                replicas, usage = self.calculator.object_per_pod_replicas(
                    status_replicas, _milli(target["averageValue"]), usage, tolerances
                )
        except (ReplicaError, ValueError) as err:
            if by_value:
                raise MetricFailure(str(err), f"{outer}: {err}") from err
            raise MetricFailure(
                str(err), f"{outer}: failed to get {name} object metric: {err}"
            ) from err
        if by_value:
            status = {
                "type": "Object",
                "object": {
                    "describedObject": described,
                    "metric": _identifier(ident),
                    "current": {"value": format_milli(usage)},
                },
            }
            return Proposal(replicas, f"{described.get('kind')} metric {name}", status, stamp)
        status = {
            "type": "Object",
            "object": {
                "metric": _identifier(ident),
                "current": {"averageValue": format_milli(usage)},
            },
        }
        label = f"external metric {name}({go_selector(ident.get('selector'))})"
        return Proposal(replicas, label, status, stamp)

    async def _external(self, metric: dict[str, Any], at: Inputs) -> Proposal:
        ns, spec_replicas, status_replicas, pods = (
            at.ns,
            at.spec_replicas,
            at.status_replicas,
            at.pods,
        )
        tolerances, now = at.tolerances, at.now
        source = metric.get("external") or {}
        ident = source.get("metric") or {}
        name = str(ident.get("name", ""))
        target = source.get("target") or {}
        outer = f"failed to get {name} external metric value"
        by_average = target.get("averageValue") is not None
        if not by_average and target.get("value") is None:
            inner = (
                "invalid external metric source: neither a value target nor an average "
                "value target was set"
            )
            raise MetricFailure(inner, f"{outer}: {inner}")
        selector_text = go_selector(ident.get("selector"))
        try:
            metric_selector = steward.format_selector(ident.get("selector"))
            try:
                values, stamp = await self.metrics.external_metric(name, ns, metric_selector)
            except MetricsError as err:
                raise ReplicaError(
                    f"unable to get external metric {ns}/{name}/{selector_text}: {err}"
                ) from err
            if by_average:
                replicas, usage = self.calculator.external_per_pod_replicas(
                    status_replicas, _milli(target["averageValue"]), values, tolerances
                )
                current = {"averageValue": format_milli(usage)}
            else:
                replicas, usage = self.calculator.external_replicas(
                    spec_replicas, _milli(target["value"]), values, pods, now, tolerances
                )
                current = {"value": format_milli(usage)}
        except (ReplicaError, ValueError) as err:
            middle = (
                f"failed to get {name} external metric"
                if by_average
                else f"failed to get external metric {name}"
            )
            raise MetricFailure(str(err), f"{outer}: {middle}: {err}") from err
        status = {
            "type": "External",
            "external": {"metric": _identifier(ident), "current": current},
        }
        return Proposal(replicas, f"external metric {name}({selector_text})", status, stamp)

    # Status ------------------------------------------------------------------------------
    @staticmethod
    def _set_status(
        hpa: dict[str, Any],
        status: dict[str, Any],
        current: int,
        desired: int | None,
        statuses: list[dict[str, Any]],
        rescale: bool,
        now: datetime,
    ) -> None:
        """Upstream's ``setStatus`` (``desired`` None keeps the one written before)."""
        status["currentReplicas"] = current
        if desired is not None:
            status["desiredReplicas"] = desired
        else:
            status["desiredReplicas"] = int(status.get("desiredReplicas") or 0)
        status["currentMetrics"] = statuses
        if rescale:
            status["lastScaleTime"] = steward.format_time(now)
        # HPAGeneration (on by default): the generation the status was computed for.
        status["observedGeneration"] = int(hpa["metadata"].get("generation") or 0)

    async def _update_status(
        self,
        hpa: dict[str, Any],
        original: dict[str, Any],
        status: dict[str, Any],
        *,
        swallow: bool,
    ) -> None:
        """Write the status when it changed (upstream's ``updateStatusIfNeeded``); a
        refused write records ``FailedUpdateStatus`` and raises unless ``swallow``."""
        new = _clean(status)
        if new == original:
            return
        meta = hpa["metadata"]
        try:
            await self.hpas.update_status(hpa, new)
        except ApiError as err:
            self.events.event(hpa, "Warning", "FailedUpdateStatus", error_message(err))
            if swallow:
                log.warning("status of HPA %s/%s: %s", meta.get("namespace"), meta.get("name"), err)
                return
            if isinstance(err, ConflictError):
                raise
            raise SyncError(
                f"failed to update status for {meta.get('name')}: {error_message(err)}"
            ) from err


def _milli(value: Any) -> int:
    if value is None:
        raise ValueError("the metric's target has no value")
    return steward.parse_quantity_milli(value)


def _identifier(ident: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": ident.get("name", "")}
    if ident.get("selector") is not None:
        out["selector"] = ident["selector"]
    return out


CONTROLLER = (
    steward.ControllerBuilder[HPAReconciler](NAME)
    .for_(HORIZONTAL_POD_AUTOSCALERS, steward.generation_changed)
    .reads(PODS, fields=POD_FIELDS)
    .flags(add_flags)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=5, queue_name=QUEUE))
    .beside_upstream(None)
    .describe(
        "Steward's HorizontalPodAutoscaler controller: every sync period, reads each "
        "autoscaling/v2 HPA's target through its /scale subresource and its metrics "
        "(metrics.k8s.io, custom.metrics.k8s.io, external.metrics.k8s.io), computes the "
        "replica count as upstream's replica calculator and behavior rules do, scales the "
        "target and writes the HPA's status. HPAs have no spec.managedBy, so it must not "
        "run beside kube-controller-manager's horizontalpodautoscaling controller."
    )
    .complete(HPAReconciler)
)
"""The HPA controller: HPAs are the primary type (creations, deletions and spec changes
queue them; every sync queues its HPA again after the sync period); pods are read from
the mirror and queue nothing."""
