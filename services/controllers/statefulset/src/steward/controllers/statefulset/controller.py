"""The StatefulSet controller: StatefulSets, their pods, ControllerRevisions and claims
from the mirror, :mod:`.plan`'s decisions, and the writes to the API server (revisions,
claims, pods, status, Events), step by step as upstream's ``StatefulSetController.sync``
and ``defaultStatefulSetControl.UpdateStatefulSet``.

Upstream: ``pkg/controller/statefulset/stateful_set.go`` (handlers, ``sync``,
``adoptOrphanRevisions``, ``getPodsForStatefulSet``, ``syncStatefulSet``),
``stateful_set_control.go`` and ``stateful_pod_control.go`` (the writes and their Events),
``pkg/controller/history/controller_history.go`` (``CreateControllerRevision``,
``UpdateControllerRevision``, ``AdoptControllerRevision``), v1.37.

# A sync
While pod creations or deletions of an earlier sync are not yet in the mirror (the
controller's expectations; upstream's ``StaleControllerConsistencyStatefulSet`` store,
on by default, waits for its own writes the same way) the set is left alone: the change
that shows the last of them queues it again. Otherwise, as upstream:

1. Orphan ControllerRevisions whose labels match the selector are adopted (after a fresh
   read shows the set under the same UID and not being deleted); owned ones that stop
   matching are ignored, never released.
2. Pods: those the set controls, and orphans of its namespace that match its selector
   and whose name is ``<set>-<ordinal>`` (``isMemberOf``), adopted; controlled pods that
   no longer match or are not members are released.
3. The revisions (:func:`.history.choose_revisions`): the update revision is created
   (a name taken by another template raises the collision count and retries under the
   next name; taken by the same template, it is reused) or an older one renumbered (a
   rollback).
4. :func:`.plan.decide`, then its actions in order, stopping at the first error:
   a creation first creates the pod's missing claims (a claim being deleted is an error),
   then the pod, then sets its claims' owners for the retention policy; an update in
   place creates missing claims, sets the claims' owners, then patches the pod's identity
   labels; a deletion deletes the pod.
5. The status (:func:`.plan.complete_update`), written when it differs
   (:func:`.plan.needs_write`), also after an error of step 4.
6. Old revisions beyond ``revisionHistoryLimit`` that no pod runs are deleted.
7. With ``minReadySeconds``, the set comes back when its next ready pod becomes
   available.

# Events
On the set, as upstream's ``recordPodEvent`` and ``recordClaimEvent``:
``SuccessfulCreate`` / ``FailedCreate`` ("create Pod web-0 in StatefulSet web
successful", "create Claim data-web-0 Pod web-0 in StatefulSet web success"),
``SuccessfulUpdate`` / ``FailedUpdate``, ``SuccessfulDelete`` / ``FailedDelete``, a
``ConflictingController`` Warning for a claim another object controls, and
``UnknownStrategy`` for the ``Recreate`` strategy (refused, as upstream with its gate off).

# What it reads
StatefulSets, ControllerRevisions and PersistentVolumeClaims whole (a status write, a
renumbering and a claim's owner update are PUTs of copies); of a pod only
:data:`POD_FIELDS`. Pods are created, patched (adoption, release, the identity labels)
and deleted, never written back from the mirror's copy. Claims queue nothing (upstream
has no handlers on them); revisions queue nothing either.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson
from prometheus_client import Counter, Gauge

import steward
from steward import (
    CONTROLLER_REVISIONS,
    PODS,
    STATEFULSETS,
    ApiError,
    ApiStatusError,
    ConflictError,
    NotFoundError,
    Request,
    Resource,
    Result,
)
from steward.controllers.statefulset import history as hist
from steward.controllers.statefulset import identity as ident
from steward.controllers.statefulset import plan as pl
from steward.controllers.statefulset import retention as ret
from steward.controllers.statefulset import writes as wr

log = logging.getLogger(__name__)

NAME = "statefulset"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
COMPONENT = "statefulset-controller"
"""The Events' source component, as upstream's."""
QUEUE = "statefulset"
"""Upstream's work queue name."""
WORKERS = 5
"""StatefulSets synced at once: kube-controller-manager's default
``--concurrent-statefulset-syncs``."""
CLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
POD_FIELDS = (
    "metadata.labels",
    "metadata.ownerReferences",
    "metadata.deletionTimestamp",
    "spec.volumes.name",
    "spec.volumes.persistentVolumeClaim.claimName",
    "status.phase",
    "status.conditions.type",
    "status.conditions.status",
    "status.conditions.lastTransitionTime",
)
"""What the controller reads of a pod (one a set controls, or an orphan): its labels (the
claim, identity and revision) and controller, deletion mark, its claim volumes (storage),
phase and Ready condition (running and ready, available)."""

