"""How one of :mod:`.plan`'s actions becomes API writes, as upstream's
``StatefulPodControl`` makes them (``pkg/controller/statefulset/stateful_pod_control.go``:
``CreateStatefulPod``, ``UpdateStatefulPod``, ``DeleteStatefulPod``,
``createMissingPersistentVolumeClaims``, ``createPersistentVolumeClaims``,
``UpdatePodClaimForRetentionPolicy``), as a pure function of the action, the set and the
claims the controller's cache shows.

In upstream's order (:meth:`Writes.ordered`):

- a creation: the pod's missing claims, the pod, then the owners the retention policy
  wants on its claims (judged on the claims as the cache showed them before, so a claim
  created a moment ago is not yet among them, as in upstream's lister);
- a Pending pod's claims: the missing claims, then the owners;
- a scaled-down pod's claims: the owners;
- an update in place: the missing claims when the pod's storage was off, the owners,
  then the pod;
- a deletion: the pod.

A claim that exists but is being deleted is not created: the step fails
(:attr:`Writes.deleting`). The controller (:mod:`.controller`) performs the writes in
this order and records upstream's Events; the unit differential
(``tests/controllers/statefulset/scenarios.py``) compares the same order with upstream's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from steward.controllers.statefulset import identity as ident
from steward.controllers.statefulset import plan as pl
from steward.controllers.statefulset import retention as ret

Obj = dict[str, Any]


@dataclass(frozen=True)
class Write:
    verb: str
    """``create-claim``, ``update-claim`` (its owners), or the action's own verb for the
    pod (``create``, ``update``, ``delete``)."""
    name: str
    body: Obj
    """The claim or pod as it is to be written."""


@dataclass(frozen=True)
class Writes:
    """The writes of one action, by kind (see the module docs for their order)."""

    action: pl.Action
    create_claims: tuple[Obj, ...] = ()
    deleting: tuple[str, ...] = ()
    """Claims of the pod that exist but are being deleted: creating them fails."""
    fix_claims: tuple[Obj, ...] = ()
    """The pod's claims with the owner references the retention policy wants."""
    conflicting: tuple[str, ...] = ()
    """Claims of the pod another object controls (a ``ConflictingController`` Warning)."""
    pod: bool = False
    """Whether the pod itself is written (created, updated or deleted)."""
    volumes: bool = False
    """An update in place whose pod's storage was off: its volumes are written too."""

    def ordered(self) -> list[Write]:
        """The writes in upstream's order."""
        verb = self.action.verb
        claims = [Write("create-claim", c["metadata"]["name"], c) for c in self.create_claims]
        owners = [Write("update-claim", c["metadata"]["name"], c) for c in self.fix_claims]
        me = [Write(verb.value, self.action.name, self.action.pod)] if self.pod else []
        if verb is pl.Verb.CREATE:
            return [*claims, *me, *owners]
        return [*claims, *owners, *me]


def missing_claims(
    statefulset: Mapping[str, Any], pod: Mapping[str, Any], existing: Mapping[str, Obj]
) -> tuple[tuple[Obj, ...], tuple[str, ...]]:
    """The pod's claims to create (``createPersistentVolumeClaims``) and those that exist
    but are being deleted."""
    create: list[Obj] = []
    deleting: list[str] = []
    for claim in ident.claims(statefulset, ident.ordinal(pod)).values():
        name = str(claim["metadata"]["name"])
        found = existing.get(name)
        if found is None:
            create.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim})
        elif (found.get("metadata") or {}).get("deletionTimestamp"):
            deleting.append(name)
    return tuple(create), tuple(deleting)


def owners(
    statefulset: Mapping[str, Any], pod: Mapping[str, Any], existing: Mapping[str, Obj]
) -> tuple[tuple[Obj, ...], tuple[str, ...]]:
    """The pod's claims with the owners to write (``UpdatePodClaimForRetentionPolicy``),
    and those another object controls."""
    conflicting = tuple(
        str(claim["metadata"]["name"])
        for claim in ident.claims(statefulset, ident.ordinal(pod)).values()
        if (found := existing.get(str(claim["metadata"]["name"]))) is not None
        and ret.has_unexpected_controller(found, statefulset, pod)
    )
    return tuple(ret.claims_off_policy(statefulset, pod, existing)), conflicting


def of(
    action: pl.Action,
    statefulset: Mapping[str, Any],
    update_set: Mapping[str, Any],
    before: Mapping[str, Any],
    existing: Mapping[str, Obj],
) -> Writes:
    """The writes of ``action`` (``before``: the pod as the cache shows it, for an update
    in place; ``existing``: the claims by name). Creations and a Pending pod's claims
    follow the set, updates in place and scaled-down claims the update revision's set
    (the same claim templates and policy)."""
    pod = action.pod
    verb = action.verb
    if verb is pl.Verb.DELETE:
        return Writes(action, pod=True)
    if verb is pl.Verb.FIX_CLAIMS:
        fixes, conflicting = owners(update_set, pod, existing)
        return Writes(action, fix_claims=fixes, conflicting=conflicting)
    if verb is pl.Verb.UPDATE:
        create: tuple[Obj, ...] = ()
        deleting: tuple[str, ...] = ()
        volumes = not ident.storage_matches(update_set, before)
        if volumes:
            create, deleting = missing_claims(update_set, pod, existing)
        fixes, conflicting = owners(update_set, pod, existing)
        return Writes(action, create, deleting, fixes, conflicting, pod=True, volumes=volumes)
    create, deleting = missing_claims(statefulset, pod, existing)
    fixes, conflicting = owners(statefulset, pod, existing)
    return Writes(action, create, deleting, fixes, conflicting, pod=verb is pl.Verb.CREATE)
