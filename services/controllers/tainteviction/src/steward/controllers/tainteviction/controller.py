"""The taint eviction controller: pods deleted from nodes with ``NoExecute`` taints they do
not tolerate, at once or once their ``tolerationSeconds`` are over, as upstream's
``taint-eviction-controller`` (pkg/controller/tainteviction/taint_eviction.go).

# Keys
One queue carries two kinds of key. A node's key is ``Request("", node)`` (a pod always
has a namespace, a node never): its sync reads the node once and decides for every pod
bound to it (the mirror's ``node`` index, by ``spec.nodeName``), so a node of a thousand
pods is one read of the node, not a thousand. A pod's key is ``Request(namespace, pod)``:
its sync decides for that pod alone, and deletes it when its eviction is due.

# A node's sync
The node's ``NoExecute`` taints (none when it is gone: then nothing is done, as
upstream's, which forgets the node but lets its pods' evictions run). For each pod on it,
:meth:`~steward.controllers.tainteviction.evictions.Evictions.process` decides (no taints:
cancel; a taint not tolerated: due at once; tolerated forever: cancel; tolerated for a
while: scheduled, or kept as scheduled). A cancelled timed eviction records the Event
``TaintManagerEviction`` "Cancelling deletion of Pod <ns>/<name>". Every pod with an
eviction is queued for the moment it is due.

# A pod's sync
A pod that is gone has its eviction cancelled (with the Event, for a timed one: someone
else deleted it first). A bound pod whose node the mirror holds is decided as above with
the node's taints; a pod whose node is gone keeps what was scheduled. An eviction not due
yet queues the pod again for when it is (``requeue_after``). A due one: the Event
``TaintManagerEviction`` "Marking for deletion Pod <ns>/<name>" (once), then the pod read
afresh, the ``DisruptionTarget`` condition patched into its status (reason
``DeletionByTaintManager``; unless it says so already) and the pod deleted (its uid a
precondition). A pod found gone meanwhile is no failure; any other failure is retried
with backoff, the eviction kept. Each deletion counts in
``taint_eviction_controller_pod_deletions_total`` and, in seconds from when it was due,
``taint_eviction_controller_pod_deletion_duration_seconds`` (upstream's metrics).

# Queueing
A node is queued when it is added or deleted, and when its ``NoExecute`` taints change
(upstream's ``NodeUpdated``); every node at start. A pod is queued when it is added or
deleted, and when its tolerations or its node change (upstream's ``PodUpdated``).
There is no resync (upstream has none).

# What it reads
Nodes: metadata and ``spec.taints``. Pods: metadata, ``spec.nodeName`` and
``spec.tolerations``. Both from the informer; the one direct read is of a pod about to be
deleted (its status, to add the condition), as upstream's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Histogram

import steward
from steward import NODES, PODS, NotFoundError, Request, Result
from steward.controllers.tainteviction.disruption import disruption_condition, status_patch
from steward.controllers.tainteviction.evictions import Eviction, Evictions, PodKey
from steward.controllers.tainteviction.tolerations import no_execute_taints
from steward.runtime.mirror import MirrorObject

log = logging.getLogger(__name__)

NAME = "taint-eviction-controller"
"""The controller's name with the manager: kube-controller-manager's --controllers name
of its taint eviction controller, and the Events' source component (upstream's)."""
QUEUE_NAME = "noexec_taint_pod"
"""The work queue's name. Upstream has two queues, ``noexec_taint_node`` and
``noexec_taint_pod``; here one carries both kinds of key, and pods are most of them."""
WORKERS = 8
"""Keys synced at once: upstream's ``UpdateWorkerSize`` (8 workers, no flag)."""
NODE_INDEX = "node"
"""The mirror's index of pods by ``spec.nodeName``."""
EVENT_REASON = "TaintManagerEviction"

POD_DELETIONS = Counter(
    "taint_eviction_controller_pod_deletions",
    "Total number of Pods deleted by TaintEvictionController since its start.",
)
POD_DELETION_SECONDS = Histogram(
    "taint_eviction_controller_pod_deletion_duration_seconds",
    "Latency, in seconds, between the time when a taint effect has been activated for the "
    "Pod and its deletion via TaintEvictionController.",
    buckets=(0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240),
)
"""Upstream's two metrics, with its help texts and buckets (5 ms to 4 min). The counter's
name gets ``_total`` from the client library."""


def pod_key(pod: MirrorObject) -> PodKey:
    return (pod.namespace, pod.name)


def _pod_spec(pod: MirrorObject) -> dict[str, Any]:
    return pod.object.get("spec") or {}


def by_node(obj: MirrorObject) -> Iterable[str]:
    """Index of pods by the node they are bound to."""
    if obj.type != PODS:
        return ()
    node = _pod_spec(obj).get("nodeName")
    return (node,) if node else ()


def taints_changed(change: steward.Change) -> bool:
    """Upstream's node handlers: an addition, a deletion, or a change of the node's
    ``NoExecute`` taints."""
    if change.kind is not steward.ChangeKind.MODIFIED or change.old is None:
        return True
    old = (change.old.object.get("spec") or {}).get("taints")
    new = (change.obj.object.get("spec") or {}).get("taints")
    return no_execute_taints(old) != no_execute_taints(new)


def message_ref(key: PodKey) -> dict[str, Any]:
    """What an Event is about: the pod by namespace and name only (upstream's reference
    carries neither uid nor resourceVersion)."""
    return {"metadata": {"namespace": key[0], "name": key[1]}}


