"""The replica controller: ReplicaSets (or ReplicationControllers) and their pods from
the mirror, :mod:`.sync`'s decisions, and the writes to the API server (pods, status,
Events). One reconciler serves both kinds, as upstream's ``ReplicaSetController`` serves
both (``pkg/controller/replicaset/replica_set.go``, wrapped by
``pkg/controller/replication``); a :class:`~.kinds.Kind` says where they differ, and
:func:`definition` declares the controller of one kind (:data:`CONTROLLER` here, the
ReplicationController's in :mod:`.replication`).

# A sync
Pods of an owner are the active ones (not finished, not being deleted) that it
controls and that match its selector; matching active orphans are adopted and controlled
active pods that no longer match are released (the runtime's ownership claim). If the
expectations of the previous sync are met and the owner is not being deleted, the
difference to ``spec.replicas`` is created (slow-start batches, at most
:data:`~.sync.BURST_REPLICAS`) or deleted (in :mod:`.ranking`'s order). Then the status
is written if it changed, and, with ``minReadySeconds``, the key comes back when the next
ready pod becomes available.

# Errors
A failed adoption or release ends the sync with an error (retried with backoff). A failed
creation stops the remaining batches; failed creations and deletions are un-expected at
once, set the ``ReplicaFailure`` condition (removed by the next sync that succeeds) and
make the sync raise after the status is written, so it is retried with backoff. A status
write that conflicts is retried once on a fresh read, as upstream; then the sync raises.
Events are best effort: a failure to record one is logged, never retried.

# What it reads
Owners whole (a status write is a copy of the mirror's object); of a pod only
:data:`POD_FIELDS`, which is all the mirror holds of it. Pods are only created, patched
(adoption and release name the owner reference, nothing read) and deleted, never written
back from the mirror's copy.
"""

from __future__ import annotations

import logging
from typing import Any

import steward
from steward import PODS, ApiError, Request, Result
from steward.controllers.replicaset import ranking
from steward.controllers.replicaset.kinds import REPLICA_SET, Kind
from steward.controllers.replicaset.sync import (
    Failure,
    calculate_status,
    min_ready_seconds,
    next_check,
    pod_from_template,
    scale_diff,
    status_current,
)

log = logging.getLogger(__name__)

NAME = REPLICA_SET.name
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
COMPONENT = REPLICA_SET.component
"""The Events' source component, as upstream's."""
POD_FIELDS = (
    "metadata.labels",
    "metadata.annotations",
    "metadata.ownerReferences",
    "metadata.deletionTimestamp",
    "metadata.creationTimestamp",
    "spec.nodeName",
    "spec.initContainers.name",
    "spec.initContainers.restartPolicy",
    "status.phase",
    "status.conditions.type",
    "status.conditions.status",
    "status.conditions.lastTransitionTime",
    "status.containerStatuses.restartCount",
    "status.initContainerStatuses.name",
    "status.initContainerStatuses.restartCount",
)
"""What the controller reads of a pod (one an owner controls, or an orphan): its labels
and controller (the claim), deletion mark and phase (active, terminating), Ready condition
(ready, available), and what :mod:`.ranking` orders deletions by: the node, the
deletion-cost annotation, the restarts of containers and sidecars (init containers with
``restartPolicy: Always``) and the creation time."""


