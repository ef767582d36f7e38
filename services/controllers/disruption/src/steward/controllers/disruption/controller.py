"""The disruption controller: PodDisruptionBudgets, their pods and the pods' controllers
from the mirror, :mod:`.expected`'s, :mod:`.status`'s and :mod:`.stale`'s decisions, and the
writes (the budget's status, pods' stale ``DisruptionTarget`` conditions, Events), as
upstream's ``disruption-controller`` (pkg/controller/disruption/disruption.go, v1.37.2).

# Keys
One work queue, named ``disruption`` as upstream's main queue, carries two kinds of key:
a budget (:class:`~steward.Request`) and a pod whose ``DisruptionTarget`` condition may
go stale (:class:`StalePod`, upstream's ``stale_pod_disruption`` queue). Upstream's
``disruption_recheck`` queue only hands a budget back to the main queue after a delay: here
the budget is queued after that delay directly.

- A budget is queued when it is added, changed or deleted, and when a pod it selects is
  added, changed or deleted (the first budget by name whose selector selects the pod; a
  pod selected by several gets a ``MultiplePodDisruptionBudgets`` Event). A change of a
  ReplicationController, ReplicaSet, Deployment or StatefulSet queues nothing (as
  upstream: a scale change reaches the budget through its pods' events).
- A pod is queued as a :class:`StalePod` on its addition or change when its
  ``DisruptionTarget`` condition is True and could go stale, after the time left
  (:func:`.stale.stale_disruption`).

# A budget's sync
Upstream's ``trySync``: the pods its selector selects from the mirror (a ``NoPods`` Event
when none; an absent selector selects none, an empty one every pod of the namespace), the
expected count (from the mirrored workloads, and through the ``scale`` subresource for
owners of any other kind, found through discovery; a ``CalculateExpectedPodCountFailed``
Event on error, an ``UnmanagedPods`` Event when some pods have no controller), then the
status (:func:`.status.sync`), written to ``poddisruptionbudgets/status`` unless it is up to
date. ``NotDeleted`` Events name the pods whose disruption outlived its timeout. After a
successful sync the budget is queued again when its earliest ``disruptedPods`` entry
expires.

# Errors
A conflict on the status write ends the sync with the error (retried with backoff, as
is). Any other failure writes the fail-safe status (``disruptionsAllowed: 0``, the
condition ``SyncFailed`` with the error); the sync then succeeds if that write does, as
upstream's ``failSafe``, and the budget waits for its next event. A stale condition's
patch that fails is retried with backoff.

# What it reads
Budgets whole (the status write is a copy of the mirror's object); of pods their metadata,
phase and conditions (:data:`POD_FIELDS`); of the workloads their metadata and
``spec.replicas``. The ``scale`` subresources are read from the API server at sync time.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import steward
from steward import (
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    REPLICATION_CONTROLLERS,
    STATEFULSETS,
    ApiError,
    ConflictError,
    NotFoundError,
    Request,
    Resource,
    Result,
    error_message,
)
from steward.controllers.disruption import stale, status
from steward.controllers.disruption.expected import (
    NOT_FOUND,
    ExpectedCount,
    ExpectedCountError,
    OwnerRef,
    Scale,
    ScaleFailure,
    ScaleLookup,
    Workloads,
    expected_count,
    scale_lookups,
)
from steward.runtime.discovery import Discovery

log = logging.getLogger(__name__)

NAME: Final = "disruption"
"""The controller's name with the manager (kube-controller-manager's alias of its
``disruption-controller``)."""
COMPONENT: Final = "controllermanager"
"""The Events' source component, as upstream's (its recorder's ``controllermanager``)."""
QUEUE: Final = "disruption"
"""Upstream's main work queue name."""
WORKERS: Final = 1
"""Keys synced at once (kube-controller-manager's ``--concurrent-disruption-syncs``)."""

PODDISRUPTIONBUDGETS: Final = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"
)
"""``policy/v1`` PodDisruptionBudgets."""

POD_FIELDS: Final = ("status.phase", "status.conditions")
"""What is read of a pod besides its metadata (labels, controller, deletion mark,
generation): its phase (terminal pods' conditions are never stale) and conditions (Ready,
``DisruptionTarget``)."""
WORKLOAD_FIELDS: Final = ("spec.replicas",)
"""What is read of a workload besides its metadata (UID, controller)."""

