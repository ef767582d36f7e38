"""One sync of a StatefulSet as a decision: given the set, its current and update
revisions and its pods, the pod actions upstream takes, in its order, and the status it
writes.

Upstream: ``pkg/controller/statefulset/stateful_set_control.go`` (``updateStatefulSet``,
``processReplica``, ``processCondemned``, ``runForAll``,
``updateStatefulSetAfterInvariantEstablished``, ``computeReplicaStatus``/``updateStatus``,
``updateStatefulSetStatus``) and ``stateful_set_utils.go`` (``completeUpdate``,
``inconsistentStatus``), v1.37 with default feature gates (``MaxUnavailableStatefulSet``
on, ``StatefulSetRecreateStrategy`` off).

# The algorithm
Pods split into *replicas* (ordinals ``start … start + replicas - 1``, a missing one built
from the current revision below the partition, else from the update revision) and
*condemned* (other valid ordinals, highest first). With ``podManagementPolicy:
OrderedReady`` (*monotonic*) the sync stops at the first pod that blocks; with
``Parallel`` every pod is handled. In order:

1. Each replica, lowest ordinal first: a Failed or Succeeded pod is deleted (and, being
   gone next sync, recreated); a missing pod is created (monotonic: then stop; else,
   when its claims disagree with the retention policy, updated too), unless
   a claim of it still belongs to a previous pod of that name (stop); a Pending pod gets
   its missing claims created; monotonic: a pod being deleted, not Running and Ready, or
   not available stops the sync; a pod whose identity, volumes or claims' owners are off
   is updated in place.
2. Condemned pods' claims get the retention policy's owners.
3. Each condemned pod, highest ordinal first: being deleted (monotonic: stop); monotonic:
   not Running and Ready, or not available, and not the first unavailable pod of the
   set: stop; else delete it (monotonic: then stop).
4. ``OnDelete``: nothing more. ``RollingUpdate``: of replicas at ordinal ``start +
   partition`` or above that are not of the update revision, delete from the highest
   ordinal down, at most ``maxUnavailable`` minus the unavailable replicas (all of
   them, partition or not); nothing when that budget is used up. With ``Parallel``,
   first every such pod that is already unavailable (not being deleted), then available
   ones within the remaining budget.

The decision assumes each action succeeds; upstream stops at the first error and the
next sync decides again from what the API server then shows, which this function
reproduces given the new state.

# Status
Counts over replicas and condemned (the pods upstream holds after step 1's partition,
missing ones counting as not created): ``replicas`` created, ``readyReplicas`` Running
and Ready, ``availableReplicas`` of those available, ``currentReplicas`` /
``updatedReplicas`` created, not being deleted, of the current / update revision, each
rolling-update deletion taking one off ``currentReplicas``. When every one of
``spec.replicas`` pods is updated and ready, the update completes: current = update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from steward.controllers.statefulset import identity as ident
from steward.runtime import pods as podfacts
from steward.runtime.times import parse_time

Obj = dict[str, Any]


class Verb(Enum):
    """What an action does to its pod."""

    CREATE = "create"
    """Create ``pod`` (and its missing claims first)."""
    DELETE = "delete"
    UPDATE = "update"
    """Update ``pod`` in place: its identity and volumes as given, its claims' owners."""
    CREATE_CLAIMS = "create-claims"
    """Create the missing claims of a Pending pod."""
    FIX_CLAIMS = "fix-claims"
    """Set the owners of a condemned pod's claims for the retention policy."""


@dataclass(frozen=True)
class Action:
    verb: Verb
    pod: Obj
    """The pod as it should be written (CREATE, UPDATE) or as the mirror shows it."""
    reason: str
    """Why: ``missing``, ``failed``, ``scale-down``, ``update``, ``identity``, …"""

    @property
    def name(self) -> str:
        return str((self.pod.get("metadata") or {}).get("name", ""))


