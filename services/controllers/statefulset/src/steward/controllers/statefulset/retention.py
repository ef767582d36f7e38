"""Who owns a StatefulSet pod's PersistentVolumeClaims under the set's
``persistentVolumeClaimRetentionPolicy``, as pure functions of the claim, the set and
the pod.

Upstream: ``pkg/controller/statefulset/stateful_set_utils.go``
(``getPersistentVolumeClaimRetentionPolicy``, ``isClaimOwnerUpToDate``,
``updateClaimOwnerRefForSetAndPod``, ``hasUnexpectedController``, ``hasStaleOwnerRef``,
``hasNonControllerOwner``) and ``stateful_pod_control.go`` (``PodClaimIsStale``).

The policy has two halves, ``whenDeleted`` and ``whenScaled``, each ``Retain`` (the
default) or ``Delete``; the garbage collector does the deleting, so the policy is carried
by controller references on the claim:

| whenScaled | whenDeleted | claim of a pod in range | claim of a scaled-down pod |
|---|---|---|---|
| Retain | Retain | no reference to set or pod | same |
| Retain | Delete | the set | the set |
| Delete | Retain | none | the pod |
| Delete | Delete | the set | the pod |

A claim that references the set or pod by name and kind but another UID (*stale*: left
from an earlier set or pod of that name) is not touched; a claim that another object
controls keeps that controller and loses references to the set and pod (only when the
policy is not Retain/Retain).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from steward.controllers.statefulset import identity as ident

Obj = dict[str, Any]

RETAIN = "Retain"
DELETE = "Delete"


def policy(statefulset: Mapping[str, Any]) -> tuple[str, str]:
    """(whenScaled, whenDeleted), Retain for what is unset."""
    value = (statefulset.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}
    return str(value.get("whenScaled") or RETAIN), str(value.get("whenDeleted") or RETAIN)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _refs(claim: Mapping[str, Any]) -> list[Obj]:
    return [dict(r) for r in _meta(claim).get("ownerReferences") or ()]


def _matches(ref: Mapping[str, Any], obj: Mapping[str, Any], api_version: str, kind: str) -> bool:
    return (
        ref.get("apiVersion") == api_version
        and ref.get("kind") == kind
        and ref.get("name") == _meta(obj).get("name")
    )


def _is_set(ref: Mapping[str, Any], statefulset: Mapping[str, Any]) -> bool:
    return _matches(ref, statefulset, "apps/v1", "StatefulSet")


def _is_pod(ref: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    return _matches(ref, pod, "v1", "Pod")


def _uid(obj: Mapping[str, Any]) -> Any:
    return _meta(obj).get("uid")


def has_stale_ref(
    claim: Mapping[str, Any], obj: Mapping[str, Any], is_ref: Callable[..., bool]
) -> bool:
    """The first reference naming ``obj`` carries another UID."""
    for ref in _refs(claim):
        if is_ref(ref, obj):
            return bool(ref.get("uid") != _uid(obj))
    return False


def has_ref(claim: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    return any(ref.get("uid") == _uid(owner) for ref in _refs(claim))


def has_unexpected_controller(
    claim: Mapping[str, Any], statefulset: Mapping[str, Any], pod: Mapping[str, Any]
) -> bool:
    """Under a policy other than Retain/Retain: a stale reference to the set or pod, or
    another object as controller."""
    if policy(statefulset) == (RETAIN, RETAIN):
        return False
    for ref in _refs(claim):
        if _is_set(ref, statefulset):
            if ref.get("uid") != _uid(statefulset):
                return True
            continue
        if _is_pod(ref, pod):
            if ref.get("uid") != _uid(pod):
                return True
            continue
        if ref.get("controller"):
            return True
    return False


def _has_non_controller_owner(
    claim: Mapping[str, Any], statefulset: Mapping[str, Any], pod: Mapping[str, Any]
) -> bool:
    return any(
        ref.get("uid") in (_uid(statefulset), _uid(pod)) and not ref.get("controller")
        for ref in _refs(claim)
    )


def owner_up_to_date(
    claim: Mapping[str, Any], statefulset: Mapping[str, Any], pod: Mapping[str, Any]
) -> bool:
    """Whether the claim's references agree with the policy (``isClaimOwnerUpToDate``;
    true too for a claim in a state it must not touch)."""
    if has_stale_ref(claim, statefulset, _is_set) or has_stale_ref(claim, pod, _is_pod):
        return True
    if has_unexpected_controller(claim, statefulset, pod):
        return not (has_ref(claim, statefulset) or has_ref(claim, pod))
    if _has_non_controller_owner(claim, statefulset, pod):
        return False
    scaled, deleted = policy(statefulset)
    on_set, on_pod = has_ref(claim, statefulset), has_ref(claim, pod)
    scaled_down = not ident.in_range(pod, statefulset)
    if scaled == DELETE and deleted == DELETE:
        return on_set != scaled_down and on_pod == scaled_down
    if scaled == DELETE and deleted == RETAIN:
        return not on_set and on_pod == scaled_down
    if scaled == RETAIN and deleted == DELETE:
        return on_set and not on_pod
    return not on_set and not on_pod  # Retain/Retain, and unknown values as upstream


def _controller_ref(owner: Mapping[str, Any], api_version: str, kind: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": _meta(owner).get("name", ""),
        "uid": _uid(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def updated_owner_refs(
    claim: Mapping[str, Any], statefulset: Mapping[str, Any], pod: Mapping[str, Any]
) -> list[Obj]:
    """The claim's owner references as the policy wants them
    (``updateClaimOwnerRefForSetAndPod``): references to the set and pod removed, then
    added back as controller where the policy asks, none when another controller owns it."""
    unexpected = has_unexpected_controller(claim, statefulset, pod)
    refs = [r for r in _refs(claim) if not (_is_set(r, statefulset) or _is_pod(r, pod))]
    if unexpected:
        return refs

    def add(owner: Mapping[str, Any], api_version: str, kind: str) -> None:
        if not any(r.get("uid") == _uid(owner) for r in refs):
            refs.append(_controller_ref(owner, api_version, kind))

    scaled, deleted = policy(statefulset)
    scaled_down = not ident.in_range(pod, statefulset)
    if (scaled, deleted) == (RETAIN, DELETE) or (
        (scaled, deleted) == (DELETE, DELETE) and not scaled_down
    ):
        add(statefulset, "apps/v1", "StatefulSet")
    elif scaled == DELETE and deleted in (RETAIN, DELETE) and scaled_down:
        add(pod, "v1", "Pod")
    return refs


def claim_is_stale(
    statefulset: Mapping[str, Any], pod: Mapping[str, Any], existing: Mapping[str, Obj]
) -> bool:
    """Whether a claim of the (missing) pod still references an earlier pod of its name
    (``PodClaimIsStale``): never with ``whenScaled: Retain``. ``existing``: the claims
    found, by name."""
    if policy(statefulset)[0] == RETAIN:
        return False
    for claim in ident.claims(statefulset, ident.ordinal(pod)).values():
        found = existing.get(str(claim["metadata"]["name"]))
        if found is not None and has_stale_ref(found, pod, _is_pod):
            return True
    return False


def claims_off_policy(
    statefulset: Mapping[str, Any], pod: Mapping[str, Any], existing: Mapping[str, Obj]
) -> list[Obj]:
    """The pod's existing claims whose owners disagree with the policy, each with the
    owner references to write (``ClaimsMatchRetentionPolicy`` false, then
    ``UpdatePodClaimForRetentionPolicy``); empty when they all agree. Missing claims are
    skipped (created elsewhere, checked on a later sync)."""
    fixes: list[Obj] = []
    for claim in ident.claims(statefulset, ident.ordinal(pod)).values():
        found = existing.get(str(claim["metadata"]["name"]))
        if found is None or owner_up_to_date(found, statefulset, pod):
            continue
        meta = {**_meta(found), "ownerReferences": updated_owner_refs(found, statefulset, pod)}
        fixes.append({**found, "metadata": meta})
    return fixes