MAX_UNAVAILABLE = Gauge(
    "statefulset_controller_statefulset_max_unavailable",
    "Maximum number of unavailable pods allowed during StatefulSet rolling updates",
    ("statefulset_namespace", "statefulset_name", "pod_management_policy"),
)
"""Upstream's gauge, set at each status step (1 without ``rollingUpdate``)."""
UNAVAILABLE_REPLICAS = Gauge(
    "statefulset_controller_statefulset_unavailable_replicas",
    "Current number of unavailable pods in StatefulSet",
    ("statefulset_namespace", "statefulset_name", "pod_management_policy"),
)
"""Upstream's gauge: the replicas (missing ones counted) not available, set when a
``RollingUpdate`` sync reaches the update step."""
STALE_SYNC_SKIPS = Counter(
    "statefulset_controller_stale_sync_skips",
    "Total number of StatefulSet syncs skipped due to a stale watch cache.",
    ("group", "resource"),
)
"""Upstream's counter (``..._total``): syncs skipped while the set's own pod writes are
not yet in the mirror."""

Obj = dict[str, Any]
Key = tuple[str, str]


def add_flags(parser: argparse.ArgumentParser) -> None:
    """kube-controller-manager's flag of this controller, as an alias of the host's."""
    steward.add_workers_alias(parser, "--concurrent-statefulset-syncs", "StatefulSets", WORKERS)


def _already_exists(err: BaseException) -> bool:
    return isinstance(err, ApiStatusError) and err.reason == "AlreadyExists"


class SyncError(ApiError):
    """A step of the sync that failed without an API error of its own (a claim being
    deleted)."""


