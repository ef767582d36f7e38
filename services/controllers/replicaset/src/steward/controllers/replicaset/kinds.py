"""The kinds the replica controller keeps: ReplicaSets and ReplicationControllers, as one
:class:`Kind` each that says where the two differ.

Upstream runs one controller for both: ``pkg/controller/replication`` wraps
``pkg/controller/replicaset``'s ``ReplicaSetController`` with adapters that present a
ReplicationController as an older version of a ReplicaSet (``conversion.go``), and gives
it its own GroupVersionKind, queue name and Event source
(``replication_controller.go``). Here the same sync (:mod:`.controller`, :mod:`.sync`,
:mod:`.ranking`) takes a :class:`Kind` instead of adapters; what differs is:

- the type (``apps/v1`` ReplicaSets, ``v1`` ReplicationControllers), which also names the
  owner in the pods' controller references and in Events;
- the selector: a ReplicaSet's ``spec.selector`` is a label selector, a
  ReplicationController's a plain label map, read as ``matchLabels`` (upstream's
  ``Convert_Map_to_unversioned_LabelSelector``);
- the names: the manager's (kube-controller-manager's ``--controllers`` alias), the work
  queue's and the Events' source component;
- the status: ReplicationControllers have no ``status.terminatingReplicas`` (upstream
  turns ``EnableStatusTerminatingReplicas`` off for them); the other fields
  (``replicas``, ``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas``,
  ``observedGeneration``, ``conditions`` with ``ReplicaFailure``) are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from steward import REPLICASETS, REPLICATION_CONTROLLERS, Resource


def label_selector(owner: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A ReplicaSet's selector: ``spec.selector``, a label selector already."""
    return (owner.get("spec") or {}).get("selector")


def map_selector(owner: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A ReplicationController's selector: the label map ``spec.selector`` as
    ``matchLabels``; None when it is empty (the API server defaults it to the template's
    labels and refuses an empty one, so only a malformed object has none, and it then
    matches nothing)."""
    labels = (owner.get("spec") or {}).get("selector") or {}
    return {"matchLabels": dict(labels)} if labels else None


@dataclass(frozen=True)
class Kind:
    """One kind of replica owner: what the shared sync needs to know of it."""

    resource: Resource
    """The owner's type (its ``kind`` and API version name it in controller references
    and Events)."""
    name: str
    """The controller's name with the manager: kube-controller-manager's ``--controllers``
    alias of it."""
    component: str
    """The Events' source component, as upstream's."""
    queue: str
    """The work queue's name (the ``name`` label of ``workqueue_*``), as upstream's."""
    selector: Callable[[Mapping[str, Any]], Mapping[str, Any] | None]
    """An owner's selector as a label selector (:func:`label_selector` or
    :func:`map_selector`)."""
    terminating_replicas: bool
    """Whether the status has ``terminatingReplicas``."""
    title: str
    """The kind in prose (``ReplicaSet``), for descriptions and messages."""


REPLICA_SET = Kind(
    resource=REPLICASETS,
    name="replicaset",
    component="replicaset-controller",
    queue="replicaset",
    selector=label_selector,
    terminating_replicas=True,
    title="ReplicaSet",
)
"""apps/v1 ReplicaSets (kube-controller-manager's ``replicaset-controller``, alias
``replicaset``)."""

REPLICATION_CONTROLLER = Kind(
    resource=REPLICATION_CONTROLLERS,
    name="replicationcontroller",
    component="replication-controller",
    queue="replicationmanager",
    selector=map_selector,
    terminating_replicas=False,
    title="ReplicationController",
)
"""v1 ReplicationControllers (kube-controller-manager's
``replicationcontroller-controller``, alias ``replicationcontroller``)."""
