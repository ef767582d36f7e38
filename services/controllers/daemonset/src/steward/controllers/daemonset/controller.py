"""The DaemonSet controller: DaemonSets, their pods and ControllerRevisions, and the nodes
from the mirror, :mod:`.sync`'s decisions, and the writes to the API server (revisions,
pods, status, Events), step by step as upstream's ``syncDaemonSet``.

# A sync
A DaemonSet that selects everything gets a ``SelectingAll`` Warning and nothing else; one
being deleted is left alone (its history may be going). Otherwise its ControllerRevisions
are claimed (adopted and released as its pods are) and the current one found or created
(:mod:`.history`: missing hash labels added, duplicates of the current template merged
into the newest after relabelling their pods, its revision number raised above the old
ones). Its pods are claimed and grouped by the node each is for. While creations or
deletions of an earlier sync are still unseen (the controller's expectations), only the
status is written, without raising ``observedGeneration``. Otherwise the core loop
creates and deletes pods (slow-start batches of at most :data:`~.sync.BURST_REPLICAS`),
then, once every write of that is seen, the RollingUpdate deletes old pods or surges new
ones (OnDelete does nothing), then old revisions beyond ``revisionHistoryLimit`` are
deleted, then the status is written.

# Failed pods
A failed daemon pod is deleted with a ``FailedDaemonPod`` Warning, and its node gets a
backoff (1 s doubling to 15 min, per DaemonSet, generation and node, as upstream): while
it holds, the failed pod stays and the DaemonSet comes back when it ends. So a pod the
node keeps rejecting is not replaced in a hot loop.

# Errors
A failed claim, revision write or creation ends the sync with an error after the status is
written (retried with backoff); creations not yet attempted after a failure are dropped
until the next sync, as upstream's slow start. A revision name taken by another template
(a hash collision) raises ``status.collisionCount`` and retries, so the next revision gets
another name. A status write that conflicts is retried once on a fresh read. Events are
best effort: a failure to record one is logged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import steward
from steward import (
    ApiError,
    ApiStatusError,
    ConflictError,
    MirrorObject,
    NotFoundError,
    Request,
    Result,
)
from steward.controllers.daemonset import history as hist
from steward.controllers.daemonset import nodes as nd
from steward.controllers.daemonset.sync import (
    BURST_REPLICAS,
    CONTROLLER_REVISIONS,
    DAEMONSETS,
    NODES,
    PODS,
    Plan,
    calculate_status,
    is_rolling_update,
    live_hashes,
    manage,
    next_available,
    node_name,
    pod_for_node,
    pod_name,
    pods_by_node,
    rolling_update,
    status_current,
)
from steward.kube import NAMESPACE_TERMINATING, error_message

log = logging.getLogger(__name__)

NAME = "daemonset"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
COMPONENT = "daemonset-controller"
"""The Events' source component, as upstream's."""
_DS_KEY = ("apps", "v1", "daemonsets")
_PODS_KEY = ("", "v1", "pods")
_MERGE = "application/merge-patch+json"
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 15 * 60.0

Key = tuple[str, str]
"""(namespace, name) of a DaemonSet: the key of its expectations."""


def _on_node(obj: MirrorObject) -> Iterable[str]:
    """Index of pods by the node they are for (bound or pinned by affinity)."""
    if obj.type != _PODS_KEY:
        return ()
    target = nd.target_node(obj.object)
    return (target,) if target else ()


def _not_created(change: steward.Change) -> bool:
    """A controlled revision's creation queues nothing (upstream's ``addHistory``): the
    DaemonSet's own sync made it, or, made by someone else, the next sync finds it."""
    return change.kind is not steward.ChangeKind.ADDED


def _is_ds_ref(ref: Any) -> bool:
    return bool(ref.kind == "DaemonSet" and ref.api_version.startswith("apps/"))