class StatefulSetReconciler:
    """Reconciles one StatefulSet by key; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.clock = steward.utc_now
        self.expectations = ctx.expectations
        """Per set (namespace, name): the pod creations and deletions the mirror has not
        shown yet (lowered by the runtime, ``owns(PODS, expect=True)``)."""
        self.events = ctx.event_recorder(COMPONENT)
        self.sets = ctx.client(STATEFULSETS)
        self.pods = ctx.children(PODS)
        self.revisions = ctx.children(CONTROLLER_REVISIONS)
        self.claims = ctx.client(CLAIMS)

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        key: Key = (request.namespace, request.name)
        obj = self.mirror.get(STATEFULSETS, *key)
        if obj is None:
            self.expectations.forget(key)
            return Result()
        if not self.expectations.satisfied(key):
            STALE_SYNC_SKIPS.labels("", "pods").inc()
            return Result()
        sts = obj.object
        selector = (sts.get("spec") or {}).get("selector")
        if not isinstance(selector, Mapping):
            return Result()
        revisions = await self._claim_revisions(sts, selector)
        pods = await self._claim_pods(sts, selector)
        return await self._sync(key, sts, pods, revisions)

    async def _claim_revisions(self, sts: Obj, selector: Mapping[str, Any]) -> list[Obj]:
        """The set's revisions matching its selector, orphans adopted
        (``adoptOrphanRevisions``, ``ListControllerRevisions``)."""
        meta = sts["metadata"]
        owned = [
            o.object for o in self.mirror.by_index(CONTROLLER_REVISIONS, "controller", meta["uid"])
        ]
        orphans = [
            o.object
            for o in self.mirror.by_index(CONTROLLER_REVISIONS, "orphan", meta["namespace"])
        ]
        matching = [
            r
            for r in [*owned, *orphans]
            if steward.selector_matches(selector, r["metadata"].get("labels") or {})
        ]
        adopt = [r for r in matching if steward.controller_of(r) is None]
        if adopt:
            refusal = await self.revisions.ownership.can_adopt(sts)
            if refusal is not None:
                raise ApiError(f"can't adopt ControllerRevisions: {refusal}")
            adopted = []
            for revision in adopt:
                got = await self.revisions.ownership.adopt(sts, revision)
                if got is not None:
                    adopted.append(got)
            matching = [r for r in matching if steward.controller_of(r) is not None] + adopted
        return matching

    async def _claim_pods(self, sts: Obj, selector: Mapping[str, Any]) -> list[Obj]:
        """The set's pods (``getPodsForStatefulSet``): controlled ones matching the
        selector and named as its members; orphans of both kinds adopted, controlled
        ones of neither released."""
        meta = sts["metadata"]
        owned = [o.object for o in self.mirror.by_index(PODS, "controller", meta["uid"])]
        orphans = [
            o.object
            for o in self.mirror.by_index(PODS, "orphan", meta["namespace"])
            if ident.is_member(sts, o.object)
        ]
        strangers = [p for p in owned if not ident.is_member(sts, p)]
        members = [p for p in owned if ident.is_member(sts, p)]
        claimed = await self.pods.claim(sts, [*members, *orphans], selector)
        if strangers and not sts["metadata"].get("deletionTimestamp"):
            for pod in strangers:
                await self.pods.ownership.release(sts, pod)
        return claimed

    # The sync ---------------------------------------------------------------------------
    async def _sync(self, key: Key, sts: Obj, pods: list[Obj], revisions: list[Obj]) -> Result:
        ns, name = key
        owner = self.revisions.ref(sts)
        revisions = hist.sorted_revisions(revisions)
        choice = hist.choose_revisions(sts, revisions, owner)
        collisions = hist.collision_count(sts)
        update = choice.update
        if choice.create:
            update, collisions = await self._create_revision(sts, update, owner, collisions)
        elif choice.renumber:
            update = await self._renumber(update)
        current = choice.current if choice.current is not choice.update else update
        now = self.clock()
        existing = {c.name: c.object for c in self.mirror.objects(CLAIMS, ns)}
        current_name = current["metadata"]["name"]
        update_name = update["metadata"]["name"]
        start, count = ident.start_ordinal(sts), ident.replicas(sts)
        present = {p["metadata"]["name"] for p in pods}
        missing = [
            {"metadata": {"name": ident.pod_name(sts, n), "namespace": ns}}
            for n in range(start, start + count)
            if ident.pod_name(sts, n) not in present
        ]
        stale = frozenset(
            p["metadata"]["name"] for p in missing if ret.claim_is_stale(sts, p, existing)
        )
        off_policy = frozenset(
            p["metadata"]["name"]
            for p in [*pods, *missing]
            if ret.claims_off_policy(sts, p, existing)
        )
        update_set = hist.apply_revision(sts, update)
        decision = pl.decide(
            pl.SyncInput(
                statefulset=sts,
                current_set=hist.apply_revision(sts, current),
                update_set=update_set,
                current_revision=current_name,
                update_revision=update_name,
                collision_count=collisions,
                pods=pods,
                now=now,
                stale_claims=stale,
                claims_off_policy=off_policy,
            )
        )
        error: Exception | None = None
        if decision.error is not None:
            message = f"statefulset {ns}/{name} {decision.error}"
            self.events.event(sts, "Warning", "UnknownStrategy", message)
            error = steward.TerminalError(message)
        else:
            by_name = {p["metadata"]["name"]: p for p in pods}
            try:
                for action in decision.actions:
                    await self._execute(key, sts, update_set, action, by_name, existing)
            except ApiError as err:
                error = err
        self._observe(sts, pods, decision, now)
        status: Obj | None = None
        if decision.status is not None:
            status = pl.complete_update(sts, decision.status)
            try:
                await self._write_status(sts, status)
            except ApiError as err:
                if error is None:
                    error = err
                else:
                    log.warning("StatefulSet %s/%s: status not written: %s", ns, name, err)
        live = {current_name, update_name, *(ident.revision_of(p) for p in pods)}
        limit = (sts.get("spec") or {}).get("revisionHistoryLimit")
        for doomed in hist.to_truncate(revisions, live, 10 if limit is None else int(limit)):
            try:
                await self.revisions.client.delete(ns, doomed["metadata"]["name"])
            except NotFoundError:
                pass
            except ApiError as err:
                error = error or err
                break
        if error is not None:
            raise error
        after = pl.requeue_after(sts, status, pods, now)
        return Result(requeue_after=max(after, 0.001)) if after is not None else Result()

    def _observe(self, sts: Obj, pods: list[Obj], decision: pl.SyncPlan, now: datetime) -> None:
        """Upstream's gauges of the set (``updateStatefulSetStatus``,
        ``updateStatefulSetAfterInvariantEstablished``)."""
        meta, spec = sts["metadata"], sts.get("spec") or {}
        labels = (
            meta["namespace"],
            meta["name"],
            str(spec.get("podManagementPolicy") or "OrderedReady"),
        )
        strategy = spec.get("updateStrategy") or {}
        rolling = strategy.get("rollingUpdate")
        count = ident.replicas(sts)
        try:
            limit = (
                1
                if rolling is None
                else ident.max_unavailable(rolling.get("maxUnavailable"), count)
            )
        except ValueError:
            return
        if decision.status is not None:
            MAX_UNAVAILABLE.labels(*labels).set(limit)
        if (
            strategy.get("type", "RollingUpdate") == "RollingUpdate"
            and decision.status is not None
            and decision.waiting_for is None
            and not meta.get("deletionTimestamp")
        ):
            min_ready = int(spec.get("minReadySeconds") or 0)
            present = {p["metadata"]["name"]: p for p in pods if ident.in_range(p, sts)}
            start = ident.start_ordinal(sts)
            unavailable = sum(
                1
                for n in range(start, start + count)
                if (pod := present.get(ident.pod_name(sts, n))) is None
                or ident.is_unavailable(pod, min_ready, now)
            )
            UNAVAILABLE_REPLICAS.labels(*labels).set(unavailable)

    # Revisions --------------------------------------------------------------------------
    async def _create_revision(
        self, sts: Obj, proposed: Obj, owner: Obj, collisions: int
    ) -> tuple[Obj, int]:
        """Create the update revision (``CreateControllerRevision``): a name taken by the
        same template is that revision; by another, the collision count goes up and the
        next name is tried. The revision and the collision count."""
        ns = sts["metadata"]["namespace"]
        number = hist.number(proposed)
        while True:
            body = hist.new_revision(sts, number, owner, collisions)
            sent = {**body, "data": orjson.Fragment(hist.go_json(body["data"]))}
            try:
                return await self.revisions.client.create(sent, namespace=ns), collisions
            except ApiError as err:
                if not _already_exists(err):
                    raise
            found = await self.revisions.client.get(ns, body["metadata"]["name"])
            if hist.reuse_on_conflict(found, body):
                return found, collisions
            collisions += 1

    async def _renumber(self, revision: Obj) -> Obj:
        """Raise an older revision's number to the next (``UpdateControllerRevision``),
        once more on a fresh read after a conflict."""
        number = hist.number(revision)
        try:
            return await self.revisions.client.update(revision)
        except ConflictError:
            meta = revision["metadata"]
            fresh = await self.revisions.client.get(meta["namespace"], meta["name"])
            if hist.number(fresh) == number:
                return fresh
            return await self.revisions.client.update({**fresh, "revision": number})

    # Actions ----------------------------------------------------------------------------
    async def _execute(
        self,
        key: Key,
        sts: Obj,
        update_set: Obj,
        action: pl.Action,
        by_name: Mapping[str, Obj],
        existing: Mapping[str, Obj],
    ) -> None:
        """Perform one action's writes (:func:`.writes.of`, in their order) with upstream's
        Events; raise the first error."""
        pod = action.pod
        verb = action.verb
        if verb is pl.Verb.DELETE:
            await self._delete_pod(key, sts, pod)
            return
        todo = wr.of(action, sts, update_set, by_name.get(action.name, pod), existing)
        # Which Failed<Verb> pod Event a step's error records, as upstream's callers do.
        claims_verb = {pl.Verb.CREATE: "create", pl.Verb.UPDATE: "update"}.get(verb)
        owners_verb = None if verb is pl.Verb.FIX_CLAIMS else "update"
        # Upstream checks the owners first on an update in place and for a scaled-down
        # pod, and warns of a conflicting controller only when it then sets them.
        warn = verb in (pl.Verb.CREATE, pl.Verb.CREATE_CLAIMS) or bool(todo.fix_claims)
        if todo.create_claims or todo.deleting:
            await self._step(claims_verb, sts, pod, self._create_claims(sts, pod, todo))
        if verb is pl.Verb.CREATE:
            await self._create_pod(key, sts, pod, todo, warn)
            return
        await self._step(owners_verb, sts, pod, self._fix_claims(sts, todo, warn))
        if verb is pl.Verb.UPDATE:
            await self._update_pod(sts, pod, todo)

    async def _step(self, verb: str | None, sts: Obj, pod: Obj, step: Any) -> None:
        """Await ``step``; on an error, the pod's Failed<Verb> Event (none without
        ``verb``), then raise."""
        try:
            await step
        except ApiError as err:
            if verb is not None:
                self._pod_event(verb, sts, pod, err)
            raise

    def _pod_event(self, verb: str, sts: Obj, pod: Obj, err: Exception | None) -> None:
        name, set_name = pod["metadata"]["name"], sts["metadata"]["name"]
        title = verb.title()
        if err is None:
            message = f"{title} Pod {name} in StatefulSet {set_name} successful"
            self.events.event(sts, "Normal", f"Successful{title}", message)
        else:
            message = f"{title} Pod {name} in StatefulSet {set_name} failed error: {_text(err)}"
            self.events.event(sts, "Warning", f"Failed{title}", message)

    def _claim_event(self, sts: Obj, pod: Obj, claim: str, err: Exception | None) -> None:
        name, set_name = pod["metadata"]["name"], sts["metadata"]["name"]
        if err is None:
            message = f"Create Claim {claim} Pod {name} in StatefulSet {set_name} success"
            self.events.event(sts, "Normal", "SuccessfulCreate", message)
        else:
            message = (
                f"Create Claim {claim} for Pod {name} in StatefulSet {set_name} "
                f"failed error: {_text(err)}"
            )
            self.events.event(sts, "Warning", "FailedCreate", message)

    async def _create_pod(self, key: Key, sts: Obj, pod: Obj, todo: wr.Writes, warn: bool) -> None:
        """``CreateStatefulPod`` after its claims: the pod, then its claims' owners (also
        after a refusal other than AlreadyExists, as upstream)."""
        self.expectations.expect_creations(key, 1)
        try:
            await self.pods.client.create(pod, namespace=key[0], stamp_trace=True)
        except ApiError as err:
            self.expectations.creation_observed(key)
            if steward.namespace_terminating(err):
                raise
            if not _already_exists(err):
                await self._step("update", sts, pod, self._fix_claims(sts, todo, warn))
                self._pod_event("create", sts, pod, err)
            raise
        await self._step("update", sts, pod, self._fix_claims(sts, todo, warn))
        self._pod_event("create", sts, pod, None)

    async def _delete_pod(self, key: Key, sts: Obj, pod: Obj) -> None:
        """``DeleteStatefulPod``: a pod gone already counts as deleted."""
        meta = pod["metadata"]
        name = f"{meta['namespace']}/{meta['name']}"
        self.expectations.expect_deletions(key, [name])
        try:
            await self.pods.client.delete(meta["namespace"], meta["name"])
        except NotFoundError:
            self.expectations.deletion_observed(key, name)
        except ApiError as err:
            self.expectations.deletion_observed(key, name)
            self._pod_event("delete", sts, pod, err)
            raise
        self._pod_event("delete", sts, pod, None)

    async def _update_pod(self, sts: Obj, pod: Obj, todo: wr.Writes) -> None:
        """The pod's write of ``UpdateStatefulPod``: a merge patch of its identity labels,
        and of its volumes when its storage was off (which the API server refuses, as it
        refuses upstream's PUT: a pod's volumes cannot change)."""
        meta = pod["metadata"]
        patch: Obj = {"metadata": {"labels": meta.get("labels") or {}}}
        if todo.volumes:
            patch["spec"] = {"volumes": (pod.get("spec") or {}).get("volumes") or []}
        try:
            await self.pods.client.patch(meta["namespace"], meta["name"], patch, patch_type="merge")
        except ApiError as err:
            self._pod_event("update", sts, pod, err)
            raise
        self._pod_event("update", sts, pod, None)

    # Claims -----------------------------------------------------------------------------
    async def _create_claims(self, sts: Obj, pod: Obj, todo: wr.Writes) -> None:
        """``createPersistentVolumeClaims``: each missing claim created (one found
        already counts as made); a claim being deleted is an error. Raises after trying
        them all, worded as upstream's aggregate error."""
        errors = [f"pvc {name} is being deleted" for name in todo.deleting]
        for claim in todo.create_claims:
            name = claim["metadata"]["name"]
            try:
                await self.claims.create(claim, namespace=claim["metadata"]["namespace"])
            except ApiError as err:
                if _already_exists(err):
                    continue
                errors.append(f"failed to create PVC {name}: {_text(err)}")
                self._claim_event(sts, pod, name, err)
                continue
            self._claim_event(sts, pod, name, None)
        if errors:
            # As upstream's aggregate error reads: one alone, several in brackets.
            raise SyncError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")

    async def _fix_claims(self, sts: Obj, todo: wr.Writes, warn: bool) -> None:
        """``UpdatePodClaimForRetentionPolicy``: the owners the retention policy wants on
        the pod's claims (with ``warn``, a ``ConflictingController`` Warning for each
        claim another object controls)."""
        if warn:
            for name in todo.conflicting:
                self.events.event(
                    sts,
                    "Warning",
                    "ConflictingController",
                    f"PersistentVolumeClaim {name} has a conflicting OwnerReference that "
                    "acts as a manging controller, the retention policy is ignored for "
                    "this claim",
                )
        for fixed in todo.fix_claims:
            try:
                await self.claims.update(fixed)
            except ApiError as err:
                name = fixed["metadata"]["name"]
                raise SyncError(
                    f"could not update claim {name} for delete policy ownerRefs: {_text(err)}"
                ) from err

    # Status -----------------------------------------------------------------------------
    async def _write_status(self, sts: Obj, status: Obj) -> None:
        """Write the status when it differs (``updateStatefulSetStatus``); on a conflict,
        onto a fresh read once more."""
        if not pl.needs_write(sts, status):
            return
        await self.sets.update_status(sts, status, retry_on_conflict=True)


