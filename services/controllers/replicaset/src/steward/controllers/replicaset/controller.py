"""The ReplicaSet controller: ReplicaSets and their pods from the mirror, :mod:`.sync`'s
decisions, and the writes to the API server (pods, status, Events).

# A sync
Pods of a ReplicaSet are the active ones (not finished, not being deleted) that it
controls and that match its selector; matching active orphans are adopted and controlled
active pods that no longer match are released (the runtime's ownership claim). If the
expectations of the previous sync are met and the ReplicaSet is not being deleted, the
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
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import steward
from steward import ApiError, ApiStatusError, ConflictError, NotFoundError, Request, Result
from steward.controllers.replicaset import ranking
from steward.controllers.replicaset.sync import (
    PODS,
    REPLICASETS,
    Failure,
    calculate_status,
    min_ready_seconds,
    next_check,
    pod_from_template,
    scale_diff,
    status_current,
)

log = logging.getLogger(__name__)

NAME = "replicaset"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
COMPONENT = "replicaset-controller"
"""The Events' source component, as upstream's."""
_PODS_KEY = ("", "v1", "pods")
_RS_KEY = ("apps", "v1", "replicasets")

Key = tuple[str, str]
"""(namespace, name) of a ReplicaSet: the key of its expectations."""


def _pod_key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def _message(err: ApiError) -> str:
    return err.message if isinstance(err, ApiStatusError) else str(err)


class ReplicaSetReconciler:
    """Reconciles one ReplicaSet by key; see the module docs. Its expectations are the
    controller's (:attr:`steward.Context.expectations`), lowered by :meth:`observe`."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.api = ctx.api
        self.clock = steward.utc_now
        self.expectations = ctx.expectations
        self.events = ctx.event_recorder(COMPONENT)
        self.pods = ctx.ownership(PODS)

    # Events -----------------------------------------------------------------------------
    def observe(self, change: steward.Change) -> None:
        """Lower expectations as the mirror shows pods of a ReplicaSet appear, get a
        deletion timestamp, or go; forget a deleted ReplicaSet's."""
        obj = change.obj
        if obj.type == _RS_KEY:
            if change.kind is steward.ChangeKind.DELETED:
                self.expectations.forget(obj.key)
            return
        ref = obj.controller_owner() if obj.type == _PODS_KEY else None
        if ref is None or ref.kind != "ReplicaSet" or not ref.api_version.startswith("apps/"):
            return
        rs = self.mirror.get(REPLICASETS, obj.namespace, ref.name)
        if rs is None or rs.meta.uid != ref.uid:
            return
        key = (obj.namespace, ref.name)
        deleting = obj.meta.HasField("deletion_timestamp")
        if change.kind is steward.ChangeKind.ADDED:
            self.expectations.creation_observed(key)
        if deleting or change.kind is steward.ChangeKind.DELETED:
            self.expectations.deletion_observed(key, f"{obj.namespace}/{obj.name}")

    def matching(self, obj: steward.MirrorObject) -> list[Request]:
        """The ReplicaSets whose selector matches an orphan pod (they may adopt it)."""
        if obj.controller_owner() is not None:
            return []
        labels = dict(obj.meta.labels)
        return [
            Request(rs.namespace, rs.name)
            for rs in self.mirror.objects(REPLICASETS, obj.namespace)
            if steward.selector_matches((rs.object.get("spec") or {}).get("selector"), labels)
        ]

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request, contexts: Sequence[steward.TraceContext]) -> Result:
        """Sync one ReplicaSet (see the module docs for what happens on errors)."""
        key: Key = (request.namespace, request.name)
        obj = self.mirror.get(REPLICASETS, *key)
        if obj is None:
            self.expectations.forget(key)
            return Result()
        rs = obj.object
        satisfied = self.expectations.satisfied(key)
        pods = self._pods(rs)
        # As upstream: only active pods are claimed; terminating ones are only counted.
        active = await self.pods.claim(rs, [p for p in pods if steward.pods.is_active(p)])
        selector = (rs.get("spec") or {}).get("selector")
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
            error = await self._manage(rs, key, active)
            if error is not None:
                failure = Failure(creating=scale_diff(rs, len(active)) > 0, message=_message(error))
        now = self.clock()
        status = calculate_status(rs, active, terminating, failure, now)
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
        """Pods the ReplicaSet controls plus the orphans of its namespace (unclaimed)."""
        meta = rs["metadata"]
        owned = self.mirror.by_index(PODS, "controller", meta["uid"])
        orphans = self.mirror.by_index(PODS, "orphan", meta["namespace"])
        return [o.object for o in [*owned, *orphans]]

    # Scaling ----------------------------------------------------------------------------
    async def _manage(
        self, rs: dict[str, Any], key: Key, active: list[dict[str, Any]]
    ) -> ApiError | None:
        """Create or delete pods towards ``spec.replicas``; the first error, if any."""
        diff = scale_diff(rs, len(active))
        if diff > 0:
            outcome = await self.expectations.create(
                key, diff, lambda _: self._create_one(rs), initial_batch=1
            )
        elif diff < 0:
            victims = ranking.pods_to_delete(active, self._related_pods(rs), -diff, self.clock())
            outcome = await self.expectations.delete(
                key, [_pod_key(p) for p in victims], lambda i: self._delete_one(rs, victims[i])
            )
        else:
            return None
        first = outcome.errors[0] if outcome.errors else None
        return first if isinstance(first, ApiError) else None

    async def _create_one(self, rs: dict[str, Any]) -> None:
        """Create one pod of the ReplicaSet (carrying this reconcile's trace context, so
        its later events continue the same trace); raises the API server's error."""
        ns = rs["metadata"]["namespace"]
        try:
            pod = await steward.create_child(self.api, PODS, ns, pod_from_template(rs))
        except ApiError as err:
            if isinstance(err, ApiStatusError) and "being terminated" in err.message:
                return  # namespace going away: every creation would fail (as upstream)
            self.events.event(rs, "Warning", "FailedCreate", f"Error creating: {_message(err)}")
            raise
        name = (pod.get("metadata") or {}).get("name", "")
        self.events.event(rs, "Normal", "SuccessfulCreate", f"Created pod: {name}")

    async def _delete_one(self, rs: dict[str, Any], pod: dict[str, Any]) -> None:
        """Delete one pod; raises the API server's error (a pod gone already: NotFound,
        without an Event)."""
        meta = pod["metadata"]
        try:
            await self.api.arequest(
                "DELETE", steward.api_path(PODS, meta["namespace"], meta["name"])
            )
        except NotFoundError:
            raise
        except ApiError as err:
            self.events.event(rs, "Warning", "FailedDelete", f"Error deleting: {_message(err)}")
            raise
        self.events.event(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    def _related_pods(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        """Pods matching the selector of any ReplicaSet with the same controller as this
        one (none when it has no controller), each once."""
        ref = steward.controller_of(rs)
        if ref is None:
            return []
        ns = rs["metadata"]["namespace"]
        pods = self.mirror.objects(PODS, ns)
        seen: set[str] = set()
        related: list[dict[str, Any]] = []
        for sibling in self.mirror.by_index(REPLICASETS, "controller", str(ref["uid"])):
            if sibling.namespace != ns:
                continue
            selector = (sibling.object.get("spec") or {}).get("selector")
            for pod in pods:
                labels = dict(pod.meta.labels)
                if pod.meta.uid in seen or not steward.selector_matches(selector, labels):
                    continue
                seen.add(pod.meta.uid)
                related.append(pod.object)
        return related

    # Status -----------------------------------------------------------------------------
    async def _write_status(self, rs: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT the status unless nothing changed; on a conflict, once more on a fresh read
        (``observedGeneration`` stays the generation this sync acted on)."""
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
        path = steward.api_path(REPLICASETS, meta["namespace"], meta["name"])
        status = {**status, "observedGeneration": int(meta.get("generation") or 0)}
        try:
            return await self.api.arequest("PUT", f"{path}/status", {**rs, "status": status})
        except ConflictError:
            fresh = await self.api.arequest("GET", path)
        return await self.api.arequest("PUT", f"{path}/status", {**fresh, "status": status})


CONTROLLER = (
    steward.ControllerBuilder[ReplicaSetReconciler](NAME)
    .for_(REPLICASETS, kind="ReplicaSet")
    .owns(PODS)
    .watches(PODS, ReplicaSetReconciler.matching)
    .observe(ReplicaSetReconciler.observe)
    .with_index("controller", steward.index_by_controller)
    .with_index("orphan", steward.orphan_index(PODS))
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=5))
    .beside_upstream(None)
    .describe(
        "Steward's ReplicaSet controller: keeps each ReplicaSet's pods at spec.replicas "
        "and its status current. ReplicaSets have no spec.managedBy, so it must not run "
        "beside kube-controller-manager's replicaset controller."
    )
    .complete(ReplicaSetReconciler)
)
"""The ReplicaSet controller: ReplicaSets are the primary type; a pod change queues its
controlling ReplicaSet (old and new on a change of controller), and an orphan's change
every ReplicaSet whose selector matches it (which may adopt it). Pods and ReplicaSets are
indexed by controller UID, orphan pods by namespace."""