@dataclass(frozen=True)
class SyncInput:
    """What one sync of a StatefulSet decides on."""

    statefulset: Obj
    """The set as the mirror shows it (``status`` included: the current revision's
    ``currentReplicas`` decides which revision a recreated pod gets)."""
    current_set: Obj
    """The set with the current revision's template (:func:`history.apply_revision`)."""
    update_set: Obj
    """The set with the update revision's template."""
    current_revision: str
    update_revision: str
    collision_count: int
    pods: Sequence[Obj]
    """The pods the set controls."""
    now: datetime
    stale_claims: frozenset[str] = frozenset()
    """Names of pods whose claims still belong to an earlier pod of that name
    (``PodClaimIsStale``; only with ``whenScaled: Delete``)."""
    claims_off_policy: frozenset[str] = frozenset()
    """Names of pods whose claims' owners do not match the retention policy
    (``ClaimsMatchRetentionPolicy`` false; :func:`retention.claims_off_policy`), for a
    missing pod judged as the new pod (which has no UID yet)."""


@dataclass(frozen=True)
class SyncPlan:
    actions: tuple[Action, ...]
    """In upstream's order."""
    status: Obj | None
    """The status to write when :func:`needs_write`; None with ``error``."""
    waiting_for: str | None = None
    """The pod a monotonic sync stopped at (it requeues when that pod changes)."""
    error: str | None = None
    """A sync that cannot proceed (an update strategy this version does not run)."""


@dataclass
class _Builder:
    actions: list[Action] = field(default_factory=list)
    waiting_for: str | None = None

    def add(self, verb: Verb, pod: Obj, reason: str) -> None:
        self.actions.append(Action(verb, pod, reason))


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _min_ready(statefulset: Mapping[str, Any]) -> int:
    return int(_spec(statefulset).get("minReadySeconds") or 0)


def _strategy(statefulset: Mapping[str, Any]) -> Mapping[str, Any]:
    return _spec(statefulset).get("updateStrategy") or {}


def replica_counts(
    pods: Sequence[Mapping[str, Any]],
    min_ready_seconds: int,
    current_revision: str,
    update_revision: str,
    now: datetime,
) -> dict[str, int]:
    """The replica counts of the status for these pods (``computeReplicaStatus``)."""
    counts = dict.fromkeys(
        ("replicas", "readyReplicas", "availableReplicas", "currentReplicas", "updatedReplicas"),
        0,
    )
    for pod in pods:
        created = ident.is_created(pod)
        if created:
            counts["replicas"] += 1
        if ident.is_running_and_ready(pod):
            counts["readyReplicas"] += 1
            if ident.is_available(pod, min_ready_seconds, now):
                counts["availableReplicas"] += 1
        if created and not ident.is_terminating(pod):
            revision = ident.revision_of(pod)
            if revision == current_revision:
                counts["currentReplicas"] += 1
            if revision == update_revision:
                counts["updatedReplicas"] += 1
    return counts


