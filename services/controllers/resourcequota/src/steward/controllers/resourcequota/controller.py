"""The resource quota controller: ``status.hard`` and ``status.used`` of every
ResourceQuota, as upstream's ``resourcequota-controller``
(pkg/controller/resourcequota/resource_quota_controller.go and resource_quota_monitor.go,
the evaluators of pkg/quota/v1 in :mod:`steward.controllers.resourcequota.usage`).

# A sync
Keyed by quota. A quota that is gone is left alone. Otherwise its usage is computed
from the mirror (:func:`~steward.controllers.resourcequota.usage.calculate_usage`, over
the quota's namespace, scopes and scope selector) for the names of ``spec.hard`` some
evaluator computes, each object read once per resource version (the summaries of
:class:`~steward.controllers.resourcequota.usage.UsageMemo`: one sync after another, of
one quota or another, reads again only the objects that changed); ``status.used``
becomes the old ``status.used`` overlaid with that, keeping only the names of
``spec.hard`` (a name no evaluator computes keeps the value it had), and ``status.hard``
becomes ``spec.hard``. The status is written (an update of the ``status`` subresource, at
the version the mirror holds) when ``spec.hard`` and ``status.hard`` differ in value,
either is missing, or the used values changed, as upstream's ``syncResourceQuota``; a
conflict fails the sync, retried with backoff.

# The types counted, and the mirror
The mirror starts with ResourceQuotas alone and watches a counted type from the moment a
quota needs it (:meth:`~steward.runtime.mirror.Mirror.retarget`): pods, services and
claims with the fields their evaluators read, every other type (``count/<resource>.
<group>``, and configmaps, secrets, replicationcontrollers by their bare names) by name
only. A quota waits (queued again after :data:`TYPE_SYNC_WAIT`) until a type it needs
has its snapshot. ``count/`` names are resolved with discovery as upstream's quota
monitor does (namespaced types serving create, list, watch and delete, less upstream's
ignored types), read again when a quota names a type it does not know (at most every
:data:`DISCOVERY_RETRY` seconds; the quota is looked at again after as long). Types no
quota needs any more are dropped at most every :data:`PRUNE_PERIOD` seconds (and the
summaries of objects of namespaces no quota is in any more). When the
informer refuses a type for good (a CustomResourceDefinition deleted), discovery is read
again and the types it no longer serves are dropped.

# Queueing
A quota is queued when it is added, deleted, or its ``spec.hard`` changes in value
(upstream's handlers; its own status writes queue nothing), every
``--resource-quota-sync-period`` (a full recalculation of every quota), and by
replenishment: an object of a counted type deleted, or updated as upstream's update
filter says (a pod that turns terminal or stuck terminating, changes
``activeDeadlineSeconds`` being set, or has the resources of a container status change;
a service whose type for quota changes; any claim update, as upstream's filter compares
pointers), queues every quota of its namespace whose ``status.hard`` names something that
type's evaluator computes (``replenishQuota``).

# What it reads and writes
ResourceQuotas whole; pods, services and claims projected; other counted types by name.
It writes only the ``status`` of ResourceQuotas, and records no Events (upstream
records none).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import steward
from steward import Request, Resource, Result
from steward.controllers.resourcequota.usage import (
    CORE,
    IGNORED,
    Evaluator,
    UsageMemo,
    evaluator_for,
    pod_counts_compute,
    pod_terminating,
    resource_list,
    same_values,
    scope_requirements,
    tracked_type,
    usage_of_summaries,
    written,
)
from steward.kube import ApiError
from steward.runtime.discovery import Discovery
from steward.runtime.mirror import MirrorError
from steward.runtime.subscriptions import TypeSubscription, subscription
from steward.runtime.times import go_duration, utc_now

log = logging.getLogger(__name__)

NAME = "resourcequota"
"""kube-controller-manager's --controllers name of its resourcequota-controller."""
QUEUE = "resourcequota_primary"
"""The work queue's name: upstream's primary queue (its second, ``resourcequota_priority``,
has no counterpart here; see the README)."""
WORKERS = 5
"""Quotas synced at once (``--concurrent-resource-quota-syncs``)."""
SYNC_PERIOD = 300.0
"""Seconds between two full recalculations (``--resource-quota-sync-period``, 5m0s)."""
TYPE_SYNC_WAIT = 0.2
"""Seconds a quota waits for a type just added to the mirror to have its snapshot."""
DISCOVERY_RETRY = 5.0
"""Least seconds between two readings of discovery for a ``count/`` type not known, and
the delay before a quota naming such a type is looked at again."""
PRUNE_PERIOD = 60.0
"""Least seconds between two prunings of the types no quota needs."""
QUOTABLE_VERBS = ("create", "list", "watch", "delete")
"""What a type must serve to be counted (``GetQuotableResources``)."""

RESOURCEQUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
CLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")

POD_FIELDS = (
    "metadata.deletionTimestamp",
    "metadata.deletionGracePeriodSeconds",
    "spec.containers.name",
    "spec.containers.resources",
    "spec.initContainers.name",
    "spec.initContainers.resources",
    "spec.initContainers.restartPolicy",
    "spec.overhead",
    "spec.resources",
    "spec.activeDeadlineSeconds",
    "spec.priorityClassName",
    "spec.affinity.podAffinity",
    "spec.affinity.podAntiAffinity",
    "status.phase",
    "status.qosClass",
    "status.conditions.type",
    "status.conditions.reason",
    "status.containerStatuses.name",
    "status.containerStatuses.resources",
    "status.containerStatuses.allocatedResources",
    "status.initContainerStatuses.name",
    "status.initContainerStatuses.resources",
    "status.initContainerStatuses.allocatedResources",
)
"""What the pod evaluator, its scopes and the update filter read of a pod."""
SERVICE_FIELDS = ("spec.type", "spec.ports.nodePort", "spec.allocateLoadBalancerNodePorts")
"""What the service evaluator reads."""
CLAIM_FIELDS = (
    "metadata.annotations",
    "spec.resources.requests",
    "spec.storageClassName",
    "spec.volumeAttributesClassName",
    "status.allocatedResources",
    "status.currentVolumeAttributesClassName",
    "status.modifyVolumeStatus.targetVolumeAttributesClassName",
)
"""What the claim evaluator and its scope read (the beta storage-class annotation among
the annotations)."""
COUNTED = subscription(fields=("metadata.name",))
"""What is read of a type that is only counted: its name."""

READS: dict[Resource, TypeSubscription] = {
    PODS: subscription(fields=POD_FIELDS),
    SERVICES: subscription(fields=SERVICE_FIELDS),
    CLAIMS: subscription(fields=CLAIM_FIELDS),
}
"""The types whose evaluators read more than names."""

_KNOWN = {(r.group, r.plural): r for r in (PODS, SERVICES, CLAIMS, RESOURCEQUOTAS)}
CORE_TYPES: dict[tuple[str, str], Resource] = {
    key: _KNOWN.get(key) or Resource(key[0], "v1", key[1]) for key in CORE
}
"""The types of upstream's core evaluators, counted whatever discovery says."""


def _sync_period(text: str) -> float:
    return go_duration(text).total_seconds()


def add_flags(parser: argparse.ArgumentParser) -> None:
    """kube-controller-manager's flags of this controller, as aliases of the host's."""
    steward.add_workers_alias(parser, "--concurrent-resource-quota-syncs", "quotas", WORKERS)
    parser.add_argument(
        "--resource-quota-sync-period",
        dest="resync_period",
        type=_sync_period,
        default=argparse.SUPPRESS,
        metavar="DURATION",
        help="the period of a full recalculation of every quota, a Go duration (5m0s); the "
        "same as --resync-period in seconds; 0 for never (default 5m0s)",
    )


def hard_changed(change: steward.Change) -> bool:
    """Upstream's quota handlers: additions and deletions, and updates whose ``spec.hard``
    changed in value (a status write queues nothing)."""
    if change.kind is not steward.ChangeKind.MODIFIED or change.old is None:
        return True
    return not same_values(_spec_hard(change.old.object), _spec_hard(change.obj.object))


def _spec_hard(obj: Mapping[str, Any]) -> dict[str, Any]:
    return resource_list((obj.get("spec") or {}).get("hard"))


def _status_hard_names(obj: Mapping[str, Any]) -> list[str]:
    return list(((obj.get("status") or {}).get("hard") or {}).keys())


def _container_resources(pod: Mapping[str, Any]) -> dict[str, Any]:
    status = pod.get("status") or {}
    return {
        cs.get("name"): cs.get("resources")
        for key in ("containerStatuses", "initContainerStatuses")
        for cs in status.get(key) or ()
    }


def _resources_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    before, after = _container_resources(old), _container_resources(new)
    return any(name in after and after[name] != res for name, res in before.items())


