"""How many pods a PodDisruptionBudget expects and how many must stay healthy: upstream's
``getExpectedPodCount`` and ``getExpectedScale`` with their controller finders
(pkg/controller/disruption/disruption.go, v1.37.2).

Nothing here talks to an API. The controller hands in the pods the budget's selector selects,
the workloads of the budget's namespace from its mirror (:class:`Workloads`) and, for owners
no mirrored kind accounts for, what the ``scale`` subresource said (:func:`scale_lookups`
names them; :class:`Scale`, :data:`NOT_FOUND` or :class:`ScaleFailure` per owner).

# The budget
- ``maxUnavailable`` (an int or a percent): the expected count is the sum of the pods'
  controllers' scales; ``desiredHealthy = expected - maxUnavailable`` (a percent of the
  expected count, rounded up), never below 0.
- ``minAvailable`` as an int: ``desiredHealthy`` is that int and the expected count is the
  number of selected pods; no controller is looked up, so unmanaged pods are fine.
- ``minAvailable`` as a percent: the expected count as for ``maxUnavailable``;
  ``desiredHealthy`` is the percent of it, rounded up.
- Neither: both are 0.

A percent is ``"<digits>%"`` (as ``intstr.GetScaledValueFromIntOrPercent``); a string without
``%`` or with a non-number is an error with upstream's text.

# The controllers of the pods
Each selected pod's controller reference is resolved by upstream's finders, in their order:
ReplicationController (core), then a ReplicaSet (``apps`` or ``extensions``) controlled by a
Deployment (the Deployment's ``spec.replicas``), then a ReplicaSet not controlled by a
Deployment, then a StatefulSet (``apps``), then any kind through its ``scale`` subresource.
Each finder checks that the object it finds has the reference's UID. A controller is counted
once however many pods it has. A pod without a controller reference is *unmanaged*: it is
named in the result and adds nothing (upstream emits an ``UnmanagedPods`` Event and goes on).

# Errors
:class:`ExpectedCountError`, whose text is upstream's (the controller puts it in an Event and,
through :func:`~steward.controllers.disruption.status.fail_safe`, in the ``SyncFailed``
condition): a pod whose controller no finder finds (``found no controllers for pod "x"``), a
malformed ``apiVersion`` in a reference, a failed scale lookup, a malformed int-or-percent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from steward import controller_of

Obj = dict[str, Any]

_PERCENT = re.compile(r"[+-]?[0-9]+")
"""What Go's ``strconv.Atoi`` accepts (before the range check)."""


class ExpectedCountError(Exception):
    """The expected count cannot be computed; the text is upstream's."""


@dataclass(frozen=True)
class OwnerRef:
    """A controller reference of a pod, as far as the finders read it."""

    api_version: str
    kind: str
    name: str
    uid: str

    @classmethod
    def of(cls, ref: Mapping[str, Any]) -> OwnerRef:
        """From an ``ownerReferences`` entry (a dict)."""
        return cls(
            str(ref.get("apiVersion") or ""),
            str(ref.get("kind") or ""),
            str(ref.get("name") or ""),
            str(ref.get("uid") or ""),
        )

    @property
    def group(self) -> str:
        """The API group of ``api_version`` (``schema.ParseGroupVersion``: "" or "v1" is the
        core group, "g/v" is g).

        Raises:
            ExpectedCountError: more than one "/", upstream's text.
        """
        if self.api_version.count("/") > 1:
            raise ExpectedCountError(f"unexpected GroupVersion string: {self.api_version}")
        return self.api_version.rpartition("/")[0]


@dataclass(frozen=True)
class Scale:
    """What a ``scale`` subresource says: the UID of the scaled object and its
    ``spec.replicas``."""

    uid: str
    replicas: int


@dataclass(frozen=True)
class ScaleFailure:
    """A scale lookup that failed: no REST mapping for the kind, the resource does not
    implement ``scale`` (upstream: ``"<resource>.<group> does not implement the scale
    subresource"``), or any error but NotFound. ``message`` becomes the sync error."""

    message: str


class _NotFound:
    """The scale subresource answered NotFound and the resource does implement ``scale``: the
    owner does not exist (no finder finds it)."""

    def __repr__(self) -> str:
        return "NOT_FOUND"