def _text(err: Exception) -> str:
    return steward.error_message(err) if isinstance(err, ApiError) else str(err)


CONTROLLER = (
    steward.ControllerBuilder[StatefulSetReconciler](NAME)
    .for_(STATEFULSETS)
    .owns(PODS, expect=True, fields=POD_FIELDS)
    .adopts(PODS, steward.labels_changed, fields=POD_FIELDS)
    .reads(CONTROLLER_REVISIONS, owned_by=[STATEFULSETS], orphans=True)
    .reads(CLAIMS)
    .with_index("controller", steward.index_by_controller)
    .with_index("orphan", steward.orphan_index(PODS, CONTROLLER_REVISIONS))
    .flags(add_flags)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=WORKERS, queue_name=QUEUE))
    .beside_upstream(None)
    .describe(
        "Steward's StatefulSet controller: gives each apps/v1 StatefulSet its pods with "
        "stable names and claims, in order or in parallel, rolls out template changes "
        "through ControllerRevisions (RollingUpdate with partition and maxUnavailable, or "
        "OnDelete), applies the claims' retention policy and keeps the status current. "
        "StatefulSets have no spec.managedBy, so it must not run beside "
        "kube-controller-manager's statefulset controller (--controllers=*,-statefulset)."
    )
    .complete(StatefulSetReconciler)
)
"""The StatefulSet controller: StatefulSets are the primary type; a pod change (after
lowering its set's expectations) queues its controlling set (old and new on a change of
controller), an orphan's change of labels every set whose selector matches it.
ControllerRevisions (owned by a set, or orphans) and claims are read, never queued on, as
upstream. Pods and revisions are indexed by controller UID and, as orphans, by
namespace."""
