"""The ReplicaSet controller service: ReplicaSets and their pods from the mirror,
:mod:`.sync`'s decisions, and the writes to the API server (pods, status, Events).

# A sync
Pods of a ReplicaSet are the active ones (not finished, not being deleted) that it
controls and that match its selector; matching orphans are adopted (after a fresh GET of
the ReplicaSet, which must still exist under the same UID and not be being deleted) and
controlled pods that no longer match are released. If the expectations of the previous
sync are met and the ReplicaSet is not being deleted, the difference to
``spec.replicas`` is created (slow-start batches, at most :data:`~.sync.BURST_REPLICAS`)
or deleted (in :mod:`.ranking`'s order). Then the status is written if it changed, and,
with ``minReadySeconds``, the key comes back when the next ready pod becomes available.

# Errors
A failed adoption or release ends the sync with an error (retried with backoff). A failed
creation stops the remaining batches; failed creations and deletions are un-expected at
once, set the ``ReplicaFailure`` condition (removed by the next sync that succeeds) and
make the sync raise after the status is written, so it is retried with backoff. A status
write that conflicts is retried once on a fresh read, as upstream; then the sync raises.
Events are best effort: a failure to record one is logged, never retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import grpc

from steward.controllers.replicaset import ranking
from steward.controllers.replicaset.expectations import Expectations, Key
from steward.controllers.replicaset.sync import (
    Failure,
    calculate_status,
    controller_ref,
    min_ready_seconds,
    next_check,
    pod_from_template,
    scale_diff,
    selector_matches,
    slow_start_batches,
    status_current,
)
from steward.kube import ApiError, ApiStatusError, ConflictError, KubeClient, NotFoundError
from steward.runtime import Request, Result, TraceContext
from steward.runtime.controller import Controller, ControllerBuilder, ControllerOptions
from steward.runtime.events import EventRecorder
from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorObject, resource_type
from steward.runtime.tracing import outgoing_headers

log = logging.getLogger(__name__)

NAME = "replicaset"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
COMPONENT = "replicaset-controller"
"""The Events' source component, as upstream's."""
REPLICASETS = resource_type("apps", "v1", "replicasets")
PODS = resource_type("", "v1", "pods")
_PODS_KEY = ("", "v1", "pods")
_RS_KEY = ("apps", "v1", "replicasets")
_SMP = "application/strategic-merge-patch+json"
_STALE_RECHECK = 1.0
"""Seconds after which a sync skipped for a mirror behind our own write looks again."""


def _rs_owner(obj: MirrorObject) -> Any:
    """The object's controller reference if it names a ReplicaSet (apps), else None."""
    ref = obj.controller_owner()
    if ref is None or ref.kind != "ReplicaSet" or ref.api_version.rpartition("/")[0] != "apps":
        return None
    return ref


def _orphans(obj: MirrorObject) -> Iterable[str]:
    """Index of pods without a controlling owner, by namespace (adoption candidates)."""
    if obj.type != _PODS_KEY or obj.controller_owner() is not None:
        return ()
    return (obj.namespace,)


def _controlled_by(obj: MirrorObject) -> Iterable[str]:
    """Index of objects by the UID of their controlling owner."""
    ref = obj.controller_owner()
    return (ref.uid,) if ref is not None else ()