NOT_FOUND: Final = _NotFound()

ScaleLookup = Scale | ScaleFailure | _NotFound
"""The outcome of one scale subresource lookup."""


@dataclass(frozen=True)
class Workloads:
    """The workloads of the budget's namespace the finders read, each by name (objects as
    the API serves them)."""

    replication_controllers: Mapping[str, Obj] = field(default_factory=dict)
    replica_sets: Mapping[str, Obj] = field(default_factory=dict)
    deployments: Mapping[str, Obj] = field(default_factory=dict)
    stateful_sets: Mapping[str, Obj] = field(default_factory=dict)


@dataclass(frozen=True)
class ExpectedScale:
    """The sum of the scales of the pods' controllers, and the pods without a controller."""

    expected_count: int
    unmanaged_pods: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExpectedCount:
    """What a budget expects: ``expected_pods`` and ``desired_healthy`` go to its status;
    ``unmanaged_pods`` (names) to an ``UnmanagedPods`` Event when not empty."""

    expected_pods: int
    desired_healthy: int
    unmanaged_pods: tuple[str, ...] = ()


# --- int or percent -------------------------------------------------------------------------


def scaled_value(value: int | str, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)``: an int as is, a
    percent of ``total`` rounded up.

    Raises:
        ExpectedCountError: a string that is not ``"<integer>%"``, upstream's text.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ExpectedCountError(
            "invalid value for IntOrString: invalid type: neither int nor percentage"
        )
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ExpectedCountError(
            "invalid value for IntOrString: invalid type: string is not a percentage"
        )
    digits = value[:-1]
    if not _PERCENT.fullmatch(digits):
        raise ExpectedCountError(
            f'invalid value for IntOrString: invalid value "{value}": '
            f'strconv.Atoi: parsing "{digits}": invalid syntax'
        )
    # ceil(percent * total / 100) in exact integer arithmetic (Go: float64, the same for the
    # int32 counts a budget sees).
    return -(-int(digits) * total // 100)


# --- the finders ----------------------------------------------------------------------------


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _replicas(obj: Mapping[str, Any]) -> int:
    """``*spec.replicas``; the API server defaults it to 1, so absent means 1."""
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def _is(ref: OwnerRef, kind: str, groups: Iterable[str]) -> bool:
    """Upstream's ``verifyGroupKind`` (raising on a malformed ``apiVersion`` first)."""
    group = ref.group
    return ref.kind == kind and group in groups


def _replication_controller(ref: OwnerRef, workloads: Workloads) -> Scale | None:
    if not _is(ref, "ReplicationController", ("",)):
        return None
    rc = workloads.replication_controllers.get(ref.name)
    if rc is None or _uid(rc) != ref.uid:
        return None
    return Scale(ref.uid, _replicas(rc))


def _deployment(ref: OwnerRef, workloads: Workloads) -> Scale | None:
    if not _is(ref, "ReplicaSet", ("apps", "extensions")):
        return None
    rs = workloads.replica_sets.get(ref.name)
    if rs is None or _uid(rs) != ref.uid:
        return None
    rs_ref = controller_of(rs)
    if rs_ref is None:
        return None
    owner = OwnerRef.of(rs_ref)
    if not _is(owner, "Deployment", ("apps", "extensions")):
        return None
    deployment = workloads.deployments.get(owner.name)
    if deployment is None or _uid(deployment) != owner.uid:
        return None
    return Scale(owner.uid, _replicas(deployment))


def _replica_set(ref: OwnerRef, workloads: Workloads) -> Scale | None:
    if not _is(ref, "ReplicaSet", ("apps", "extensions")):
        return None
    rs = workloads.replica_sets.get(ref.name)
    if rs is None or _uid(rs) != ref.uid:
        return None
    rs_ref = controller_of(rs)
    # A ReplicaSet controlled by a Deployment (of any group, as upstream) counts through it
    # or, when the Deployment is gone, through the scale subresource.
    if rs_ref is not None and rs_ref.get("kind") == "Deployment":
        return None
    return Scale(ref.uid, _replicas(rs))


def _stateful_set(ref: OwnerRef, workloads: Workloads) -> Scale | None:
    if not _is(ref, "StatefulSet", ("apps",)):
        return None
    ss = workloads.stateful_sets.get(ref.name)
    if ss is None or _uid(ss) != ref.uid:
        return None
    return Scale(ref.uid, _replicas(ss))


_FINDERS = (_replication_controller, _deployment, _replica_set, _stateful_set)
"""Upstream's ``finders()`` in order, but the last (the scale subresource), which needs I/O."""


def _from_workloads(ref: OwnerRef, workloads: Workloads) -> Scale | None:
    for finder in _FINDERS:
        found = finder(ref, workloads)
        if found is not None:
            return found
    return None


def _controller_refs(pods: Iterable[Mapping[str, Any]]) -> Iterable[tuple[str, OwnerRef | None]]:
    for pod in pods:
        ref = controller_of(pod)
        name = str((pod.get("metadata") or {}).get("name") or "")
        yield name, (OwnerRef.of(ref) if ref is not None else None)


def scale_lookups(pods: Iterable[Mapping[str, Any]], workloads: Workloads) -> list[OwnerRef]:
    """The controller references, each once, that no mirrored workload accounts for: the
    controller reads their ``scale`` subresource and hands the outcomes to
    :func:`expected_scale`. Empty when every pod's controller is mirrored (the usual case)."""
    wanted: list[OwnerRef] = []
    for _, ref in _controller_refs(pods):
        if ref is None or ref in wanted:
            continue
        try:
            if _from_workloads(ref, workloads) is None:
                wanted.append(ref)
        except ExpectedCountError:
            continue  # expected_scale reports it
    return wanted


def expected_scale(
    pods: Iterable[Mapping[str, Any]],
    workloads: Workloads,
    scales: Mapping[OwnerRef, ScaleLookup] | None = None,
) -> ExpectedScale:
    """Upstream's ``getExpectedScale``: the sum of the scales of the distinct controllers of
    ``pods`` (keyed by the UID of the object whose scale counts: a Deployment for the pods of
    all its ReplicaSets) and the names of the pods without a controller.

    Raises:
        ExpectedCountError: a reference with a malformed ``apiVersion``, a failed scale lookup,
            or a pod whose controller is found nowhere (upstream's texts; the first pod in
            order that fails decides).
        KeyError: a reference :func:`scale_lookups` named is missing from ``scales``.
    """
    by_uid: dict[str, int] = {}
    unmanaged: list[str] = []
    for name, ref in _controller_refs(pods):
        if ref is None:
            unmanaged.append(name)
            continue
        if ref.uid in by_uid:
            continue
        found = _from_workloads(ref, workloads)
        if found is None:
            outcome = (scales or {})[ref]
            if isinstance(outcome, ScaleFailure):
                raise ExpectedCountError(outcome.message)
            if isinstance(outcome, Scale) and outcome.uid == ref.uid:
                found = outcome
        if found is None:
            raise ExpectedCountError(f'found no controllers for pod "{name}"')
        by_uid[found.uid] = found.replicas
    return ExpectedScale(sum(by_uid.values()), tuple(unmanaged))


def expected_count(
    budget: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    workloads: Workloads,
    scales: Mapping[OwnerRef, ScaleLookup] | None = None,
) -> ExpectedCount:
    """Upstream's ``getExpectedPodCount`` for a PodDisruptionBudget (a dict) and the pods its
    selector selects (see the module documentation for the rules).

    Raises:
        ExpectedCountError: as :func:`expected_scale`, or a malformed int-or-percent.
    """
    spec = budget.get("spec") or {}
    max_unavailable = spec.get("maxUnavailable")
    min_available = spec.get("minAvailable")
    if max_unavailable is not None:
        scale = expected_scale(pods, workloads, scales)
        unavailable = scaled_value(max_unavailable, scale.expected_count)
        desired = max(scale.expected_count - unavailable, 0)
        return ExpectedCount(scale.expected_count, desired, scale.unmanaged_pods)
    if min_available is not None:
        if isinstance(min_available, int) and not isinstance(min_available, bool):
            return ExpectedCount(len(pods), min_available)
        if isinstance(min_available, str):
            scale = expected_scale(pods, workloads, scales)
            desired = scaled_value(min_available, scale.expected_count)
            return ExpectedCount(scale.expected_count, desired, scale.unmanaged_pods)
    return ExpectedCount(0, 0)