def decide(sync: SyncInput) -> SyncPlan:
    """The actions and status of one sync (see the module docs)."""
    sts = sync.statefulset
    strategy = str(_strategy(sts).get("type") or "RollingUpdate")
    if strategy == "Recreate":
        return SyncPlan(
            (),
            None,
            error="uses Recreate strategy but feature gate StatefulSetRecreateStrategy is disabled",
        )
    min_ready = _min_ready(sts)
    now = sync.now
    status: Obj = {
        "observedGeneration": int((sts.get("metadata") or {}).get("generation") or 0),
        "currentRevision": sync.current_revision,
        "updateRevision": sync.update_revision,
        "collisionCount": sync.collision_count,
        "conditions": list((sts.get("status") or {}).get("conditions") or ()),
    }

    def counted(*groups: Sequence[Mapping[str, Any]]) -> Obj:
        pods = [p for group in groups for p in group]
        return {
            **status,
            **replica_counts(pods, min_ready, sync.current_revision, sync.update_revision, now),
        }

    start, count = ident.start_ordinal(sts), ident.replicas(sts)
    slots: list[Obj | None] = [None] * max(count, 0)
    condemned: list[Obj] = []
    for pod in sync.pods:
        number = ident.ordinal(pod)
        if ident.in_range(pod, sts):
            slots[number - start] = pod
        elif number >= 0:
            condemned.append(pod)
    current_replicas = int((sts.get("status") or {}).get("currentReplicas") or 0)
    replicas: list[Obj] = []
    for index, slot in enumerate(slots):
        if slot is None:
            number = start + index
            if ident.builds_current(sync.current_set, current_replicas, number):
                slot = ident.new_pod(sync.current_set, number, sync.current_revision)
            else:
                slot = ident.new_pod(sync.update_set, number, sync.update_revision)
        replicas.append(slot)
    condemned.sort(key=ident.ordinal, reverse=True)

    first_unavailable: str | None = None
    for pod in [*replicas, *reversed(condemned)]:
        if ident.is_unavailable(pod, min_ready, now) and first_unavailable is None:
            first_unavailable = _name(pod)

    if (sts.get("metadata") or {}).get("deletionTimestamp"):
        return SyncPlan((), counted(sync.pods))

    monotonic = _spec(sts).get("podManagementPolicy") != "Parallel"
    out = _Builder()

    def stop(pod: Mapping[str, Any]) -> SyncPlan:
        out.waiting_for = _name(pod)
        return SyncPlan(tuple(out.actions), counted(replicas, condemned), out.waiting_for)

    # 1. Replicas, lowest ordinal first.
    for pod in replicas:
        name = _name(pod)
        if podfacts.is_terminal(pod):
            if not ident.is_terminating(pod):
                out.add(Verb.DELETE, pod, "failed")
            if monotonic:
                return stop(pod)
            continue
        if not ident.is_created(pod):
            if name in sync.stale_claims:
                if monotonic:
                    return stop(pod)
                continue
            out.add(Verb.CREATE, pod, "missing")
            if monotonic:
                return stop(pod)
            # Parallel goes on with the new pod: it has its identity and storage, but
            # claims that disagree with the policy are fixed again and the pod updated.
            if name in sync.claims_off_policy:
                out.add(Verb.UPDATE, pod, "claims")
            continue
        if podfacts.phase(pod) == "Pending":
            out.add(Verb.CREATE_CLAIMS, pod, "pending")
        if monotonic and (
            ident.is_terminating(pod)
            or not ident.is_running_and_ready(pod)
            or not ident.is_available(pod, min_ready, now)
        ):
            return stop(pod)
        identity_ok = ident.identity_matches(sts, pod) and ident.storage_matches(sts, pod)
        if not identity_ok or name in sync.claims_off_policy:
            fixed = pod
            if not ident.identity_matches(sync.update_set, fixed):
                fixed = ident.with_identity(sync.update_set, fixed)
            if not ident.storage_matches(sync.update_set, fixed):
                fixed = ident.with_storage(sync.update_set, fixed)
            out.add(Verb.UPDATE, fixed, "identity" if not identity_ok else "claims")

    # 2. Condemned pods' claims.
    for pod in condemned:
        if _name(pod) in sync.claims_off_policy:
            out.add(Verb.FIX_CLAIMS, pod, "scale-down")

    # 3. Condemned pods, highest ordinal first.
    for pod in condemned:
        if ident.is_terminating(pod):
            if monotonic:
                return stop(pod)
            continue
        if (
            monotonic
            and _name(pod) != first_unavailable
            and (not ident.is_running_and_ready(pod) or not ident.is_available(pod, min_ready, now))
        ):
            out.waiting_for = first_unavailable
            return SyncPlan(tuple(out.actions), counted(replicas, condemned), first_unavailable)
        out.add(Verb.DELETE, pod, "scale-down")
        if monotonic:
            return SyncPlan(tuple(out.actions), counted(replicas, condemned))

    final = counted(replicas, condemned)
    if strategy == "OnDelete":
        return SyncPlan(tuple(out.actions), final)

    # 4. Rolling update.
    rolling = _strategy(sts).get("rollingUpdate")
    update_min, budget = 0, 1
    if rolling is not None:
        update_min = int(rolling.get("partition") or 0)
        budget = ident.max_unavailable(rolling.get("maxUnavailable"), count)
    old = [ident.revision_of(p) != sync.update_revision for p in replicas]
    unavailable = [ident.is_unavailable(p, min_ready, now) for p in replicas]
    parallel = not monotonic
    needing = sum(
        1
        for p, o, u in zip(replicas, old, unavailable, strict=True)
        if parallel and u and o and not ident.is_terminating(p)
    )
    if sum(unavailable) >= budget and needing == 0:
        return SyncPlan(tuple(out.actions), final)
    targets = range(len(replicas) - 1, update_min - 1, -1)
    deleted = 0
    if parallel:
        for i in targets:
            pod = replicas[i]
            if (
                old[i]
                and not ident.is_available(pod, min_ready, now)
                and not ident.is_terminating(pod)
            ):
                out.add(Verb.DELETE, pod, "update")
                deleted += 1
        remaining = budget - sum(unavailable)
        for i in targets:
            if remaining <= 0:
                break
            if old[i] and not unavailable[i]:
                out.add(Verb.DELETE, replicas[i], "update")
                remaining -= 1
                deleted += 1
    else:
        remaining = budget - sum(unavailable)
        for i in targets:
            if deleted >= remaining:
                break
            if old[i] and not ident.is_terminating(replicas[i]):
                out.add(Verb.DELETE, replicas[i], "update")
                deleted += 1
    final["currentReplicas"] -= deleted
    return SyncPlan(tuple(out.actions), final)


