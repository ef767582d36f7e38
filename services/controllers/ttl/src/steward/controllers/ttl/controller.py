"""The TTL controller: every node annotated ``node.alpha.kubernetes.io/ttl`` with the
number of seconds its kubelet may cache the Secrets and ConfigMaps its pods use, from the
cluster's size, as upstream's ``ttl-controller`` (pkg/controller/ttl/ttl_controller.go).

# The size and the TTL
An observer of the mirror counts the nodes as they come and go (the initial snapshot
counts as each node coming) and moves through upstream's boundaries with their
hysteresis (:mod:`.sizing`). Everything happens in the observer, before any key is
queued, so a sync always sees the count of the change that queued it.

# A sync
Keyed by node name. A node the mirror no longer holds is done; one whose annotation is
already the desired TTL (as an integer) is left alone; any other is patched (a strategic
merge patch of the annotation alone; a refusal is retried with backoff, but NotFound,
which says the node is gone: its deletion is on its way to the mirror).

# Queueing
A node is queued when it is added and whenever its metadata changes (upstream queues it
on every update; the node's status is not read, so a status update does not reach this
controller). When the desired TTL changes, every node is queued; upstream waits for each
node's next update (the kubelet's status reports) to correct it.

# What it reads
Nodes' metadata, from the informer (metadata only). Nothing is read with direct calls.
"""

from __future__ import annotations

import logging

import steward
from steward import NODES, NotFoundError, Request, Result
from steward.controllers.ttl.sizing import ANNOTATION, Sizing, annotation_patch, current_ttl

log = logging.getLogger(__name__)

NAME = "ttl"
"""The controller's name with the manager (kube-controller-manager's alias of its
``ttl-controller``)."""
QUEUE = "ttlcontroller"
"""Upstream's work queue name (the ``name`` label of ``workqueue_*``)."""
WORKERS = 5
"""Nodes synced at once: kube-controller-manager runs the controller with five workers
and no flag to change it."""


def added_or_updated(change: steward.Change) -> bool:
    """Upstream's handlers: an addition or an update queues the node, a deletion does
    not (the node is gone)."""
    return change.kind is not steward.ChangeKind.DELETED


class TTLReconciler:
    """Counts the nodes and annotates each; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.nodes = ctx.client(NODES)
        self.sizing = Sizing()
        self.seen: set[str] = set()
        """The nodes counted (a deletion of a node never counted counts for nothing)."""

    def observe(self, change: steward.Change) -> None:
        """Count the node in or out; queue every node when the desired TTL changed."""
        name = change.obj.name
        if change.obj.type != NODES:
            return
        if change.kind is steward.ChangeKind.ADDED and name not in self.seen:
            self.seen.add(name)
            changed = self.sizing.added()
        elif change.kind is steward.ChangeKind.DELETED and name in self.seen:
            self.seen.discard(name)
            changed = self.sizing.deleted()
        else:
            return
        if changed:
            log.info(
                "%d nodes: the desired TTL is now %ds", self.sizing.count, self.sizing.ttl_seconds
            )
            for node in self.mirror.objects(NODES):
                self.ctx.enqueue(Request("", node.name))

    async def reconcile(self, request: Request) -> Result:
        found = self.mirror.get(NODES, "", request.name)
        if found is None:
            return Result()
        desired = self.sizing.ttl_seconds
        if current_ttl(found.object) == desired:
            return Result()
        try:
            await self.nodes.patch("", request.name, annotation_patch(desired))
        except NotFoundError:
            log.debug("node %s: gone before its annotation was set", request.name)
            return Result()  # its deletion is on its way to the mirror
        log.info("node %s: %s set to %d", request.name, ANNOTATION, desired)
        return Result()


CONTROLLER = (
    steward.ControllerBuilder[TTLReconciler](NAME)
    .for_(NODES, added_or_updated, metadata_only=True)
    .observe(TTLReconciler.observe)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=WORKERS, queue_name=QUEUE))
    .beside_upstream(None)
    .describe(
        "Steward's TTL controller: the annotation node.alpha.kubernetes.io/ttl on every "
        "node, the seconds its kubelet may cache Secrets and ConfigMaps, from the cluster's "
        "size (0 up to 100 nodes, 15 s, 30 s, 60 s, then 300 s beyond 2000, with "
        "upstream's hysteresis), as kube-controller-manager's ttl-controller. --workers "
        "defaults to upstream's 5. Both would annotate the same nodes, so it must not run "
        "beside upstream's."
    )
    .complete(TTLReconciler)
)
"""The TTL controller: nodes are the primary (and only) type, their metadata only."""