def _service_type(svc: Mapping[str, Any]) -> str:
    kind = (svc.get("spec") or {}).get("type")
    return str(kind) if kind in ("NodePort", "LoadBalancer") else ""


def replenishes(change: steward.Change, now: datetime.datetime) -> bool:
    """Whether a change of a counted object may lower a quota's usage (upstream's monitor:
    every deletion; updates as ``DefaultUpdateFilter``)."""
    if change.kind is steward.ChangeKind.DELETED:
        return True
    if change.kind is not steward.ChangeKind.MODIFIED or change.old is None:
        return False
    rtype = change.obj.type
    old, new = change.old.object, change.obj.object
    if rtype == PODS:
        return (
            _resources_changed(old, new)
            or pod_terminating(old) != pod_terminating(new)
            or (pod_counts_compute(old, now) and not pod_counts_compute(new, now))
        )
    if rtype == SERVICES:
        return _service_type(old) != _service_type(new)
    return rtype == CLAIMS


class QuotaReconciler:
    """Syncs one quota's status; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.quotas = ctx.client(RESOURCEQUOTAS)
        self.discovery = Discovery(ctx.api)
        self.served: dict[tuple[str, str], Resource] = {}
        """Quotable types by (group, plural), as discovery last said."""
        self.read_at: float | None = None
        self.pruned_at = time.monotonic()
        self.memo = UsageMemo()
        """The counted objects' summaries, read again only when an object changes."""
        self.mirror.refused = self._refused

    # Types -----------------------------------------------------------------------------
    async def _read_discovery(self) -> None:
        self.read_at = time.monotonic()
        found = await self.discovery.read(fresh=True)
        served: dict[tuple[str, str], Resource] = {}
        for res in found.preferred():
            r = res.resource
            key = (r.group, r.plural)
            if r.namespaced and res.supports(*QUOTABLE_VERBS) and key not in IGNORED:
                served[key] = r
        self.served = served

    async def resolve(self, key: tuple[str, str]) -> Resource | None:
        """The type of (group, plural) to count: a core type as it is; any other as
        discovery serves it (read again if unknown and not read for a while)."""
        if key in CORE_TYPES:
            return CORE_TYPES[key]
        if key not in self.served and (
            self.read_at is None or time.monotonic() - self.read_at >= DISCOVERY_RETRY
        ):
            try:
                await self._read_discovery()
            except ApiError as err:
                log.warning("cannot read discovery: %s", err)
        return self.served.get(key)

    def _watch(self, wanted: Iterable[Resource]) -> None:
        current = {t: self.mirror.subscription(t) for t in self.mirror.watched_types()}
        new = {t: READS.get(t, COUNTED) for t in wanted if t not in current}
        if new:
            self.mirror.retarget({**current, **new})
            log.info("counting %s from now on", ", ".join(map(str, new)))

    def _prune(self) -> None:
        """Drop the types no quota needs, and the summaries of the namespaces without a
        quota (at most every :data:`PRUNE_PERIOD` seconds)."""
        if time.monotonic() - self.pruned_at < PRUNE_PERIOD:
            return
        self.pruned_at = time.monotonic()
        needed = {RESOURCEQUOTAS}
        namespaces: set[str] = set()
        for quota in self.mirror.objects(RESOURCEQUOTAS):
            namespaces.add(quota.namespace)
            for name in _needed_names(quota.object):
                key = tracked_type(name)
                if key is not None:
                    rtype = CORE_TYPES.get(key) or self.served.get(key)
                    if rtype is not None:
                        needed.add(rtype)
        self.memo.retain(namespaces, {evaluator_for(t.group, t.plural) for t in needed})
        current = {t: self.mirror.subscription(t) for t in self.mirror.watched_types()}
        dropped = [t for t in current if t not in needed]
        if dropped:
            self.mirror.retarget({t: s for t, s in current.items() if t in needed})
            log.info("no quota counts %s any more", ", ".join(map(str, dropped)))

    async def _refused(self, err: MirrorError) -> bool:
        log.info("the informer refused the watch (%s); reading discovery again", err)
        try:
            await self._read_discovery()
        except ApiError as failure:
            log.warning("cannot read discovery: %s", failure)
            return True  # retried after the mirror's backoff
        current = {t: self.mirror.subscription(t) for t in self.mirror.watched_types()}
        served = set(CORE_TYPES.values()) | set(self.served.values())
        kept = {t: s for t, s in current.items() if t in served}
        if len(kept) == len(current):
            return False
        self.mirror.retarget(kept)
        log.info(
            "dropped types no longer served: %s", ", ".join(map(str, set(current) - set(kept)))
        )
        return True

    # Queueing --------------------------------------------------------------------------
    def observe(self, change: steward.Change) -> None:
        """Replenishment (see the module docs): queue the quotas of the namespace that
        count the changed object's type."""
        rtype = change.obj.type
        if rtype == RESOURCEQUOTAS and change.kind is not steward.ChangeKind.DELETED:
            return
        if not change.obj.namespace or not replenishes(change, utc_now()):
            return
        evaluator = evaluator_for(rtype.group, rtype.plural)
        for quota in self.mirror.objects(RESOURCEQUOTAS, change.obj.namespace):
            if evaluator.matching(_status_hard_names(quota.object)):
                self.ctx.enqueue(Request(quota.namespace, quota.name))

    # Syncing ---------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Sync one quota (see the module docs)."""
        started = time.monotonic()
        try:
            return await self.sync(request.namespace, request.name)
        finally:
            log.debug(
                "finished syncing resource quota %s/%s in %.3fs",
                request.namespace,
                request.name,
                time.monotonic() - started,
            )

    async def sync(self, namespace: str, name: str) -> Result:
        """Compute and write one quota's status; a Result asking to look again when a type
        it counts is not in the mirror yet, or unknown to discovery."""
        self._prune()
        found = self.mirror.get(RESOURCEQUOTAS, namespace, name)
        if found is None:
            return Result()
        quota = found.object
        spec = quota.get("spec") or {}
        status = quota.get("status") or {}
        hard = resource_list(spec.get("hard"))
        evaluators: dict[Resource, Evaluator] = {}
        unknown = False
        for resource_name in hard:
            key = tracked_type(resource_name)
            if key is None:
                continue
            rtype = await self.resolve(key)
            if rtype is None:
                unknown = True
                continue
            evaluators.setdefault(rtype, evaluator_for(rtype.group, rtype.plural))
        self._watch(evaluators)
        if not all(self.mirror.synced(t) for t in evaluators):
            return Result(requeue_after=TYPE_SYNC_WAIT)
        computed = usage_of_summaries(
            hard,
            scope_requirements(spec),
            [
                (ev, self.memo.summaries(ev, namespace, self.mirror.objects(t, namespace)))
                for t, ev in evaluators.items()
            ],
            utc_now(),
        )
        old_used = status.get("used")
        used = resource_list(old_used)
        used.update(computed)
        used = {k: v for k, v in used.items() if k in hard}
        old_hard = status.get("hard")
        dirty = (
            old_hard is None
            or old_used is None
            or not same_values(hard, resource_list(old_hard))
            or not same_values(used, resource_list(old_used))
        )
        if dirty:
            new_status = {"hard": dict(spec.get("hard") or {}), "used": written(used)}
            await self.quotas.update_status(quota, new_status)
            log.debug("resource quota %s/%s: used %s", namespace, name, new_status["used"])
        if unknown:
            return Result(requeue_after=DISCOVERY_RETRY)
        return Result()


def _needed_names(quota: Mapping[str, Any]) -> set[str]:
    spec_hard = ((quota.get("spec") or {}).get("hard") or {}).keys()
    return set(spec_hard) | set(_status_hard_names(quota))


CONTROLLER = (
    steward.ControllerBuilder[QuotaReconciler](NAME)
    .for_(RESOURCEQUOTAS, hard_changed)
    .observe(QuotaReconciler.observe)
    .flags(add_flags)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=WORKERS, resync_period=SYNC_PERIOD, queue_name=QUEUE
        )
    )
    .beside_upstream(None)
    .describe(
        "Steward's resource quota controller: status.hard and status.used of every "
        "ResourceQuota with upstream's evaluators (pods, services, persistent volume "
        "claims, object counts of any type), replenished when counted objects go, as "
        "kube-controller-manager's resourcequota-controller. --workers is upstream's "
        "--concurrent-resource-quota-syncs (5), --resync-period its "
        "--resource-quota-sync-period (300 s). Both would write the same statuses, so it "
        "must not run beside upstream's."
    )
    .complete(QuotaReconciler)
)
"""The resource quota controller: quotas are the primary type; the counted types join
the mirror as quotas need them."""
