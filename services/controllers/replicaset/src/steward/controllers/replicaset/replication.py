"""The ReplicationController controller: the replica controller of :mod:`.controller` for
v1 ReplicationControllers (:data:`~.kinds.REPLICATION_CONTROLLER`), as upstream's
``pkg/controller/replication`` is its ReplicaSet controller behind adapters.

It registers with the manager as ``replicationcontroller`` (kube-controller-manager's
alias of its ``replicationcontroller-controller``), names its work queue
``replicationmanager`` and its Events' source ``replication-controller``, reads a
ReplicationController's selector (a label map) as ``matchLabels`` and writes no
``status.terminatingReplicas``; the sync is the ReplicaSet controller's, unchanged.
"""

from __future__ import annotations

from steward.controllers.replicaset.controller import definition
from steward.controllers.replicaset.kinds import REPLICATION_CONTROLLER

CONTROLLER = definition(
    REPLICATION_CONTROLLER,
    "Steward's ReplicationController controller: keeps each ReplicationController's pods "
    "at spec.replicas and its status current (the ReplicaSet controller's sync). "
    "ReplicationControllers have no spec.managedBy, so it must not run beside "
    "kube-controller-manager's replicationcontroller controller.",
)
"""The ReplicationController controller (see :func:`.controller.definition`)."""
