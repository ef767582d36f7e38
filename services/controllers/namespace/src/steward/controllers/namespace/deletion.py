"""The decisions of a namespace's deletion, without I/O: what discovery leaves to delete,
what the remaining content says, how long to wait, and the namespace's conditions.

Everything here keeps upstream's words and numbers
(``pkg/controller/namespace/deletion`` in kubernetes/kubernetes): the condition types,
reasons and messages, the 15 s a finalizer is given, the pods' grace periods as the
estimate, and ``estimate / 2 + 1`` seconds before the next look.

# Conditions
Each sync collects what went wrong (:class:`ConditionUpdater`); :meth:`ConditionUpdater.update`
then writes all five condition types the controller keeps into the status: the failing ones
as ``True`` with their reason and message, every other one as ``False`` with its "ok"
reason and message. A condition is replaced only when its status, reason or message
changed; its ``lastTransitionTime`` moves only when its status did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from steward import Resource

FINALIZER = "kubernetes"
"""The finalizer token this controller removes from ``spec.finalizers`` when the namespace
is empty (upstream's ``v1.FinalizerKubernetes``)."""
FINALIZER_ESTIMATE_SECONDS = 15
"""The estimate when what remains carries finalizers (upstream's
``finalizerEstimateSeconds``)."""

DISCOVERY_FAILURE = "NamespaceDeletionDiscoveryFailure"
GROUP_VERSION_PARSING_FAILURE = "NamespaceDeletionGroupVersionParsingFailure"
CONTENT_FAILURE = "NamespaceDeletionContentFailure"
CONTENT_REMAINING = "NamespaceContentRemaining"
FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"
CONDITION_TYPES = (
    DISCOVERY_FAILURE,
    GROUP_VERSION_PARSING_FAILURE,
    CONTENT_FAILURE,
    CONTENT_REMAINING,
    FINALIZERS_REMAINING,
)
"""The namespace condition types the controller keeps, in upstream's order."""
OK_REASONS = {
    DISCOVERY_FAILURE: "ResourcesDiscovered",
    GROUP_VERSION_PARSING_FAILURE: "ParsedGroupVersions",
    CONTENT_FAILURE: "ContentDeleted",
    CONTENT_REMAINING: "ContentRemoved",
    FINALIZERS_REMAINING: "ContentHasNoFinalizers",
}
OK_MESSAGES = {
    DISCOVERY_FAILURE: "All resources successfully discovered",
    GROUP_VERSION_PARSING_FAILURE: "All legacy kube types successfully parsed",
    CONTENT_FAILURE: "All content successfully deleted, may be waiting on finalization",
    CONTENT_REMAINING: "All content successfully removed",
    FINALIZERS_REMAINING: "All content-preserving finalizers finished",
}

PODS = Resource("", "v1", "pods", "Pod")


def gvr_text(resource: Resource) -> str:
    """A group-version-resource as Go prints it (``apps/v1, Resource=deployments``,
    ``/v1, Resource=pods``)."""
    return f"{resource.group}/{resource.version}, Resource={resource.plural}"


def group_version_text(group: str, version: str) -> str:
    """A group version as Go prints it (``apps/v1``; ``v1`` for the core group)."""
    return f"{group}/{version}" if group else version


def discovery_error(failed: Mapping[str, str]) -> str:
    """The text of client-go's ``ErrGroupDiscoveryFailed`` for group versions that
    aggregated discovery reported stale (``failed``: their names, as
    :attr:`steward.runtime.discovery.Discovered.failed` keys them)."""
    groups = sorted(f"{gv}: stale GroupVersion discovery: {gv}" for gv in failed)
    return f"unable to retrieve the complete list of server APIs: {', '.join(groups)}"


def discovery_failure_message(failed: Mapping[str, str]) -> str:
    """The message of ``NamespaceDeletionDiscoveryFailure`` for those group versions."""
    return f"Discovery failed for some groups, {len(failed)} failing: {discovery_error(failed)}"


def parse_group_version(text: str) -> tuple[str, str]:
    """``(group, version)`` of a group version string, as apimachinery's
    ``ParseGroupVersion`` (empty: both empty; ``v1``: the core group).

    Raises:
        ValueError: more than one slash, with upstream's text.
    """
    if not text or text == "/":
        return "", ""
    parts = text.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise ValueError(f"unexpected GroupVersion string: {text}")


@dataclass
class Remaining:
    """What is left of one resource type after its deletion (upstream's
    ``gvrDeletionMetadata``)."""

    estimate: int = 0
    """Seconds to wait before looking again; 0 does not mean nothing remains."""
    count: int = 0
    """How many objects remain."""
    finalizers: dict[str, int] = field(default_factory=dict)
    """How many of them carry each finalizer."""


class UnexpectedContent(Exception):
    """Objects remain with neither an estimate nor a finalizer to wait for."""


def remaining_of(
    resource: Resource, namespace: str, items: Sequence[Mapping[str, Any]], estimate: int
) -> Remaining:
    """What remains of ``resource`` in ``namespace`` given the objects a list found after
    the deletion (their metadata) and the type's estimate.

    Raises:
        UnexpectedContent: objects remain and nothing says why (no estimate, no finalizer);
            its text is upstream's, and it carries the :class:`Remaining` as ``args[1]``.
    """
    if not items:
        return Remaining()
    finalizers: dict[str, int] = {}
    for item in items:
        for finalizer in (item.get("metadata") or {}).get("finalizers") or ():
            finalizers[finalizer] = finalizers.get(finalizer, 0) + 1
    if estimate != 0:
        return Remaining(estimate, len(items), finalizers)
    if finalizers:
        return Remaining(FINALIZER_ESTIMATE_SECONDS, len(items), finalizers)
    raise UnexpectedContent(
        f"unexpected items still remain in namespace: {namespace} for gvr: {gvr_text(resource)}",
        Remaining(estimate, len(items)),
    )


def pods_estimate(pods: Iterable[Mapping[str, Any]]) -> int:
    """The longest ``terminationGracePeriodSeconds`` among the pods not yet terminal
    (upstream's ``estimateGracefulTerminationForPods``)."""
    estimate = 0
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        if isinstance(grace, int) and grace > estimate:
            estimate = grace
    return estimate


def allowed_estimate(estimate: int, deleted_at: datetime, now: datetime) -> int:
    """``estimate``, or 0 once at least that long has passed since the namespace's
    deletion."""
    return 0 if (now - deleted_at).total_seconds() >= estimate else estimate


def requeue_seconds(estimate: int) -> float:
    """When to look again while content remains: ``estimate / 2 + 1`` seconds, integer
    division (upstream's worker on a ``ResourcesRemainingError``)."""
    return float(estimate // 2 + 1)


def finalized_spec(namespace: Mapping[str, Any], token: str = FINALIZER) -> list[str]:
    """``spec.finalizers`` without ``token``: the others once each, sorted (upstream's
    ``finalizeNamespace``)."""
    current = (namespace.get("spec") or {}).get("finalizers") or ()
    return sorted({f for f in current if f != token})


@dataclass
class Totals:
    """What remains of every type (upstream's ``allGVRDeletionMetadata``)."""

    by_resource: dict[Resource, int] = field(default_factory=dict)
    by_finalizer: dict[str, int] = field(default_factory=dict)

    def add(self, resource: Resource, remaining: Remaining) -> None:
        if remaining.count > 0:
            self.by_resource[resource] = remaining.count
            for finalizer, count in remaining.finalizers.items():
                if count:
                    self.by_finalizer[finalizer] = self.by_finalizer.get(finalizer, 0) + count


def _condition(
    kind: str, reason: str, message: str, now: str, status: str = "True"
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


class ConditionUpdater:
    """The conditions of one sync (upstream's ``namespaceConditionUpdater``); ``now`` is
    the time new conditions carry."""

    def __init__(self, now: str) -> None:
        self.now = now
        self.new: list[dict[str, Any]] = []
        self.content_errors: list[str] = []

    def discovery_failed(self, message: str) -> None:
        self.new.append(_condition(DISCOVERY_FAILURE, "DiscoveryFailed", message, self.now))

    def group_version_failed(self, message: str) -> None:
        self.new.append(
            _condition(
                GROUP_VERSION_PARSING_FAILURE, "GroupVersionParsingFailed", message, self.now
            )
        )

    def delete_content_failed(self, message: str) -> None:
        self.content_errors.append(message)

    def content_totals(self, totals: Totals) -> None:
        """``NamespaceContentRemaining`` and ``NamespaceFinalizersRemaining`` when
        something remains."""
        if totals.by_resource:
            parts = sorted(
                f"{r.plural}.{r.group} has {n} resource instances"
                for r, n in totals.by_resource.items()
                if n
            )
            self.new.append(
                _condition(
                    CONTENT_REMAINING,
                    "SomeResourcesRemain",
                    f"Some resources are remaining: {', '.join(parts)}",
                    self.now,
                )
            )
        if totals.by_finalizer:
            parts = sorted(
                f"{f} in {n} resource instances" for f, n in totals.by_finalizer.items() if n
            )
            self.new.append(
                _condition(
                    FINALIZERS_REMAINING,
                    "SomeFinalizersRemain",
                    "Some content in the namespace has finalizers remaining: " + ", ".join(parts),
                    self.now,
                )
            )

    def update(self, status: dict[str, Any]) -> bool:
        """Write the five conditions into ``status`` (a namespace's, changed in place);
        whether anything changed."""
        if self.content_errors and _find(self.new, CONTENT_FAILURE) is None:
            messages = sorted(self.content_errors)
            self.new.append(
                _condition(
                    CONTENT_FAILURE,
                    "ContentDeletionFailed",
                    f"Failed to delete all resource types, {len(messages)} remaining: "
                    + ", ".join(messages),
                    self.now,
                )
            )
        conditions: list[dict[str, Any]] = status.setdefault("conditions", []) or []
        status["conditions"] = conditions
        changed = False
        for kind in CONDITION_TYPES:
            new = _find(self.new, kind) or _condition(
                kind, OK_REASONS[kind], OK_MESSAGES[kind], self.now, status="False"
            )
            old = _find(conditions, kind)
            if old is None:
                conditions.append(new)
                changed = True
            elif any(old.get(k) != new[k] for k in ("status", "message", "reason")):
                if old.get("status") != new["status"]:
                    old["lastTransitionTime"] = self.now
                old["type"] = kind
                old["status"] = new["status"]
                old["reason"] = new["reason"]
                old["message"] = new["message"]
                changed = True
        return changed


def _find(conditions: Iterable[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    for condition in conditions:
        if condition.get("type") == kind:
            return condition
    return None