class TaintEviction:
    """Decides and carries out evictions; see the module docs."""

    def __init__(self, ctx: steward.Context, clock: Any = time.monotonic) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.pods = ctx.client(PODS)
        self.events = ctx.event_recorder(NAME, about=PODS)
        self.evictions = Evictions()
        self.clock = clock

    def pod_changed(self, change: steward.Change) -> list[Request]:
        """Upstream's pod handlers: an addition, a deletion, or a change of the pod's
        tolerations or node queue the pod."""
        if change.kind is steward.ChangeKind.MODIFIED and change.old is not None:
            old, new = _pod_spec(change.old), _pod_spec(change.obj)
            if old.get("tolerations") == new.get("tolerations") and old.get("nodeName") == new.get(
                "nodeName"
            ):
                return []
        return [Request(change.obj.namespace, change.obj.name)]

    async def reconcile(self, request: Request) -> Result:
        """Sync a node (no namespace) or a pod (see the module docs)."""
        if not request.namespace:
            self.sync_node(request.name)
            return Result()
        return await self.sync_pod((request.namespace, request.name))

    def _cancelled(self, key: PodKey) -> None:
        log.info("cancelling the eviction of pod %s/%s", *key)
        self.events.event(
            message_ref(key),
            "Normal",
            EVENT_REASON,
            f"Cancelling deletion of Pod {key[0]}/{key[1]}",
        )

    def sync_node(self, name: str) -> None:
        """Decide for every pod on node ``name`` with its taints read once."""
        node = self.mirror.get(NODES, "", name)
        if node is None:
            log.debug("node %s is gone", name)
            return
        taints = no_execute_taints((node.object.get("spec") or {}).get("taints"))
        pods = self.mirror.by_index(PODS, NODE_INDEX, name)
        log.debug("node %s: %d NoExecute taints, %d pods", name, len(taints), len(pods))
        now = self.clock()
        for pod in pods:
            key = pod_key(pod)
            if self.evictions.process(key, _pod_spec(pod).get("tolerations"), taints, now):
                self._cancelled(key)
            eviction = self.evictions.get(key)
            if eviction is not None:
                self.ctx.enqueue(Request(*key), after=eviction.remaining(now))

    async def sync_pod(self, key: PodKey) -> Result:
        """Decide for one pod, and delete it when its eviction is due."""
        found = self.mirror.get(PODS, *key)
        if found is None:
            if self.evictions.cancel(key):
                self._cancelled(key)
            return Result()
        spec = _pod_spec(found)
        node_name = spec.get("nodeName")
        if not node_name:
            return Result()
        now = self.clock()
        node = self.mirror.get(NODES, "", node_name)
        if node is not None:
            taints = no_execute_taints((node.object.get("spec") or {}).get("taints"))
            if self.evictions.process(key, spec.get("tolerations"), taints, now):
                self._cancelled(key)
        eviction = self.evictions.get(key)
        if eviction is None:
            return Result()
        if eviction.fire_at > now:
            log.debug("pod %s/%s: eviction due in %.1fs", *key, eviction.remaining(now))
            return Result(requeue_after=eviction.remaining(now))
        await self.evict(key, eviction)
        return Result()

    async def evict(self, key: PodKey, eviction: Eviction) -> None:
        """Mark the pod (Event, condition) and delete it.

        Raises:
            ApiError: the read, the patch or the delete failed (retried with backoff).
        """
        namespace, name = key
        if not eviction.marked:
            log.info("deleting pod %s/%s", namespace, name)
            self.events.event(
                message_ref(key),
                "Normal",
                EVENT_REASON,
                f"Marking for deletion Pod {namespace}/{name}",
            )
            eviction.marked = True
        try:
            pod = await self.pods.get(namespace, name)
            condition = disruption_condition(pod, steward.format_time(steward.utc_now()))
            if condition is not None:
                await self.pods.patch(
                    namespace, name, status_patch(pod, condition), subresource="status"
                )
            await self.pods.delete(namespace, name, uid=pod["metadata"].get("uid"))
        except NotFoundError:
            log.info("pod %s/%s is gone already", namespace, name)
            self.evictions.done(key)
            return
        if self.evictions.get(key) is eviction:
            self.evictions.done(key)
        POD_DELETIONS.inc()
        POD_DELETION_SECONDS.observe(max(0.0, self.clock() - eviction.fire_at))
        log.info("deleted pod %s/%s", namespace, name)


CONTROLLER = (
    steward.ControllerBuilder[TaintEviction](NAME)
    .for_(NODES, taints_changed, metadata_only=True, fields=["spec.taints"])
    .watches_changes(
        PODS,
        TaintEviction.pod_changed,
        metadata_only=True,
        fields=["spec.nodeName", "spec.tolerations"],
    )
    .with_index(NODE_INDEX, by_node)
    .with_options(
        steward.ControllerOptions(max_concurrent_reconciles=WORKERS, queue_name=QUEUE_NAME)
    )
    .beside_upstream(None)
    .describe(
        "Steward's taint eviction controller: pods on nodes with NoExecute taints they do "
        "not tolerate are deleted at once, those that tolerate them for tolerationSeconds "
        "once that time is over (with the DisruptionTarget condition and "
        "TaintManagerEviction Events), as kube-controller-manager's "
        "taint-eviction-controller. --workers defaults to 8, as upstream runs it. Both would "
        "delete the same pods, so it must not run beside upstream's."
    )
    .complete(TaintEviction)
)
"""The taint eviction controller: nodes are the primary type (metadata and taints); pods
(metadata, node and tolerations) are watched and indexed by node."""
