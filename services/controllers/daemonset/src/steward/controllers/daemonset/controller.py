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

# What it reads
DaemonSets and ControllerRevisions whole (a status write and a revision update are copies
of the mirror's objects); of a pod only :data:`POD_FIELDS`, of a node only
:data:`NODE_FIELDS`, which is all the mirror holds of them. Pods are only created, patched
(adoption, release, a relabelling merge patch) and deleted, never written back from the
mirror's copy; nodes are never written.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import steward
from steward import (
    CONTROLLER_REVISIONS,
    DAEMONSETS,
    NODES,
    PODS,
    ApiError,
    ApiStatusError,
    MirrorObject,
    NotFoundError,
    Request,
    Result,
)
from steward.controllers.daemonset import history as hist
from steward.controllers.daemonset import nodes as nd
from steward.controllers.daemonset.sync import (
    BURST_REPLICAS,
    Plan,
    calculate_status,
    is_rolling_update,
    live_hashes,
    manage,
    next_available,
    node_name,
    pod_for_node,
    pods_by_node,
    rolling_update,
    status_current,
)

log = logging.getLogger(__name__)

NAME = "daemonset"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
COMPONENT = "daemonset-controller"
"""The Events' source component, as upstream's."""
POD_FIELDS = (
    "metadata.labels",
    "metadata.ownerReferences",
    "metadata.deletionTimestamp",
    "metadata.creationTimestamp",
    "spec.nodeName",
    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    ".nodeSelectorTerms.matchFields",
    "status.phase",
    "status.conditions.type",
    "status.conditions.status",
    "status.conditions.lastTransitionTime",
)
"""What the controller reads of a pod (one a DaemonSet controls, or an orphan): its labels
(the claim, the revision hash and template generation) and controller, deletion mark,
creation time and phase, the node it is for (bound, or pinned by the required affinity's
``matchFields``, :func:`.nodes.target_node`) and its Ready condition (ready, available)."""
NODE_FIELDS = (
    "metadata.labels",
    "spec.taints.key",
    "spec.taints.value",
    "spec.taints.effect",
    "status.conditions.type",
    "status.conditions.status",
)
"""What the controller reads of a node: its name (always there) and labels (nodeName,
nodeSelector and required node affinity), its taints against the daemon pods' tolerations
(:class:`.nodes.Placement`), and which of its conditions are true (a change of those
queues the DaemonSets, as upstream's ``shouldIgnoreNodeUpdate``; heartbeats never come)."""
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 15 * 60.0

Key = tuple[str, str]
"""(namespace, name) of a DaemonSet: the key of its expectations."""


def _on_node(obj: MirrorObject) -> Iterable[str]:
    """Index of pods by the node they are for (bound or pinned by affinity)."""
    if obj.type != PODS:
        return ()
    target = nd.target_node(obj.object)
    return (target,) if target else ()


def _not_created(change: steward.Change) -> bool:
    """A controlled revision's creation queues nothing (upstream's ``addHistory``): the
    DaemonSet's own sync made it, or, made by someone else, the next sync finds it."""
    return change.kind is not steward.ChangeKind.ADDED


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
        self.clock = steward.utc_now
        self.expectations = ctx.expectations
        """Per DaemonSet (namespace, name): the pod creations and deletions the mirror has
        not shown yet (lowered by the runtime, ``owns(PODS, expect=True)``)."""
        self.events = ctx.event_recorder(COMPONENT)
        self.daemonsets = ctx.client(DAEMONSETS)
        self.pods = ctx.children(PODS, events=self.events)
        self.revisions = ctx.children(CONTROLLER_REVISIONS)
        self.backoff = FailedPodBackoff()

    # Events -----------------------------------------------------------------------------
    def forget_backoff(self, change: steward.Change) -> None:
        """Forget a deleted DaemonSet's failed-pod backoffs (its expectations are
        forgotten by the runtime)."""
        obj = change.obj
        if obj.type == DAEMONSETS and change.kind is steward.ChangeKind.DELETED:
            self.backoff.forget_owner(obj.meta.uid)

    def node_changed(self, change: steward.Change) -> list[Request]:
        """The DaemonSets a node change concerns: for a new node, those that should run
        there; for an update that can matter, those whose should-run or may-stay answer
        changed; for a deleted node, those with pods for it (which they then delete)."""
        node = change.obj.object
        if change.kind is steward.ChangeKind.DELETED:
            owners = {
                ref.key
                for p in self.mirror.by_index(PODS, "node", change.obj.name)
                if (ref := steward.owner_of(p, DAEMONSETS)) is not None
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
    async def reconcile(self, request: Request) -> Result:
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
            error = await self._sync_nodes(ds, plan, digest, holds)
            if error is None and self.expectations.satisfied(key) and is_rolling_update(ds):
                try:
                    plan = rolling_update(ds, nodes, by_node, digest, generation, now, fits)
                except ValueError as err:
                    raise steward.TerminalError(str(err)) from err
                error = await self._sync_nodes(ds, plan, digest, holds)
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
        self, ds: dict[str, Any], plan: Plan, digest: str, holds: list[float]
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
            bodies = [pod_for_node(ds, node, digest, generation) for node in targets]
            outcome = await self.pods.create_all(ds, bodies)
            errors += outcome.errors
        victims = victims[:BURST_REPLICAS]
        if victims:
            # Each only while it has the same UID: a pod replaced under its name is kept.
            outcome = await self.pods.delete_all(ds, victims, precondition=True)
            errors += outcome.errors
        first = errors[0] if errors else None
        return first if isinstance(first, ApiError) else None

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
        return await self.revisions.client.update(revision)

    async def _delete_revision(self, revision: dict[str, Any]) -> None:
        rmeta = revision["metadata"]
        with contextlib.suppress(NotFoundError):
            await self.revisions.client.delete(rmeta["namespace"], rmeta["name"])

    async def _snapshot(self, ds: dict[str, Any], number: int) -> dict[str, Any]:
        """Create the revision of the current template; on a name already taken, the
        existing one if it records this template, else raise the collision count."""
        meta = ds["metadata"]
        body = hist.new_revision(ds, self.revisions.ref(ds), number)
        ns = meta["namespace"]
        try:
            return await self.revisions.client.create(body, namespace=ns)
        except ApiStatusError as err:
            if err.status != 409 or err.reason != "AlreadyExists":
                raise
        name = body["metadata"]["name"]
        existing = await self.revisions.client.get(ns, name)
        if hist.matches(ds, existing):
            return existing
        fresh = await self.daemonsets.get(ns, meta["name"])
        seen = hist.collision_count(ds)
        if hist.collision_count(fresh) != seen:
            raise Collision(
                f"found a stale collision count ({seen}, expected "
                f"{hist.collision_count(fresh)}) of DaemonSet {meta['name']!r}; "
                "will retry until it is updated"
            )
        status = {**(fresh.get("status") or {}), "collisionCount": (seen or 0) + 1}
        await self.daemonsets.update_status(fresh, status)
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
            try:
                pod = await self.pods.client.patch(
                    pmeta["namespace"],
                    pmeta["name"],
                    {"metadata": {"labels": {hist.HASH_LABEL: digest}}},
                    patch_type="merge",
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
        """Write the counts (and, when ``observe``, the generation this sync acted on)
        unless nothing changed; on a conflict, merged into a fresh read's status once
        more."""
        if status_current(ds, counts, observe):
            return ds
        generation = int(ds["metadata"].get("generation") or 0)

        def with_counts(obj: dict[str, Any]) -> dict[str, Any]:
            status = {**(obj.get("status") or {}), **counts}
            if observe:
                status["observedGeneration"] = generation
            return status

        return await self.daemonsets.update_status(ds, with_counts, retry_on_conflict=True)


CONTROLLER = (
    steward.ControllerBuilder[DaemonSetReconciler](NAME)
    .for_(DAEMONSETS)
    .owns(PODS, steward.resource_version_changed, expect=True, fields=POD_FIELDS)
    .owns(CONTROLLER_REVISIONS, _not_created, steward.resource_version_changed)
    .adopts(PODS, steward.labels_changed, fields=POD_FIELDS)
    .adopts(CONTROLLER_REVISIONS, steward.labels_changed)
    .watches_changes(NODES, DaemonSetReconciler.node_changed, fields=NODE_FIELDS)
    .observe(DaemonSetReconciler.forget_backoff)
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
"""The DaemonSet controller: DaemonSets are the primary type; a pod change (after lowering
its DaemonSet's expectations), or a revision's update or deletion, queues its controlling
DaemonSet (old and new on a change of controller; a controlled revision's creation queues
nothing, as upstream), an orphan's change every DaemonSet whose selector matches it, and
a node change the DaemonSets whose placement it changes. Pods and revisions are indexed
by controller UID and, as orphans, by namespace; pods by the node they are for."""