def complete_update(statefulset: Mapping[str, Any], status: Obj) -> Obj:
    """The status with the update completed when every replica is updated and ready and
    there are no more (``completeUpdate``): current revision = update revision."""
    want = ident.replicas(statefulset)
    if (
        status.get("updatedReplicas") == want
        and status.get("readyReplicas") == want
        and status.get("replicas") == want
    ):
        return {
            **status,
            "currentReplicas": status["updatedReplicas"],
            "currentRevision": status["updateRevision"],
        }
    return status


_COMPARED = (
    "replicas",
    "currentReplicas",
    "readyReplicas",
    "updatedReplicas",
    "availableReplicas",
)


def needs_write(statefulset: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the status differs from the set's (``inconsistentStatus``): a newer observed
    generation, a count, a revision name or the conditions (absent fields count as zero
    or empty, as the API server omits them)."""
    old = statefulset.get("status") or {}
    return (
        int(status.get("observedGeneration") or 0) > int(old.get("observedGeneration") or 0)
        or any(int(status.get(k) or 0) != int(old.get(k) or 0) for k in _COMPARED)
        or (status.get("currentRevision") or "") != (old.get("currentRevision") or "")
        or (status.get("updateRevision") or "") != (old.get("updateRevision") or "")
        or list(status.get("conditions") or ()) != list(old.get("conditions") or ())
    )


def requeue_after(
    statefulset: Mapping[str, Any],
    status: Mapping[str, Any] | None,
    pods: Sequence[Obj],
    now: datetime,
) -> float | None:
    """Seconds after which the set is synced again to count pods that become available
    (``syncStatefulSet`` with ``FindMinNextPodAvailabilityCheck``): only with
    ``minReadySeconds`` and ready ≠ available; the soonest ready pod's remaining wait,
    else ``minReadySeconds`` itself. None: no requeue."""
    min_ready = _min_ready(statefulset)
    if min_ready <= 0 or status is None:
        return None
    if int(status.get("readyReplicas") or 0) == int(status.get("availableReplicas") or 0):
        return None
    waits = []
    for pod in pods:
        if not podfacts.is_ready(pod):
            continue
        since = parse_time(podfacts.ready_condition(pod).get("lastTransitionTime"))
        if since is None:
            continue
        wait = (since + timedelta(seconds=min_ready) - now).total_seconds()
        if wait > 0:
            waits.append(wait)
    return min(waits) if waits else float(min_ready)