class ReplicaSetReconciler:
    """Reconciles one owner of ``kind`` (a ReplicaSet unless told) by key; see the module
    docs. Its expectations are the controller's, lowered by the runtime as the mirror
    shows its pods (``owns(..., expect=True)``)."""

    def __init__(self, ctx: steward.Context, kind: Kind = REPLICA_SET) -> None:
        self.kind = kind
        self.mirror = ctx.mirror
        self.clock = steward.utc_now
        self.expectations = ctx.expectations
        self.owners = ctx.client(kind.resource)
        self.pods = ctx.children(PODS, events=ctx.event_recorder(kind.component))

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Sync one owner (see the module docs for what happens on errors)."""
        key = (request.namespace, request.name)
        obj = self.mirror.get(self.kind.resource, *key)
        if obj is None:
            self.expectations.forget(key)
            return Result()
        rs = obj.object
        satisfied = self.expectations.satisfied(key)
        pods = self._pods(rs)
        # As upstream: only active pods are claimed; terminating ones are only counted.
        selector = self.kind.selector(rs)
        candidates = [p for p in pods if steward.pods.is_active(p)]
        active = await self.pods.claim(rs, candidates, selector)
        terminating = [
            p
            for p in pods
            if steward.pods.is_terminating(p)
            and steward.is_controlled_by(p, rs)
            and steward.selector_matches(selector, p["metadata"].get("labels") or {})
        ]
        failure: Failure | None = None
        error: ApiError | None = None
        if satisfied and not rs["metadata"].get("deletionTimestamp"):
            error = await self._manage(rs, active)
            if error is not None:
                failure = Failure(
                    creating=scale_diff(rs, len(active)) > 0, message=steward.error_message(error)
                )
        now = self.clock()
        status = calculate_status(rs, active, terminating, failure, now, self.kind)
        written = await self._write_status(rs, status)
        if error is not None:
            raise error
        wst = written.get("status") or {}
        min_ready = min_ready_seconds(written)
        if min_ready > 0 and wst.get("readyReplicas", 0) != wst.get("availableReplicas", 0):
            after = next_check(written, active, now)
            return Result(requeue_after=float(min_ready) if after is None else max(after, 0.001))
        return Result()

    def _pods(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        """Pods the owner controls plus the orphans of its namespace (unclaimed)."""
        meta = rs["metadata"]
        owned = self.mirror.by_index(PODS, "controller", meta["uid"])
        orphans = self.mirror.by_index(PODS, "orphan", meta["namespace"])
        return [o.object for o in [*owned, *orphans]]

    # Scaling ----------------------------------------------------------------------------
    async def _manage(self, rs: dict[str, Any], active: list[dict[str, Any]]) -> ApiError | None:
        """Create or delete pods towards ``spec.replicas``; the first error, if any."""
        diff = scale_diff(rs, len(active))
        if diff > 0:
            pods = [pod_from_template(rs, self.kind) for _ in range(diff)]
            outcome = await self.pods.create_all(rs, pods)
        elif diff < 0:
            victims = ranking.pods_to_delete(active, self._related_pods(rs), -diff, self.clock())
            outcome = await self.pods.delete_all(rs, victims)
        else:
            return None
        first = outcome.errors[0] if outcome.errors else None
        return first if isinstance(first, ApiError) else None

    def _related_pods(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        """Pods matching the selector of any owner of the same kind with the same
        controller as this one (none when it has no controller), each once."""
        ref = steward.controller_of(rs)
        if ref is None:
            return []
        ns = rs["metadata"]["namespace"]
        pods = self.mirror.objects(PODS, ns)
        seen: set[str] = set()
        related: list[dict[str, Any]] = []
        for sibling in self.mirror.by_index(self.kind.resource, "controller", str(ref["uid"])):
            if sibling.namespace != ns:
                continue
            selector = self.kind.selector(sibling.object)
            for pod in pods:
                labels = dict(pod.meta.labels)
                if pod.meta.uid in seen or not steward.selector_matches(selector, labels):
                    continue
                seen.add(pod.meta.uid)
                related.append(pod.object)
        return related

    # Status -----------------------------------------------------------------------------
    async def _write_status(self, rs: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Write the status unless nothing changed; on a conflict, once more on a fresh
        read (``observedGeneration`` stays the generation this sync acted on)."""
        meta = rs["metadata"]
        log.debug(
            "sync %s/%s@%s: status %s",
            meta["namespace"],
            meta["name"],
            meta.get("resourceVersion"),
            status,
        )
        if status_current(rs, status):
            return rs
        status = {**status, "observedGeneration": int(meta.get("generation") or 0)}
        return await self.owners.update_status(rs, status, retry_on_conflict=True)


def definition(kind: Kind, description: str) -> steward.ControllerDefinition[ReplicaSetReconciler]:
    """The controller of owners of ``kind``: they are the primary type; a pod change
    queues its controlling owner (old and new on a change of controller) after lowering
    its expectations, and an orphan's change every owner whose selector matches it (which
    may adopt it). Pods and owners are indexed by controller UID, orphan pods by
    namespace. Owners have no ``spec.managedBy``, so it must not run beside upstream's."""

    def reconciler(ctx: steward.Context) -> ReplicaSetReconciler:
        return ReplicaSetReconciler(ctx, kind)

    return (
        steward.ControllerBuilder[ReplicaSetReconciler](kind.name)
        .for_(kind.resource)
        .owns(PODS, expect=True, fields=POD_FIELDS)
        .adopts(PODS, selector=kind.selector, fields=POD_FIELDS)
        .with_index("controller", steward.index_by_controller)
        .with_index("orphan", steward.orphan_index(PODS))
        .with_options(steward.ControllerOptions(max_concurrent_reconciles=5, queue_name=kind.queue))
        .beside_upstream(None)
        .describe(description)
        .complete(reconciler)
    )


CONTROLLER = definition(
    REPLICA_SET,
    "Steward's ReplicaSet controller: keeps each ReplicaSet's pods at spec.replicas "
    "and its status current. ReplicaSets have no spec.managedBy, so it must not run "
    "beside kube-controller-manager's replicaset controller.",
)
"""The ReplicaSet controller (see :func:`definition`)."""