SCALE_VERSIONS: Final = frozenset(
    {
        ("autoscaling", "v1"),
        ("autoscaling", "__internal"),
        ("extensions", "v1beta1"),
        ("extensions", "__internal"),
        ("apps", "__internal"),
        ("apps", "v1beta1"),
        ("apps", "v1beta2"),
    }
)
"""The group versions of ``Scale`` a subresource may serve to count as implementing it
(client-go's ``ScaleConverter.ScaleVersions``)."""


@dataclass(frozen=True)
class StalePod:
    """The key of a pod whose ``DisruptionTarget`` condition is looked at (upstream's
    ``stale_pod_disruption`` queue)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"stale-disruption {self.namespace}/{self.name}"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """kube-controller-manager's flag of this controller, as an alias of the host's."""
    steward.add_workers_alias(
        parser, "--concurrent-disruption-syncs", "PodDisruptionBudgets", WORKERS
    )


def selects(budget: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the budget's ``spec.selector`` selects ``labels`` (``policy/v1``: an absent
    selector selects nothing, an empty one everything)."""
    selector = (budget.get("spec") or {}).get("selector")
    if selector is None:
        return False
    return steward.selector_matches(selector, labels, empty_matches_all=True)


def format_selector(selector: Mapping[str, Any] | None) -> str:
    """A label selector as Go's ``%v`` prints a ``*metav1.LabelSelector`` (its generated
    ``String``), for the ``UnmanagedPods`` Event."""
    if selector is None:
        return "nil"
    labels = selector.get("matchLabels") or {}
    pairs = "".join(f"{k}: {labels[k]}," for k in sorted(labels))
    expressions = "".join(
        "LabelSelectorRequirement{"
        f"Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
        f"Values:[{' '.join(e.get('values') or ())}],}},"
        for e in selector.get("matchExpressions") or ()
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{pairs}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def _needs_controllers(budget: Mapping[str, Any]) -> bool:
    """Whether the expected count reads the pods' controllers (anything but an int
    ``minAvailable``)."""
    spec = budget.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        return True
    return isinstance(spec.get("minAvailable"), str)


class DisruptionReconciler:
    """Syncs one budget, or clears one pod's stale condition, by key; see the module docs."""

    def __init__(
        self, ctx: steward.Context, clock: Callable[[], datetime] = steward.utc_now
    ) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.clock = clock
        self.events = ctx.event_recorder(COMPONENT, clock=clock)
        self.pod_events = ctx.event_recorder(COMPONENT, clock=clock, about=PODS)
        self.budgets = ctx.client(PODDISRUPTIONBUDGETS)
        self.pods = ctx.client(PODS)
        self.discovery = Discovery(ctx.api)

    # Keys ---------------------------------------------------------------------------------
    def budget_of(self, change: steward.Change) -> Iterable[Request]:
        """Upstream's ``getPdbForPod``: the first budget (by name) selecting the pod, with
        a ``MultiplePodDisruptionBudgets`` Event when several do."""
        pod = change.obj.object
        ns, name = change.obj.namespace, change.obj.name
        labels = _meta(pod).get("labels") or {}
        budgets = sorted(
            (b for b in self.mirror.objects(PODDISRUPTIONBUDGETS, ns) if selects(b.object, labels)),
            key=lambda b: b.name,
        )
        if not budgets:
            return []
        if len(budgets) > 1:
            message = (
                f'Pod "{ns}"/"{name}" matches multiple PodDisruptionBudgets.  '
                f'Chose "{budgets[0].name}" arbitrarily.'
            )
            log.info("%s", message)
            self.pod_events.event(pod, "Warning", "MultiplePodDisruptionBudgets", message)
        return [Request(ns, budgets[0].name)]

    def observe(self, change: steward.Change) -> None:
        """A pod added or changed whose ``DisruptionTarget`` condition could go stale: its
        :class:`StalePod` key, queued after the time left (upstream's ``addPod`` and
        ``updatePod``)."""
        if change.obj.type != PODS or change.kind is steward.ChangeKind.DELETED:
            return
        left = stale.stale_disruption(change.obj.object, self.clock())
        if left is not None:
            self.ctx.enqueue(StalePod(change.obj.namespace, change.obj.name), left.total_seconds())

    # Reconcile ----------------------------------------------------------------------------
    async def reconcile(self, key: Request | StalePod) -> Result:
        if isinstance(key, StalePod):
            return await self._stale(key)
        obj = self.mirror.get(PODDISRUPTIONBUDGETS, key.namespace, key.name)
        if obj is None:
            return Result()
        budget = obj.object
        try:
            recheck = await self._try_sync(budget)
        except ConflictError:
            raise
        except (ApiError, ExpectedCountError) as err:
            message = error_message(err)
            log.error("sync of budget %s/%s failed: %s", key.namespace, key.name, message)
            await self.budgets.update_status(
                budget, status.fail_safe(budget, message, self.clock())
            )
            return Result()
        if recheck is not None:
            return Result(requeue_after=max(recheck, 0.001))
        return Result()

    async def _try_sync(self, budget: dict[str, Any]) -> float | None:
        """Upstream's ``trySync``: the status written if it changed; the seconds until the
        budget must be looked at again for its disrupted pods (None: no need)."""
        meta = _meta(budget)
        ns = str(meta.get("namespace") or "")
        pods = [p.object for p in self.mirror.objects(PODS, ns)]
        selected = [p for p in pods if selects(budget, _meta(p).get("labels") or {})]
        selected.sort(key=lambda p: str(_meta(p).get("name") or ""))
        if not selected:
            self.events.event(budget, "Normal", "NoPods", "No matching pods found")
        try:
            expected = await self._expected(budget, selected, ns)
        except ExpectedCountError as err:
            self.events.event(
                budget,
                "Warning",
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {err}",
            )
            raise
        if expected.unmanaged_pods:
            selector = format_selector((budget.get("spec") or {}).get("selector"))
            self.events.event(
                budget,
                "Warning",
                "UnmanagedPods",
                f"Pods selected by this PodDisruptionBudget (selector: {selector}) were found "
                "to be unmanaged. As a result, the status of the PDB cannot be calculated "
                "correctly, which may result in undefined behavior. To account for these pods "
                'please set ".spec.minAvailable" field of the PDB to an integer value.',
            )
        now = self.clock()
        decision = status.sync(budget, selected, expected, now)
        by_name = {str(_meta(p).get("name") or ""): p for p in selected}
        for name in decision.not_deleted:
            self.pod_events.event(
                by_name[name],
                "Warning",
                "NotDeleted",
                f"Pod was expected by PDB {ns}/{meta.get('name', '')} to be deleted but it wasn't",
            )
        if decision.status is not None:
            await self.budgets.update_status(budget, decision.status)
        if decision.recheck_after is None:
            return None
        return decision.recheck_after.total_seconds()

    async def _expected(
        self, budget: dict[str, Any], selected: list[dict[str, Any]], ns: str
    ) -> ExpectedCount:
        """Upstream's ``getExpectedPodCount``, the scale subresources read first when the
        pods' controllers count and some are of no mirrored kind."""
        workloads = Workloads()
        scales: dict[OwnerRef, ScaleLookup] = {}
        if _needs_controllers(budget):
            workloads = Workloads(
                replication_controllers=self._by_name(REPLICATION_CONTROLLERS, ns),
                replica_sets=self._by_name(REPLICASETS, ns),
                deployments=self._by_name(DEPLOYMENTS, ns),
                stateful_sets=self._by_name(STATEFULSETS, ns),
            )
            for ref in scale_lookups(selected, workloads):
                scales[ref] = await self._scale(ns, ref)
        return expected_count(budget, selected, workloads, scales)

    def _by_name(self, rtype: Resource, ns: str) -> dict[str, dict[str, Any]]:
        return {o.name: o.object for o in self.mirror.objects(rtype, ns)}

    async def _scale(self, ns: str, ref: OwnerRef) -> ScaleLookup:
        """Upstream's ``getScaleController``: the owner's ``scale`` subresource, through
        discovery's mapping of its kind; a NotFound tells a missing owner
        (:data:`NOT_FOUND`) from a resource without ``scale`` (a failure) by discovery."""
        group = ref.group
        version = ref.api_version.rpartition("/")[2]
        try:
            resource = await self.discovery.find(group, version, ref.kind)
        except ApiError as err:
            return ScaleFailure(error_message(err))
        if resource is None:
            return ScaleFailure(f'no matches for kind "{ref.kind}" in version "{ref.api_version}"')
        try:
            scale = await self.ctx.client(resource).get(ns, ref.name, subresource="scale")
        except NotFoundError:
            try:
                implements = await self._implements_scale(resource)
            except ApiError as err:
                return ScaleFailure(error_message(err))
            if not implements:
                gr = f"{resource.plural}.{group}" if group else resource.plural
                return ScaleFailure(f"{gr} does not implement the scale subresource")
            return NOT_FOUND
        except ApiError as err:
            return ScaleFailure(error_message(err))
        replicas = int((scale.get("spec") or {}).get("replicas") or 0)
        return Scale(str(_meta(scale).get("uid") or ""), replicas)

    async def _implements_scale(self, resource: Resource) -> bool:
        """Upstream's ``implementsScale``: whether the group version's resource list has
        ``<plural>/scale`` serving a ``Scale``."""
        prefix = f"/apis/{resource.api_version}" if resource.group else "/api/v1"
        listing = await self.ctx.api.arequest("GET", prefix)
        for entry in listing.get("resources") or ():
            if (
                entry.get("name") == f"{resource.plural}/scale"
                and entry.get("kind") == "Scale"
                and (entry.get("group", ""), entry.get("version", "")) in SCALE_VERSIONS
            ):
                return True
        return False

    # Stale DisruptionTarget conditions ----------------------------------------------------
    async def _stale(self, key: StalePod) -> Result:
        """Upstream's ``syncStalePodDisruption``: a pod whose condition went stale gets it
        set False; one not stale yet is queued again. Upstream updates the status of the
        version it read, so any change meanwhile conflicts; here a JSON patch tests the
        very condition the decision was made on (its index, type, status and time) and
        replaces it: a change of that condition meanwhile fails the test (422, retried
        from a newer mirror), while a change elsewhere in the pod, which the mirror's
        projection of pods may not show, does not hold the write back forever."""
        obj = self.mirror.get(PODS, key.namespace, key.name)
        if obj is None:
            return Result()
        pod = obj.object
        now = self.clock()
        left = stale.stale_disruption(pod, now)
        if left is None:
            return Result()
        if left.total_seconds() > 0:
            self.ctx.enqueue(key, left.total_seconds())
            return Result()
        conditions = (pod.get("status") or {}).get("conditions") or []
        index, old = next(
            (i, c) for i, c in enumerate(conditions) if c.get("type") == stale.DISRUPTION_TARGET
        )
        cleared = stale.cleared_conditions(pod, now)[index]
        at = f"/status/conditions/{index}"
        patch = [
            {"op": "test", "path": f"{at}/type", "value": stale.DISRUPTION_TARGET},
            {"op": "test", "path": f"{at}/status", "value": old.get("status")},
            {
                "op": "test",
                "path": f"{at}/lastTransitionTime",
                "value": old.get("lastTransitionTime"),
            },
            {"op": "replace", "path": at, "value": cleared},
        ]
        await self.pods.patch(
            key.namespace, key.name, patch, patch_type="json", subresource="status"
        )
        log.info(
            "pod %s/%s: stale DisruptionTarget condition reset to False", key.namespace, key.name
        )
        return Result()


CONTROLLER = (
    steward.ControllerBuilder[DisruptionReconciler](NAME)
    .for_(PODDISRUPTIONBUDGETS)
    .watches_changes(PODS, DisruptionReconciler.budget_of, metadata_only=True, fields=POD_FIELDS)
    .reads(REPLICATION_CONTROLLERS, metadata_only=True, fields=WORKLOAD_FIELDS)
    .reads(REPLICASETS, metadata_only=True, fields=WORKLOAD_FIELDS)
    .reads(DEPLOYMENTS, metadata_only=True, fields=WORKLOAD_FIELDS)
    .reads(STATEFULSETS, metadata_only=True, fields=WORKLOAD_FIELDS)
    .observe(DisruptionReconciler.observe)
    .flags(add_flags)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=WORKERS, queue_name=QUEUE))
    .beside_upstream(None)
    .describe(
        "Steward's disruption controller, as kube-controller-manager's disruption-controller: "
        "keeps each policy/v1 PodDisruptionBudget's status (healthy, desired and expected "
        "pods, disruptions allowed, disrupted pods pruned after 2 minutes, the "
        "DisruptionAllowed condition; disruptionsAllowed 0 when a sync fails) that the "
        "eviction API reads, counting the pods' controllers (ReplicationControllers, "
        "Deployments, ReplicaSets, StatefulSets, any kind through its scale subresource), "
        "and sets False a pod's DisruptionTarget condition left True for 2 minutes on a "
        "pod that was not deleted. --workers (or --concurrent-disruption-syncs) defaults "
        "to upstream's 1. Both would write the same statuses, so it must not run beside "
        "upstream's."
    )
    .complete(DisruptionReconciler)
)
"""The controller: budgets are the primary type; a pod's change queues the budget that
selects it; workloads are read from the mirror."""