def _pod_key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def _deleting(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class ReplicaSetReconciler:
    """Reconciles one ReplicaSet by key; see the module docs.

    Keeps per-ReplicaSet expectations in memory, fed by :meth:`observe` (registered on
    the mirror); after a restart every ReplicaSet starts satisfied, which is safe because
    a sync counts what the mirror shows.
    """

    def __init__(
        self,
        mirror: Mirror,
        api: KubeClient,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.mirror = mirror
        self.api = api
        self.clock = clock
        self.expectations = Expectations()
        self.events = EventRecorder(
            api,
            api_version="apps/v1",
            kind="ReplicaSet",
            component=COMPONENT,
            reporting_component="steward.io/replicaset-controller",
            clock=clock,
        )
        self._superseded: dict[Key, str] = {}
        """Per ReplicaSet, the resource version our last status write replaced: while the
        mirror still shows it, the mirror is behind our own write (the write's own event
        brings the key back)."""
        mirror.add_handler(self.observe)

    # Events -----------------------------------------------------------------------------
    def observe(self, change: Change) -> None:
        """Lower expectations as the mirror shows pods of a ReplicaSet appear, get a
        deletion timestamp, or go; forget a deleted ReplicaSet's."""
        obj = change.obj
        if obj.type == _RS_KEY:
            if change.kind is ChangeKind.DELETED:
                self.expectations.forget(obj.key)
                self._superseded.pop(obj.key, None)
            return
        if obj.type != _PODS_KEY:
            return
        ref = _rs_owner(obj)
        if ref is None:
            return
        rs = self.mirror.get(REPLICASETS, obj.namespace, ref.name)
        if rs is None or rs.meta.uid != ref.uid:
            return
        key = (obj.namespace, ref.name)
        pod_key = f"{obj.namespace}/{obj.name}"
        deleting = bool(obj.object["metadata"].get("deletionTimestamp"))
        if change.kind is ChangeKind.ADDED:
            self.expectations.creation_observed(key)
            if deleting:
                self.expectations.deletion_observed(key, pod_key)
        elif change.kind is ChangeKind.MODIFIED:
            if deleting:
                self.expectations.deletion_observed(key, pod_key)
        else:
            self.expectations.deletion_observed(key, pod_key)

    def matching(self, obj: MirrorObject) -> list[Request]:
        """The ReplicaSets whose selector matches an orphan pod (they may adopt it)."""
        if obj.controller_owner() is not None:
            return []
        labels = dict(obj.meta.labels)
        return [
            Request(rs.namespace, rs.name)
            for rs in self.mirror.objects(REPLICASETS, obj.namespace)
            if selector_matches((rs.object.get("spec") or {}).get("selector"), labels)
        ]

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request, contexts: Sequence[TraceContext]) -> Result:
        """Sync one ReplicaSet (see the module docs for what happens on errors)."""
        key: Key = (request.namespace, request.name)
        obj = self.mirror.get(REPLICASETS, *key)
        if obj is None:
            self.expectations.forget(key)
            self._superseded.pop(key, None)
            return Result()
        if self._superseded.get(key) == obj.resource_version:
            # Our newer write is on its way to the mirror, and its event brings the key
            # back; look again after a while all the same, so that a sync is never lost.
            log.debug("sync %s/%s: skipped, our newer write is on its way", *key)
            return Result(requeue_after=_STALE_RECHECK)
        self._superseded.pop(key, None)
        rs = obj.object
        satisfied = self.expectations.satisfied(key)
        candidates = self._candidates(rs)
        active, terminating = await self._claim(rs, candidates)
        failure: Failure | None = None
        error: ApiError | None = None
        being_deleted = bool(rs["metadata"].get("deletionTimestamp"))
        if satisfied and not being_deleted:
            error = await self._manage(rs, key, active)
            if error is not None:
                message = error.message if isinstance(error, ApiStatusError) else str(error)
                failure = Failure(creating=scale_diff(rs, len(active)) > 0, message=message)
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

    def _candidates(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        """Pods the ReplicaSet controls plus the orphans of its namespace (unclaimed)."""
        meta = rs["metadata"]
        owned = self.mirror.by_index(PODS, "controller", meta["uid"])
        orphans = self.mirror.by_index(PODS, "orphan", meta["namespace"])
        return [o.object for o in [*owned, *orphans]]

    async def _claim(
        self, rs: dict[str, Any], candidates: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(active claimed pods, terminating controlled pods that match). Adopts matching
        active orphans and releases active controlled pods that no longer match; raises
        the first error of either after trying them all."""
        meta = rs["metadata"]
        uid = meta["uid"]
        selector = (rs.get("spec") or {}).get("selector")
        being_deleted = bool(meta.get("deletionTimestamp"))
        claimed: list[dict[str, Any]] = []
        terminating: list[dict[str, Any]] = []
        errors: list[Exception] = []
        adopt: list[dict[str, Any]] = []
        for pod in candidates:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            matches = selector_matches(selector, labels)
            ref = next(
                (r for r in pod["metadata"].get("ownerReferences") or () if r.get("controller")),
                None,
            )
            if not ranking.is_active(pod):
                if ref is not None and ref.get("uid") == uid and matches and not _terminal(pod):
                    terminating.append(pod)
                continue
            if ref is not None:
                if ref.get("uid") != uid:
                    continue
                if matches:
                    claimed.append(pod)
                elif not being_deleted:
                    err = await self._release(pod, uid)
                    if err is not None:
                        errors.append(err)
            elif matches and not being_deleted:
                adopt.append(pod)
        if adopt:
            refusal = await self._can_adopt(rs)
            for pod in adopt:
                if refusal is not None:
                    errors.append(refusal)
                    continue
                adopted, err = await self._adopt(rs, pod)
                if err is not None:
                    errors.append(err)
                elif adopted is not None:
                    claimed.append(adopted)
        if errors:
            raise errors[0]
        return claimed, terminating

    async def _can_adopt(self, rs: dict[str, Any]) -> Exception | None:
        """None when a fresh read shows the ReplicaSet with the same UID and not being
        deleted (upstream's RecheckDeletionTimestamp), else why not."""
        meta = rs["metadata"]
        try:
            fresh = await self.api.arequest(
                "GET", f"/apis/apps/v1/namespaces/{meta['namespace']}/replicasets/{meta['name']}"
            )
        except ApiError as err:
            return err
        fmeta = fresh.get("metadata") or {}
        if fmeta.get("uid") != meta["uid"]:
            return ApiError(f"original ReplicaSet {meta['namespace']}/{meta['name']} is gone")
        if fmeta.get("deletionTimestamp"):
            return ApiError(f"{meta['namespace']}/{meta['name']} has just been deleted")
        return None

    async def _adopt(
        self, rs: dict[str, Any], pod: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, Exception | None]:
        """Make the ReplicaSet the pod's controller (a strategic merge patch keyed by the
        owner's UID, with the pod's UID as precondition). A pod gone meanwhile is skipped."""
        meta = pod["metadata"]
        patch = {"metadata": {"ownerReferences": [controller_ref(rs)], "uid": meta["uid"]}}
        try:
            adopted = await self.api.arequest(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                patch,
                content_type=_SMP,
            )
        except NotFoundError:
            return None, None
        except ApiError as err:
            return None, err
        return adopted, None

    async def _release(self, pod: dict[str, Any], rs_uid: str) -> Exception | None:
        """Remove the ReplicaSet's owner reference from the pod (gone or already changed:
        nothing to do)."""
        meta = pod["metadata"]
        patch = {
            "metadata": {
                "ownerReferences": [{"$patch": "delete", "uid": rs_uid}],
                "uid": meta["uid"],
            }
        }
        try:
            await self.api.arequest(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                patch,
                content_type=_SMP,
            )
        except NotFoundError:
            return None
        except ApiStatusError as err:
            return None if err.status == 422 else err
        except ApiError as err:
            return err
        return None

    # Scaling ----------------------------------------------------------------------------
    async def _manage(
        self, rs: dict[str, Any], key: Key, active: list[dict[str, Any]]
    ) -> ApiError | None:
        """Create or delete pods towards ``spec.replicas``; the first error, if any."""
        diff = scale_diff(rs, len(active))
        if diff > 0:
            return await self._create(rs, key, diff)
        if diff < 0:
            return await self._delete(rs, key, active, -diff)
        return None

    async def _create(self, rs: dict[str, Any], key: Key, count: int) -> ApiError | None:
        self.expectations.expect_creations(key, count)
        created = 0
        first: ApiError | None = None
        try:
            for size in slow_start_batches(count):
                results = await asyncio.gather(*(self._create_one(rs) for _ in range(size)))
                failed = [r for r in results if r is not None]
                created += size - len(failed)
                if failed:
                    first = failed[0]
                    break
        finally:
            # Failed, never attempted, or cancelled with the outcome unknown (the instance
            # stopped being active mid-sync): expecting them would stall the ReplicaSet
            # until the expectations expire; a pod that was created after all is seen
            # by the next sync.
            for _ in range(count - created):
                self.expectations.creation_observed(key)
        return first

    async def _create_one(self, rs: dict[str, Any]) -> ApiError | None:
        body = pod_from_template(rs)
        # The pod carries this reconcile's trace context, so its later events (scheduling,
        # kwok running it) continue the same trace.
        context = outgoing_headers()
        if context:
            body["metadata"]["annotations"] = {**body["metadata"]["annotations"], **context}
        ns = rs["metadata"]["namespace"]
        try:
            pod = await self.api.arequest("POST", f"/api/v1/namespaces/{ns}/pods", body)
        except ApiError as err:
            if isinstance(err, ApiStatusError) and "being terminated" in err.message:
                return None  # namespace going away: every creation would fail
            self.events.event(rs, "Warning", "FailedCreate", f"Error creating: {_message(err)}")
            return err
        name = (pod.get("metadata") or {}).get("name", "")
        self.events.event(rs, "Normal", "SuccessfulCreate", f"Created pod: {name}")
        return None

    async def _delete(
        self, rs: dict[str, Any], key: Key, active: list[dict[str, Any]], count: int
    ) -> ApiError | None:
        related = self._related_pods(rs)
        victims = ranking.pods_to_delete(active, related, count, self.clock())
        self.expectations.expect_deletions(key, [_pod_key(p) for p in victims])
        try:
            results = await asyncio.gather(*(self._delete_one(rs, key, p) for p in victims))
        except asyncio.CancelledError:
            for pod in victims:  # outcome unknown: the next sync sees what is left
                self.expectations.deletion_observed(key, _pod_key(pod))
            raise
        return next((r for r in results if r is not None), None)

    async def _delete_one(
        self, rs: dict[str, Any], key: Key, pod: dict[str, Any]
    ) -> ApiError | None:
        meta = pod["metadata"]
        try:
            await self.api.arequest(
                "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            )
        except NotFoundError:
            self.expectations.deletion_observed(key, _pod_key(pod))
            return None
        except ApiError as err:
            self.expectations.deletion_observed(key, _pod_key(pod))
            self.events.event(rs, "Warning", "FailedDelete", f"Error deleting: {_message(err)}")
            return err
        self.events.event(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")
        return None

    def _related_pods(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        """Pods matching the selector of any ReplicaSet with the same controller as this
        one (none when it has no controller), each once."""
        ref = next(
            (r for r in rs["metadata"].get("ownerReferences") or () if r.get("controller")),
            None,
        )
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
                if pod.meta.uid in seen or not selector_matches(selector, dict(pod.meta.labels)):
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
        path = f"/apis/apps/v1/namespaces/{meta['namespace']}/replicasets/{meta['name']}"
        status = {**status, "observedGeneration": int(meta.get("generation") or 0)}
        target = rs
        for attempt in range(2):
            try:
                written = await self.api.arequest(
                    "PUT", f"{path}/status", {**target, "status": status}
                )
            except ConflictError:
                if attempt == 1:
                    raise
                target = await self.api.arequest("GET", path)
                continue
            before = meta.get("resourceVersion", "")
            if (written.get("metadata") or {}).get("resourceVersion") != before:
                self._superseded[(meta["namespace"], meta["name"])] = before
            return written
        raise AssertionError("unreachable")


def _message(err: ApiError) -> str:
    return err.message if isinstance(err, ApiStatusError) else str(err)


def _ns_name(meta: dict[str, Any]) -> tuple[str, str]:
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def build(
    channel: grpc.aio.Channel,
    api: KubeClient,
    options: ControllerOptions | None = None,
    name: str = NAME,
) -> Controller:
    """The ReplicaSet controller, wired: ReplicaSets are the primary type; a pod change
    enqueues its controlling ReplicaSet (old and new on a change of controller), and an
    orphan's change every ReplicaSet whose selector matches it (which may adopt it).
    Pods and ReplicaSets are indexed by controller UID, orphan pods by namespace."""
    reconcilers: list[ReplicaSetReconciler] = []

    def orphan_owners(obj: MirrorObject) -> list[Request]:
        return reconcilers[0].matching(obj) if reconcilers else []

    def factory(mirror: Mirror) -> ReplicaSetReconciler:
        reconciler = ReplicaSetReconciler(mirror, api)
        reconcilers.append(reconciler)
        return reconciler

    return (
        ControllerBuilder(name)
        .for_(REPLICASETS, kind="ReplicaSet")
        .owns(PODS)
        .watches(PODS, orphan_owners)
        .with_index("controller", _controlled_by)
        .with_index("orphan", _orphans)
        .with_options(options or ControllerOptions(max_concurrent_reconciles=5))
        .complete(channel, factory)
    )