class Collision(ApiError):
    """The current revision's name is taken by another template; the collision count was
    raised (or was stale), so the next sync names it anew."""


class FailedPodBackoff:
    """Upstream's failed-pods backoff: per key, the delay starts at :data:`BACKOFF_INITIAL`
    and doubles on each failure seen while it holds, up to :data:`BACKOFF_MAX`; a key idle
    for twice the maximum starts over."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, datetime]] = {}

    def holding(self, key: str, now: datetime) -> float | None:
        """Seconds the backoff still holds ``key`` back; None when it does not."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        delay, since = entry
        left = delay - (now - since).total_seconds()
        return left if left > 0 else None

    def next(self, key: str, now: datetime) -> None:
        """Record a failure of ``key`` now."""
        entry = self._entries.get(key)
        if entry is None or (now - entry[1]).total_seconds() > 2 * BACKOFF_MAX:
            self._entries[key] = (BACKOFF_INITIAL, now)
        else:
            self._entries[key] = (min(entry[0] * 2, BACKOFF_MAX), now)

    def forget_owner(self, uid: str) -> None:
        for key in [k for k in self._entries if k.startswith(f"{uid}/")]:
            del self._entries[key]


class DaemonSetReconciler:
    """Reconciles one DaemonSet by key; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.api = ctx.api
        self.clock = steward.utc_now
        self.expectations = ctx.expectations
        self.events = ctx.event_recorder(COMPONENT)
        self.pods = ctx.ownership(PODS)
        self.revisions = ctx.ownership(CONTROLLER_REVISIONS)
        self.backoff = FailedPodBackoff()

    # Events -----------------------------------------------------------------------------
    def _resolve(self, namespace: str, ref: Any) -> MirrorObject | None:
        if ref is None or not _is_ds_ref(ref):
            return None
        ds = self.mirror.get(DAEMONSETS, namespace, ref.name)
        return ds if ds is not None and ds.meta.uid == ref.uid else None

    def observe(self, change: steward.Change) -> None:
        """Lower expectations as the mirror shows pods of a DaemonSet appear, get a
        deletion timestamp, or go; forget a deleted DaemonSet's."""
        obj = change.obj
        if obj.type == _DS_KEY:
            if change.kind is steward.ChangeKind.DELETED:
                self.expectations.forget(obj.key)
                self.backoff.forget_owner(obj.meta.uid)
            return
        if obj.type != _PODS_KEY:
            return
        ds = self._resolve(obj.namespace, obj.controller_owner())
        if ds is None:
            return
        key = (obj.namespace, ds.name)
        if change.kind is steward.ChangeKind.ADDED:
            self.expectations.creation_observed(key)
        if obj.meta.HasField("deletion_timestamp") or change.kind is steward.ChangeKind.DELETED:
            self.expectations.deletion_observed(key, f"{obj.namespace}/{obj.name}")

    def matching(self, obj: MirrorObject) -> list[Request]:
        """The DaemonSets whose selector matches an orphan pod or revision (they may
        adopt it)."""
        if obj.controller_owner() is not None:
            return []
        labels = dict(obj.meta.labels)
        return [
            Request(ds.namespace, ds.name)
            for ds in self.mirror.objects(DAEMONSETS, obj.namespace)
            if steward.selector_matches((ds.object.get("spec") or {}).get("selector"), labels)
        ]

    def node_changed(self, change: steward.Change) -> list[Request]:
        """The DaemonSets a node change concerns: for a new node, those that should run
        there; for an update that can matter, those whose should-run or may-stay answer
        changed; for a deleted node, those with pods for it (which they then delete)."""
        node = change.obj.object
        if change.kind is steward.ChangeKind.DELETED:
            owners = {
                (p.namespace, ref.name)
                for p in self.mirror.by_index(PODS, "node", change.obj.name)
                if (ref := p.controller_owner()) is not None and _is_ds_ref(ref)
            }
            return [Request(ns, name) for ns, name in sorted(owners)]
        old = change.old.object if change.old is not None else None
        if old is not None and not nd.node_change_matters(old, node):
            return []
        keys = []
        for ds in self.mirror.objects(DAEMONSETS):
            placement = nd.Placement.of(ds.object)
            now = placement(node)
            if old is None:
                if now[0]:
                    keys.append(Request(ds.namespace, ds.name))
            elif placement(old) != now:
                keys.append(Request(ds.namespace, ds.name))
        return keys

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request, contexts: Sequence[steward.TraceContext]) -> Result:
        """Sync one DaemonSet (see the module docs for what happens on errors)."""
        key: Key = (request.namespace, request.name)
        obj = self.mirror.get(DAEMONSETS, *key)
        if obj is None:
            self.expectations.forget(key)
            return Result()
        ds = obj.object
        selector = (ds.get("spec") or {}).get("selector") or {}
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            self.events.event(
                ds,
                "Warning",
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
            )
            return Result()
        if ds["metadata"].get("deletionTimestamp"):
            return Result()
        nodes = sorted((n.object for n in self.mirror.objects(NODES)), key=node_name)
        pods = await self._claim_pods(ds)
        current, old, pods = await self._construct_history(ds, pods)
        digest = (current["metadata"].get("labels") or {}).get(hist.HASH_LABEL, "")
        generation = hist.template_generation(ds)
        by_node = pods_by_node(pods)
        fits = nd.fits(ds, nodes)
        now = self.clock()
        if not self.expectations.satisfied(key):
            counts = calculate_status(ds, nodes, by_node, digest, generation, now, fits)
            await self._write_status(ds, counts, observe=False)
            return self._after(ds, by_node, now, None)
        error: ApiError | None = None
        holds: list[float] = []
        try:
            plan = manage(ds, nodes, by_node, digest, now, fits)
            error = await self._sync_nodes(ds, key, plan, digest, holds)
            if error is None and self.expectations.satisfied(key) and is_rolling_update(ds):
                try:
                    plan = rolling_update(ds, nodes, by_node, digest, generation, now, fits)
                except ValueError as err:
                    raise steward.TerminalError(str(err)) from err
                error = await self._sync_nodes(ds, key, plan, digest, holds)
            if error is None:
                await self._cleanup_history(ds, old, pods)
        except ApiError as err:
            error = err
        counts = calculate_status(ds, nodes, by_node, digest, generation, now, fits)
        try:
            await self._write_status(ds, counts, observe=True)
        except ApiError:
            if error is None:
                raise
            log.exception("sync %s/%s: status not written", *key)
        if error is not None:
            raise error
        return self._after(ds, by_node, now, min(holds) if holds else None)

    def _after(
        self,
        ds: dict[str, Any],
        by_node: dict[str, list[dict[str, Any]]],
        now: datetime,
        hold: float | None,
    ) -> Result:
        """Come back when a ready pod becomes available or a failed pod's backoff ends."""
        waits = [w for w in (next_available(ds, by_node, now), hold) if w is not None]
        return Result(requeue_after=max(min(waits), 0.001)) if waits else Result()

    # Pods -------------------------------------------------------------------------------
    async def _claim_pods(self, ds: dict[str, Any]) -> list[dict[str, Any]]:
        """The DaemonSet's pods: those it controls and matching orphans of its namespace,
        adopted and released as the ownership claim does (finished and terminating pods
        too, as upstream)."""
        meta = ds["metadata"]
        owned = self.mirror.by_index(PODS, "controller", meta["uid"])
        orphans = self.mirror.by_index(PODS, "orphan", meta["namespace"])
        return await self.pods.claim(ds, [o.object for o in [*owned, *orphans]])

    async def _sync_nodes(
        self, ds: dict[str, Any], key: Key, plan: Plan, digest: str, holds: list[float]
    ) -> ApiError | None:
        """Create and delete the plan's pods (creations first, both at most
        :data:`BURST_REPLICAS`); the first error, if any."""
        now = self.clock()
        victims = list(plan.delete)
        status = ds.get("status") or {}
        for node, pod in plan.failed:
            observed = int(status.get("observedGeneration") or 0)
            backoff_key = f"{ds['metadata']['uid']}/{observed}/{node}"
            hold = self.backoff.holding(backoff_key, now)
            if hold is not None:
                holds.append(hold)
                continue
            self.backoff.next(backoff_key, now)
            pmeta = pod["metadata"]
            self.events.event(
                ds,
                "Warning",
                "FailedDaemonPod",
                f"Found failed daemon pod {pmeta['namespace']}/{pmeta['name']} on node "
                f"{node}, will try to kill it",
            )
            victims.append(pod)
        for node, pod in plan.succeeded:
            pmeta = pod["metadata"]
            self.events.event(
                ds,
                "Normal",
                "SucceededDaemonPod",
                f"Found succeeded daemon pod {pmeta['namespace']}/{pmeta['name']} on node "
                f"{node}, will try to delete it",
            )
            victims.append(pod)
        errors: list[Exception] = []
        targets = plan.create_on[:BURST_REPLICAS]
        if targets:
            generation = hist.template_generation(ds)
            outcome = await self.expectations.create(
                key,
                len(targets),
                lambda i: self._create_one(ds, key, targets[i], digest, generation),
                initial_batch=1,
            )
            errors += outcome.errors
        victims = victims[:BURST_REPLICAS]
        if victims:
            ns = ds["metadata"]["namespace"]
            outcome = await self.expectations.delete(
                key,
                [f"{ns}/{pod_name(p)}" for p in victims],
                lambda i: self._delete_one(ds, victims[i]),
            )
            errors += outcome.errors
        first = errors[0] if errors else None
        return first if isinstance(first, ApiError) else None

    async def _create_one(
        self, ds: dict[str, Any], key: Key, node: str, digest: str, generation: int | None
    ) -> None:
        """Create the DaemonSet's pod for ``node`` (carrying this reconcile's trace
        context); raises the API server's error."""
        ns = ds["metadata"]["namespace"]
        try:
            pod = await steward.create_child(
                self.api, PODS, ns, pod_for_node(ds, node, digest, generation)
            )
        except ApiError as err:
            if isinstance(err, ApiStatusError) and err.has_cause(NAMESPACE_TERMINATING):
                # The namespace is going away: every creation would fail (as upstream).
                self.expectations.creation_observed(key)
                return
            self.events.event(
                ds, "Warning", "FailedCreate", f"Error creating: {error_message(err)}"
            )
            raise
        name = (pod.get("metadata") or {}).get("name", "")
        self.events.event(ds, "Normal", "SuccessfulCreate", f"Created pod: {name}")

    async def _delete_one(self, ds: dict[str, Any], pod: dict[str, Any]) -> None:
        """Delete one pod (its UID as precondition); raises the API server's error (a pod
        gone already: NotFound, without an Event)."""
        meta = pod["metadata"]
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}}
        try:
            await self.api.arequest(
                "DELETE", steward.api_path(PODS, meta["namespace"], meta["name"]), body
            )
        except NotFoundError:
            raise
        except ConflictError as err:
            # Another pod under the same name: this one is gone already.
            raise NotFoundError(err.status, err.message) from err
        except ApiError as err:
            self.events.event(
                ds, "Warning", "FailedDelete", f"Error deleting: {error_message(err)}"
            )
            raise
        self.events.event(ds, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    # History ----------------------------------------------------------------------------
    async def _construct_history(
        self, ds: dict[str, Any], pods: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """The current revision (found, merged from duplicates, or created), the old ones,
        and the pods as they are after merging duplicates relabelled them; raises the API
        server's error, or :class:`Collision`."""
        meta = ds["metadata"]
        owned = self.mirror.by_index(CONTROLLER_REVISIONS, "controller", meta["uid"])
        orphans = self.mirror.by_index(CONTROLLER_REVISIONS, "orphan", meta["namespace"])
        revisions = await self.revisions.claim(ds, [o.object for o in [*owned, *orphans]])
        current: list[dict[str, Any]] = []
        old: list[dict[str, Any]] = []
        for revision in revisions:
            rmeta = revision["metadata"]
            if hist.HASH_LABEL not in (rmeta.get("labels") or {}):
                labels = {**(rmeta.get("labels") or {}), hist.HASH_LABEL: rmeta["name"]}
                revision = {**revision, "metadata": {**rmeta, "labels": labels}}
                revision = await self._put_revision(revision)
            (current if hist.matches(ds, revision) else old).append(revision)
        number = hist.max_revision(old) + 1
        if not current:
            cur = await self._snapshot(ds, number)
        else:
            cur, pods = await self._dedup(ds, current, pods)
            if hist.revision_number(cur) < number:
                cur = await self._put_revision({**cur, "revision": number})
        return cur, old, pods

    async def _put_revision(self, revision: dict[str, Any]) -> dict[str, Any]:
        rmeta = revision["metadata"]
        path = steward.api_path(CONTROLLER_REVISIONS, rmeta["namespace"], rmeta["name"])
        return await self.api.arequest("PUT", path, revision)

    async def _delete_revision(self, revision: dict[str, Any]) -> None:
        rmeta = revision["metadata"]
        path = steward.api_path(CONTROLLER_REVISIONS, rmeta["namespace"], rmeta["name"])
        with contextlib.suppress(NotFoundError):
            await self.api.arequest("DELETE", path)

    async def _snapshot(self, ds: dict[str, Any], number: int) -> dict[str, Any]:
        """Create the revision of the current template; on a name already taken, the
        existing one if it records this template, else raise the collision count."""
        meta = ds["metadata"]
        body = hist.new_revision(ds, self.revisions.ref(ds), number)
        ns = meta["namespace"]
        try:
            return await self.api.arequest("POST", steward.api_path(CONTROLLER_REVISIONS, ns), body)
        except ApiStatusError as err:
            if err.status != 409 or err.reason != "AlreadyExists":
                raise
        name = body["metadata"]["name"]
        existing = await self.api.arequest("GET", steward.api_path(CONTROLLER_REVISIONS, ns, name))
        if hist.matches(ds, existing):
            return existing
        path = steward.api_path(DAEMONSETS, ns, meta["name"])
        fresh = await self.api.arequest("GET", path)
        seen = hist.collision_count(ds)
        if hist.collision_count(fresh) != seen:
            raise Collision(
                f"found a stale collision count ({seen}, expected "
                f"{hist.collision_count(fresh)}) of DaemonSet {meta['name']!r}; "
                "will retry until it is updated"
            )
        status = {**(fresh.get("status") or {}), "collisionCount": (seen or 0) + 1}
        await self.api.arequest("PUT", f"{path}/status", {**fresh, "status": status})
        log.info(
            "DaemonSet %s/%s: hash collision on %s, collisionCount now %d",
            ns,
            meta["name"],
            name,
            status["collisionCount"],
        )
        raise Collision(f"controllerrevisions.apps {name!r} already exists with another template")

    async def _dedup(
        self, ds: dict[str, Any], current: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Of several revisions of the current template keep the newest: relabel the pods
        carrying another hash with its hash, then delete the others. The kept revision and
        the pods as they are now."""
        if len(current) == 1:
            return current[0], pods
        keep = hist.keep_of_duplicates(current)
        digest = (keep["metadata"].get("labels") or {}).get(hist.HASH_LABEL)
        relabelled = []
        for pod in pods:
            pmeta = pod["metadata"]
            if (pmeta.get("labels") or {}).get(hist.HASH_LABEL) == digest:
                relabelled.append(pod)
                continue
            path = steward.api_path(PODS, pmeta["namespace"], pmeta["name"])
            try:
                pod = await self.api.arequest(
                    "PATCH",
                    path,
                    {"metadata": {"labels": {hist.HASH_LABEL: digest}}},
                    content_type=_MERGE,
                )
            except NotFoundError:
                continue
            relabelled.append(pod)
        for revision in current:
            if revision["metadata"]["name"] == keep["metadata"]["name"]:
                continue
            await self._delete_revision(revision)
        return keep, relabelled

    async def _cleanup_history(
        self, ds: dict[str, Any], old: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> None:
        """Delete old revisions beyond ``revisionHistoryLimit`` (10 when unset), oldest
        first, never one a pod still runs (finished pods being deleted count too)."""
        limit = (ds.get("spec") or {}).get("revisionHistoryLimit")
        limit = 10 if limit is None else int(limit)
        for revision in hist.to_clean_up(old, limit, live_hashes(pods)):
            await self._delete_revision(revision)

    # Status -----------------------------------------------------------------------------
    async def _write_status(
        self, ds: dict[str, Any], counts: dict[str, int], *, observe: bool
    ) -> dict[str, Any]:
        """PUT the counts (and, when ``observe``, the generation this sync acted on) unless
        nothing changed; on a conflict, once more on a fresh read."""
        if status_current(ds, counts, observe):
            return ds
        meta = ds["metadata"]
        path = steward.api_path(DAEMONSETS, meta["namespace"], meta["name"])

        def with_counts(obj: dict[str, Any]) -> dict[str, Any]:
            status = {**(obj.get("status") or {}), **counts}
            if observe:
                status["observedGeneration"] = int(meta.get("generation") or 0)
            return {**obj, "status": status}

        try:
            return await self.api.arequest("PUT", f"{path}/status", with_counts(ds))
        except ConflictError:
            fresh = await self.api.arequest("GET", path)
        return await self.api.arequest("PUT", f"{path}/status", with_counts(fresh))


CONTROLLER = (
    steward.ControllerBuilder[DaemonSetReconciler](NAME)
    .for_(DAEMONSETS, kind="DaemonSet")
    .owns(PODS, steward.resource_version_changed)
    .owns(CONTROLLER_REVISIONS, _not_created, steward.resource_version_changed)
    .watches(PODS, DaemonSetReconciler.matching, steward.labels_changed)
    .watches(CONTROLLER_REVISIONS, DaemonSetReconciler.matching, steward.labels_changed)
    .watches_changes(NODES, DaemonSetReconciler.node_changed)
    .observe(DaemonSetReconciler.observe)
    .with_index("controller", steward.index_by_controller)
    .with_index("orphan", steward.orphan_index(PODS, CONTROLLER_REVISIONS))
    .with_index("node", _on_node)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=2))
    .beside_upstream(None)
    .describe(
        "Steward's DaemonSet controller: runs one pod of each DaemonSet on every node it "
        "belongs on (bound by the scheduler), rolls out template changes (RollingUpdate "
        "with maxUnavailable and maxSurge, or OnDelete) through ControllerRevisions, and "
        "keeps the status current. DaemonSets have no spec.managedBy, so it must not run "
        "beside kube-controller-manager's daemonset controller (--controllers=*,-daemonset)."
    )
    .complete(DaemonSetReconciler)
)
"""The DaemonSet controller: DaemonSets are the primary type; a pod change, or a revision's
update or deletion, queues its controlling DaemonSet (old and new on a change of
controller; a controlled revision's creation queues nothing, as upstream), an orphan's
change every DaemonSet whose selector matches it, and a node change the DaemonSets whose
placement it changes. Pods and revisions are indexed by controller UID and, as orphans,
by namespace; pods by the node they are for."""
