"""The node lifecycle controller: node health from status heartbeats and Leases, the
not-ready/unreachable taints, zone disruption states and the pods of a dead node marked
not ready, as upstream's ``node-lifecycle-controller``
(pkg/controller/nodelifecycle/node_lifecycle_controller.go).

# Keys
One work queue (kube-controller-manager's ``node_lifecycle_controller``) holds four
kinds of key, each a job of upstream's goroutines:

- a node's name (``Request("", name)``), queued by every change of the node: its
  NoSchedule taints set from its conditions and ``spec.unschedulable``
  (:func:`~steward.controllers.nodelifecycle.taints.no_schedule_diff`), and its
  ``beta.kubernetes.io/os``/``arch`` labels kept equal to ``kubernetes.io/os``/``arch``
  (upstream's ``doNodeProcessingPassWorker``); a failure is retried with backoff;
- a pod (``Request(namespace, name)``), queued when a pod is bound to a node: marked not
  ready at once if its node is known not Ready (``processPod``);
- :data:`MONITOR`, the health pass over every node, queued again
  ``--node-monitor-period`` after each pass (``monitorNodeHealth``);
- :data:`NO_EXECUTE`, the pass over the zones' rate-limited taint queues
  (``doNoExecuteTaintingPass``), queued at the end of a health pass that leaves nodes
  waiting, and again when the next node is due (every 100 ms at most, upstream's period;
  not at all while no node waits or every waiting zone's rate is 0). Upstream's runs
  every 100 ms beside the health pass, so a node may be tainted in a pass whose end
  finds every zone down; here the zones' rates are always set first.

One periodic key rather than one per node: the pass needs every node at once (the zones'
states come from all of them, and the fully-disrupted-everywhere rule looks at every zone
before any node is tainted), as upstream's. A node key queues :data:`MONITOR` when no
pass has started for two periods (the first node after a start begins the loop, and a
loop lost to a worker pool restarted by the manager starts again).

# A health pass
For every node (eight at once): its health observed
(:func:`~steward.controllers.nodelifecycle.health.observe`), and past the grace period
its conditions set to Unknown (one strategic merge patch of ``status.conditions``,
conditional on the node's resourceVersion; a conflict reads the node afresh and tries
again, five times at most). Before that, the node's Lease is read from the API server:
if it is newer than the mirror's, the mirror is behind and the node is left for the next
pass (upstream's ``NodeControllerLeaseCircuitBreaker``, on by default in 1.37). Then by
its Ready condition: not Ready (False or Unknown) puts it in its zone's taint queue for
``not-ready`` or ``unreachable`` NoExecute (or swaps the one it has for the other at
once), Ready removes both and takes it out of the queue. A node that stopped being
Ready gets a ``NodeNotReady`` Event, and its pods' Ready condition is set to False
(the status subresource; a ``NodeNotReady`` Warning Event on each pod); a failure there
is retried at the next pass. Last, the zones' states
(:mod:`~steward.controllers.nodelifecycle.zones`) and the metrics
``node_collector_zone_size``, ``node_collector_zone_health`` and
``node_collector_unhealthy_nodes_in_zone``. A node first seen gets a ``RegisteredNode``
Event and loses any not-ready/unreachable NoExecute taint, a node gone a
``RemovingNode`` Event.

# What it reads
Nodes: metadata, ``spec.taints``, ``spec.unschedulable``, ``status.conditions``. Pods:
metadata, ``spec.nodeName`` and ``status.conditions``, indexed by node. Leases of
``kube-node-lease``: metadata and ``spec.renewTime``. All from the informer, but the
Lease read before a node is declared dead and a node read afresh after a conflict.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

import steward
from steward import LEASES, NODES, PODS, ApiError, ConflictError, NotFoundError, Request, Result
from steward.controllers.nodelifecycle import health as hl
from steward.controllers.nodelifecycle import taints as tt
from steward.controllers.nodelifecycle import zones as zn
from steward.controllers.nodelifecycle.tainter import PASS_PERIOD, TaintQueue
from steward.runtime.mirror import MirrorObject, StaleRead
from steward.runtime.times import format_time, go_duration, parse_time, utc_now

log = logging.getLogger(__name__)

NAME = "nodelifecycle"
"""The controller's name with the manager (kube-controller-manager's --controllers name)."""
QUEUE_NAME = "node_lifecycle_controller"
"""kube-controller-manager's name of the controller's node queue."""
WORKERS = 8
"""Keys handled at once: upstream's eight node workers (``nodeUpdateWorkerSize``)."""
NODE_LEASE_NAMESPACE = "kube-node-lease"
MONITOR = Request("", "")
"""The key of the health pass (no node has an empty name)."""
NO_EXECUTE = Request("", "/no-execute")
"""The key of the pass over the taint queues (no node name holds a slash)."""
HEALTH_RETRIES = 5
"""Tries of a node's health update (``NodeHealthUpdateRetry``)."""
TAINT_RETRIES = 5
"""Tries of a taint patch on conflicts (``UpdateTaintBackoff``'s steps)."""
PASS_WORKERS = 8
"""Nodes a health pass looks at once (upstream's ``nodeUpdateWorkerSize``)."""
LABELS_TO_MIRROR = (
    ("kubernetes.io/os", "beta.kubernetes.io/os"),
    ("kubernetes.io/arch", "beta.kubernetes.io/arch"),
)
"""(stable, deprecated) label pairs kept equal on every node (``labelReconcileInfo``)."""
COMPONENT = "node-controller"
"""The Events' source component, as upstream's recorder."""

NODE_FIELDS = ("spec.taints", "spec.unschedulable", "status.conditions")
POD_FIELDS = ("spec.nodeName", "status.conditions")
LEASE_FIELDS = ("spec.renewTime",)

ZONE_HEALTH = Gauge(
    "node_collector_zone_health", "Gauge measuring percentage of healthy nodes per zone.", ["zone"]
)
ZONE_SIZE = Gauge(
    "node_collector_zone_size", "Gauge measuring number of registered Nodes per zones.", ["zone"]
)
UNHEALTHY_NODES = Gauge(
    "node_collector_unhealthy_nodes_in_zone",
    "Gauge measuring number of not Ready Nodes per zones.",
    ["zone"],
)
EVICTIONS = Counter(
    "node_collector_evictions",
    "Number of Node evictions that happened since current instance of NodeController started.",
    ["zone"],
)
"""``node_collector_evictions_total``: a NoExecute taint put on a node by a zone's queue."""
NODE_HEALTH_SECONDS = Histogram(
    "node_collector_update_node_health_duration_seconds",
    "Duration in seconds for NodeController to update the health of a single node.",
    buckets=[0.001 * 4**i for i in range(8)],
)
ALL_NODES_HEALTH_SECONDS = Histogram(
    "node_collector_update_all_nodes_health_duration_seconds",
    "Duration in seconds for NodeController to update the health of all nodes.",
    buckets=[0.01 * 4**i for i in range(8)],
)
"""Upstream's metrics, with its names, help texts and buckets."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """kube-controller-manager's node lifecycle flags, with its defaults."""
    parser.add_argument(
        "--node-monitor-period",
        type=go_duration,
        default=timedelta(seconds=5),
        metavar="DURATION",
        help="the period for syncing NodeStatus (default 5s)",
    )
    parser.add_argument(
        "--node-monitor-grace-period",
        type=go_duration,
        default=timedelta(seconds=50),
        metavar="DURATION",
        help="how long a running node may be unresponsive before it is marked unhealthy "
        "(default 50s)",
    )
    parser.add_argument(
        "--node-startup-grace-period",
        type=go_duration,
        default=timedelta(seconds=60),
        metavar="DURATION",
        help="how long a starting node may be unresponsive before it is marked unhealthy "
        "(default 1m0s)",
    )
    parser.add_argument(
        "--node-eviction-rate",
        type=float,
        default=0.1,
        help="nodes per second tainted NoExecute when a zone is healthy (default 0.1)",
    )
    parser.add_argument(
        "--secondary-node-eviction-rate",
        type=float,
        default=0.01,
        help="nodes per second tainted NoExecute when a zone is unhealthy; 0 for zones of "
        "--large-cluster-size-threshold nodes or fewer (default 0.01)",
    )
    parser.add_argument(
        "--large-cluster-size-threshold",
        type=int,
        default=50,
        help="nodes from which a zone is large for the secondary rate (default 50)",
    )
    parser.add_argument(
        "--unhealthy-zone-threshold",
        type=float,
        default=0.55,
        help="fraction of a zone's nodes (at least 3) not Ready for the zone to be "
        "unhealthy (default 0.55)",
    )


def node_changed(change: steward.Change) -> bool:
    """Upstream's node handlers queue additions and updates; a deletion only forgets."""
    return change.kind is not steward.ChangeKind.DELETED


def _by_node(obj: MirrorObject) -> Iterable[str]:
    """Index of pods by the node they are bound to."""
    if obj.type != PODS:
        return ()
    node = (obj.object.get("spec") or {}).get("nodeName")
    return (node,) if node else ()


class _ShortCircuit(Exception):
    """The mirror's Lease of a node is behind the API server's: leave the node be."""


class NodeLifecycle:
    """The controller's state and its four kinds of key; see the module docs."""

    def __init__(self, ctx: steward.Context, now: Any = utc_now) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.nodes = ctx.client(NODES)
        self.pods = ctx.client(PODS)
        self.leases = ctx.client(LEASES)
        self.now = now
        flags = ctx.flags
        self.period: float = flags.node_monitor_period.total_seconds()
        self.monitor_grace: timedelta = flags.node_monitor_grace_period
        self.startup_grace: timedelta = flags.node_startup_grace_period
        self.rates = zn.Rates(
            flags.node_eviction_rate,
            flags.secondary_node_eviction_rate,
            flags.large_cluster_size_threshold,
        )
        self.unhealthy_threshold: float = flags.unhealthy_zone_threshold
        self.node_events = ctx.event_recorder(COMPONENT, about=NODES)
        self.pod_events = ctx.event_recorder(COMPONENT, about=PODS)
        self.health: dict[str, hl.NodeHealth] = {}
        self.known: dict[str, dict[str, Any]] = {}
        self.zone_states: dict[str, zn.ZoneState] = {}
        self.queues: dict[str, TaintQueue] = {}
        self.retry_pods: set[str] = set()
        self.last_pass = -float("inf")

    # Keys --------------------------------------------------------------------------------
    def pod_bound(self, change: steward.Change) -> list[Request]:
        """A pod newly bound to a node (added so, or its node changed) is queued."""
        if change.kind is steward.ChangeKind.DELETED:
            return []
        node = (change.obj.object.get("spec") or {}).get("nodeName")
        old = (change.old.object.get("spec") or {}).get("nodeName") if change.old else None
        if node and node != old:
            return [Request(change.obj.namespace, change.obj.name)]
        return []

    def forget(self, change: steward.Change) -> None:
        """A deleted node needs no retry of its pods (upstream's delete handler)."""
        if change.obj.type == NODES and change.kind is steward.ChangeKind.DELETED:
            self.retry_pods.discard(change.obj.name)

    async def reconcile(self, request: Request) -> Result:
        if request == MONITOR:
            return await self.monitor()
        if request == NO_EXECUTE:
            return await self.no_execute_pass()
        if request.namespace:
            await self.process_pod(request.namespace, request.name)
            return Result()
        if time.monotonic() - self.last_pass > 2 * self.period:
            self.last_pass = time.monotonic()
            self.ctx.enqueue(MONITOR)
        await self.no_schedule_pass(request.name)
        await self.reconcile_labels(request.name)
        return Result()

    # A node's NoSchedule taints and labels --------------------------------------------------
    async def no_schedule_pass(self, name: str) -> None:
        """Set the node's managed NoSchedule taints from its conditions
        (``doNoScheduleTaintingPass``).

        Raises:
            ApiError: the patch failed (retried with backoff).
        """
        found = self.mirror.get(NODES, "", name)
        if found is None:
            return
        node = found.object
        add, remove = tt.no_schedule_diff(node)
        if not add and not remove:
            return
        if not await self.swap(node, tt.stamped(add, self._stamp()), remove):
            raise RuntimeError(f"failed to swap the NoSchedule taints of node {name}")
        log.info(
            "node %s: NoSchedule taints added %s, removed %s",
            name,
            [t["key"] for t in add],
            [t["key"] for t in remove],
        )

    async def reconcile_labels(self, name: str) -> None:
        """Keep ``beta.kubernetes.io/os``/``arch`` equal to ``kubernetes.io/os``/``arch``
        (``reconcileNodeLabels``)."""
        found = self.mirror.get(NODES, "", name)
        if found is None:
            return
        labels = found.meta.labels or {}
        update = {
            old: labels[new]
            for new, old in LABELS_TO_MIRROR
            if new in labels and labels.get(old) != labels[new]
        }
        if not update:
            return
        await self.nodes.patch("", name, {"metadata": {"labels": update}}, patch_type="merge")
        log.info("node %s: labels %s set", name, sorted(update))

    # Taint writes ---------------------------------------------------------------------------
    async def swap(
        self,
        node: dict[str, Any],
        add: list[tt.Taint],
        remove: list[tt.Taint],
    ) -> bool:
        """Add ``add`` and remove ``remove`` in one patch of ``spec.taints``, conditional
        on the node's resourceVersion; a conflict reads the node afresh and tries again
        (``SwapNodeControllerTaint``). False when it failed (logged)."""
        name = node["metadata"]["name"]
        current: dict[str, Any] = node
        for attempt in range(TAINT_RETRIES):
            taints = (current.get("spec") or {}).get("taints") or []
            new = tt.swapped(taints, add, remove)
            if new is None:
                return True
            patch = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {"taints": new},
            }
            try:
                await self.nodes.patch("", name, patch)
                return True
            except ConflictError:
                log.debug("node %s: taints conflict (try %d)", name, attempt + 1)
            except NotFoundError:
                return False
            except ApiError as err:
                log.warning("node %s: taints not swapped: %s", name, err)
                return False
            try:
                current = await self.nodes.get("", name)
            except ApiError as err:
                log.warning("node %s: not read again for its taints: %s", name, err)
                return False
        log.warning("node %s: taints not swapped: conflicts %d times", name, TAINT_RETRIES)
        return False

    async def mark_reachable(self, node: dict[str, Any]) -> bool:
        """Remove the not-ready and unreachable NoExecute taints and take the node out of
        its zone's queue (``markNodeAsReachable``); False when the patch failed."""
        taints = (node.get("spec") or {}).get("taints") or []
        both = [tt.UNREACHABLE_NO_EXECUTE, tt.NOT_READY_NO_EXECUTE]
        if any(tt.exists(taints, t) for t in both):
            if not await self.swap(node, [], both):
                log.error("node %s: NoExecute taints not removed", node["metadata"]["name"])
                return False
            log.info(
                "node %s: not-ready/unreachable NoExecute taints removed", node["metadata"]["name"]
            )
        queue = self.queues.get(zn.zone_key(node["metadata"].get("labels")))
        if queue is not None:
            queue.remove(node["metadata"]["name"])
        return True

    def mark_for_tainting(self, node: dict[str, Any], status: str) -> bool:
        """Queue the node for its NoExecute taint (``markNodeForTainting``): forgotten
        first when it lacks the taint its status calls for, so that a node whose taint
        was removed behind the controller's back is queued again."""
        name = node["metadata"]["name"]
        queue = self._queue_of(node)
        taints = (node.get("spec") or {}).get("taints") or []
        wanted = tt.NOT_READY_NO_EXECUTE if status == "False" else tt.UNREACHABLE_NO_EXECUTE
        if not tt.exists(taints, wanted):
            queue.remove(name)
        return queue.add(name, node["metadata"].get("uid", ""))

    def _queue_of(self, node: dict[str, Any]) -> TaintQueue:
        zone = zn.zone_key(node["metadata"].get("labels"))
        queue = self.queues.get(zone)
        if queue is None:
            queue = self.queues[zone] = TaintQueue(self.rates.healthy)
        return queue

    def _add_zone(self, node: dict[str, Any]) -> None:
        zone = zn.zone_key(node["metadata"].get("labels"))
        if zone not in self.zone_states:
            self.zone_states[zone] = zn.ZoneState.INITIAL
            self.queues[zone] = TaintQueue(self.rates.healthy)
            EVICTIONS.labels(zone).inc(0)
            log.info("zone %r: initialised", zone)

    # The NoExecute pass ---------------------------------------------------------------------
    async def no_execute_pass(self) -> Result:
        """Taint the due nodes of every zone's queue, as its limiter allows."""
        for zone, queue in list(self.queues.items()):

            async def taint(name: str, uid: str, zone: str = zone) -> tuple[bool, float]:
                return await self._taint_no_execute(name, zone)

            await queue.attempt(taint)
        wait = min((q.next_due() for q in self.queues.values()), default=float("inf"))
        if wait == float("inf"):
            return Result()
        return Result(requeue_after=max(wait, PASS_PERIOD))

    async def _taint_no_execute(self, name: str, zone: str) -> tuple[bool, float]:
        try:
            found = self.mirror.get(NODES, "", name)
            node = found.object if found is not None else None
        except StaleRead:
            try:
                node = await self.nodes.get("", name)
            except NotFoundError:
                node = None
            except ApiError:
                return False, 0.05
        if node is None:
            log.info("node %s: gone, not tainted", name)
            return True, 0.0
        ready = hl.condition(node, "Ready")
        if ready is None:
            return False, 0.05
        status = ready.get("status")
        if status == "False":
            add, opposite = tt.NOT_READY_NO_EXECUTE, tt.UNREACHABLE_NO_EXECUTE
        elif status == "Unknown":
            add, opposite = tt.UNREACHABLE_NO_EXECUTE, tt.NOT_READY_NO_EXECUTE
        else:
            log.debug("node %s: Ready again, not tainted", name)
            return True, 0.0
        done = await self.swap(node, tt.stamped([add], self._stamp()), [opposite])
        if done:
            EVICTIONS.labels(zn.zone_key(node["metadata"].get("labels"))).inc()
            log.info("node %s: tainted %s:NoExecute", name, add["key"])
        return done, 0.0

    # Pods -----------------------------------------------------------------------------------
    async def process_pod(self, namespace: str, name: str) -> None:
        """A pod bound to a node known not Ready is marked not ready (``processPod``).

        Raises:
            RuntimeError: its node is not in the mirror, or the write failed (retried).
        """
        found = self.mirror.get(PODS, namespace, name)
        if found is None:
            return
        pod = found.object
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        health = self.health.get(node_name)
        if health is None:
            return
        if self.mirror.get(NODES, "", node_name) is None:
            raise RuntimeError(f"pod {namespace}/{name}: node {node_name} not found")
        if health.ready is None or health.ready.get("status") == "True":
            return
        await self.mark_pods_not_ready([pod], node_name)

    async def mark_pods_not_ready(self, pods: list[dict[str, Any]], node_name: str) -> None:
        """Set each pod's Ready condition to False (``MarkPodsNotReady``): a strategic
        merge patch of the status subresource, conditional on the pod's version, and a
        ``NodeNotReady`` Warning Event. Pods without a Ready condition are left as they
        are; a pod gone is no failure.

        Raises:
            RuntimeError: some write failed (each error logged).
        """
        failures = 0
        for pod in pods:
            if (pod.get("spec") or {}).get("nodeName") != node_name:
                continue
            ready = next(
                (
                    c
                    for c in (pod.get("status") or {}).get("conditions") or ()
                    if c.get("type") == "Ready"
                ),
                None,
            )
            if ready is None or ready.get("status") == "False":
                continue
            meta = pod["metadata"]
            patch = {
                "metadata": {"resourceVersion": meta["resourceVersion"]},
                "status": {
                    "conditions": [
                        {"type": "Ready", "status": "False", "lastTransitionTime": self._stamp()}
                    ]
                },
            }
            try:
                await self.pods.patch(meta["namespace"], meta["name"], patch, subresource="status")
            except NotFoundError:
                continue
            except ApiError as err:
                log.info(
                    "pod %s/%s: not marked not ready: %s", meta["namespace"], meta["name"], err
                )
                failures += 1
                continue
            log.info(
                "pod %s/%s: marked not ready (node %s)", meta["namespace"], meta["name"], node_name
            )
            self.pod_events.event(pod, "Warning", "NodeNotReady", "Node is not ready")
        if failures:
            raise RuntimeError(f"{failures} pods on node {node_name} not marked not ready")

    # The health pass -----------------------------------------------------------------------
    async def monitor(self) -> Result:
        """One health pass (``monitorNodeHealth``), then the next one period later."""
        self.last_pass = time.monotonic()
        started = time.monotonic()
        nodes = [obj.object for obj in self.mirror.objects(NODES)]
        try:
            await self._monitor(nodes)
        except StaleRead:
            raise
        except Exception:
            log.exception("health pass failed")
        ALL_NODES_HEALTH_SECONDS.observe(time.monotonic() - started)
        return Result(requeue_after=self.period)

    async def _monitor(self, nodes: list[dict[str, Any]]) -> None:
        names = {n["metadata"]["name"] for n in nodes}
        for node in nodes:
            name = node["metadata"]["name"]
            if name in self.known:
                self._add_zone(node)
                continue
            log.info("node %s: observed", name)
            self._node_event(node, "RegisteredNode", f"Registered Node {name} in Controller")
            self.known[name] = node
            self._add_zone(node)
            await self.mark_reachable(node)
        for name in [n for n in self.known if n not in names]:
            gone = self.known.pop(name)
            log.info("node %s: deleted", name)
            self._node_event(gone, "RemovingNode", f"Removing Node {name} from Controller")
            self.health.pop(name, None)
        ready_by_zone: dict[str, list[str | None]] = {}
        limit = asyncio.Semaphore(PASS_WORKERS)

        async def one(node: dict[str, Any]) -> None:
            async with limit:
                started = time.monotonic()
                try:
                    await self._update_node(node, ready_by_zone)
                finally:
                    NODE_HEALTH_SECONDS.observe(time.monotonic() - started)

        await asyncio.gather(*(one(node) for node in nodes))
        await self._handle_disruption(ready_by_zone, nodes)
        # The queues are taken once the zones' rates are set for this pass: a node that
        # went not Ready in a pass that finds every zone down is never tainted.
        if any(len(q) for q in self.queues.values()):
            self.ctx.enqueue(NO_EXECUTE)

    async def _update_node(
        self, node: dict[str, Any], ready_by_zone: dict[str, list[str | None]]
    ) -> None:
        name = node["metadata"]["name"]
        outcome: tuple[dict[str, Any], hl.Condition, hl.Condition | None] | None = None
        for _ in range(HEALTH_RETRIES):
            try:
                outcome = await self._try_update_health(node)
                break
            except _ShortCircuit as err:
                log.warning("node %s: health not updated: %s", name, err)
                return
            except ApiError as err:
                log.info("node %s: health update failed, reading it again: %s", name, err)
                try:
                    node = await self.nodes.get("", name)
                except ApiError as again:
                    log.error("node %s: not read again (deleted?): %s", name, again)
                    return
        if outcome is None:
            log.error("node %s: health not updated; none of its pods will be evicted", name)
            return
        node, observed, current = outcome
        labels = node["metadata"].get("labels")
        if not zn.excluded(labels):
            ready_by_zone.setdefault(zn.zone_key(labels), []).append(
                current.get("status") if current is not None else None
            )
        if current is not None:
            went_not_ready = current.get("status") != "True" and observed.get("status") == "True"
            try:
                pods = [p.object for p in self.mirror.by_index(PODS, "node", name)]
            except StaleRead as err:
                log.info("node %s: pods not listed: %s", name, err)
                if went_not_ready:
                    self.retry_pods.add(name)
                return
            await self._taint_based_eviction(node, current)
            if went_not_ready:
                self._node_event(node, "NodeNotReady", f"Node {name} status is now: NodeNotReady")
            if went_not_ready or (name in self.retry_pods and observed.get("status") != "True"):
                try:
                    await self.mark_pods_not_ready(pods, name)
                except RuntimeError as err:
                    log.warning("node %s: %s; retried at the next pass", name, err)
                    self.retry_pods.add(name)
                    return
        self.retry_pods.discard(name)

    async def _try_update_health(
        self, node: dict[str, Any]
    ) -> tuple[dict[str, Any], hl.Condition, hl.Condition | None]:
        """(the node as written, its observed Ready condition, its Ready condition now)
        (``tryUpdateNodeHealth``).

        Raises:
            _ShortCircuit: the mirror's Lease is behind.
            ApiError: the status patch failed.
        """
        name = node["metadata"]["name"]
        lease = self._lease(name)
        now = self.now()
        seen = hl.observe(
            self.health.get(name),
            node,
            lease,
            now,
            startup_grace=self.startup_grace,
            monitor_grace=self.monitor_grace,
        )
        self.health[name] = seen.health
        current = hl.condition(node, "Ready")
        if not seen.expired:
            return node, seen.observed_ready, current
        await self._check_lease(name, seen.health.lease)
        conditions, changed = hl.unknown_conditions(node, self.now())
        written = hl.with_conditions(node, conditions)
        current = hl.condition(written, "Ready")
        if hl.same_condition(current, seen.observed_ready):
            return node, seen.observed_ready, current
        patch = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "status": {"conditions": changed},
        }
        stored = await self.nodes.patch("", name, patch, subresource="status")
        log.info(
            "node %s: no heartbeat for %s; conditions %s set Unknown",
            name,
            now - seen.health.probe,
            [c["type"] for c in changed],
        )
        written["metadata"] = {
            **node["metadata"],
            "resourceVersion": stored["metadata"]["resourceVersion"],
        }
        self.health[name] = hl.NodeHealth(
            probe=seen.health.probe,
            ready_transition=self.now(),
            ready=current,
            lease=lease,
        )
        return written, seen.observed_ready, current

    def _lease(self, name: str) -> hl.Lease | None:
        found = self.mirror.get(LEASES, NODE_LEASE_NAMESPACE, name)
        if found is None:
            return None
        renew = parse_time((found.object.get("spec") or {}).get("renewTime"))
        return hl.Lease(renew, found.resource_version)

    async def _check_lease(self, name: str, seen: hl.Lease | None) -> None:
        """Before a node is declared dead: is the API server's Lease the one the
        mirror shows? (``NodeControllerLeaseCircuitBreaker``)"""
        try:
            live = await self.leases.get(NODE_LEASE_NAMESPACE, name)
        except NotFoundError:
            return
        except ApiError as err:
            raise _ShortCircuit(f"lease of node {name} not read: {err}") from err
        version = live["metadata"]["resourceVersion"]
        if version != (seen.version if seen is not None else ""):
            mirrored = self._lease(name)
            if mirrored is not None and mirrored.version == version:
                return  # the mirror has it, the node's health just saw it afresh
            raise _ShortCircuit(
                f"the informer's Lease (version {seen.version if seen else 'none'}) is "
                f"behind the API server's ({version})"
            )

    async def _taint_based_eviction(self, node: dict[str, Any], ready: hl.Condition) -> None:
        """``processTaintBaseEviction``."""
        name = node["metadata"]["name"]
        taints = (node.get("spec") or {}).get("taints") or []
        status = ready.get("status")
        if status == "False":
            if tt.exists(taints, tt.UNREACHABLE_NO_EXECUTE):
                if not await self.swap(
                    node,
                    tt.stamped([tt.NOT_READY_NO_EXECUTE], self._stamp()),
                    [tt.UNREACHABLE_NO_EXECUTE],
                ):
                    log.error("node %s: unreachable not swapped for not-ready; next pass", name)
            elif self.mark_for_tainting(node, "False"):
                log.info("node %s: not ready; queued for its NoExecute taint", name)
        elif status == "Unknown":
            if tt.exists(taints, tt.NOT_READY_NO_EXECUTE):
                if not await self.swap(
                    node,
                    tt.stamped([tt.UNREACHABLE_NO_EXECUTE], self._stamp()),
                    [tt.NOT_READY_NO_EXECUTE],
                ):
                    log.error("node %s: not-ready not swapped for unreachable; next pass", name)
            elif self.mark_for_tainting(node, "Unknown"):
                log.info("node %s: unresponsive; queued for its NoExecute taint", name)
        elif status == "True":
            await self.mark_reachable(node)

    async def _handle_disruption(
        self, ready_by_zone: dict[str, list[str | None]], nodes: list[dict[str, Any]]
    ) -> None:
        for zone, ready in ready_by_zone.items():
            size, healthy, unhealthy = zn.health_gauges(ready)
            ZONE_SIZE.labels(zone).set(size)
            ZONE_HEALTH.labels(zone).set(healthy)
            UNHEALTHY_NODES.labels(zone).set(unhealthy)
        plan = zn.handle_disruption(
            self.zone_states, ready_by_zone, self.rates, self.unhealthy_threshold
        )
        for zone in plan.gone:
            ZONE_SIZE.labels(zone).set(0)
            ZONE_HEALTH.labels(zone).set(100)
            UNHEALTHY_NODES.labels(zone).set(0)
        if plan.entered_full_disruption:
            log.info("every node is not Ready: entering the full disruption mode")
            for node in nodes:
                await self.mark_reachable(node)
        if plan.left_full_disruption:
            log.info("some nodes are Ready: leaving the full disruption mode")
            now = self.now()
            for name, health in list(self.health.items()):
                self.health[name] = hl.NodeHealth(
                    probe=now, ready_transition=now, ready=health.ready, lease=health.lease
                )
        for zone, state in plan.changed.items():
            log.info("zone %r: now %s", zone, state)
        for zone, qps in plan.rates.items():
            self._queue_for_zone(zone).swap_limiter(qps)
        self.zone_states = plan.states

    def _queue_for_zone(self, zone: str) -> TaintQueue:
        queue = self.queues.get(zone)
        if queue is None:
            queue = self.queues[zone] = TaintQueue(self.rates.healthy)
        return queue

    # Helpers ---------------------------------------------------------------------------------
    def _stamp(self) -> str:
        now = self.now()
        return format_time(now if isinstance(now, datetime) else utc_now())

    def _node_event(self, node: dict[str, Any], reason: str, message: str) -> None:
        meta = node["metadata"]
        ref = {"metadata": {"name": meta["name"], "uid": meta.get("uid", "")}}
        text = message if reason == "NodeNotReady" else f"Node {meta['name']} event: {message}"
        self.node_events.event(ref, "Normal", reason, text)


CONTROLLER = (
    steward.ControllerBuilder[NodeLifecycle](NAME)
    .for_(NODES, node_changed, metadata_only=True, fields=list(NODE_FIELDS))
    .watches_changes(PODS, NodeLifecycle.pod_bound, metadata_only=True, fields=list(POD_FIELDS))
    .reads(
        LEASES,
        field_selector=f"metadata.namespace={NODE_LEASE_NAMESPACE}",
        metadata_only=True,
        fields=list(LEASE_FIELDS),
    )
    .observe(NodeLifecycle.forget)
    .with_index("node", _by_node)
    .flags(add_flags)
    .with_options(
        steward.ControllerOptions(max_concurrent_reconciles=WORKERS, queue_name=QUEUE_NAME)
    )
    .beside_upstream(None)
    .describe(
        "Steward's node lifecycle controller: node health from status heartbeats and "
        "Leases (conditions set Unknown past --node-monitor-grace-period), the "
        "not-ready/unreachable NoExecute taints through rate-limited per-zone queues, "
        "the zones' disruption states, the NoSchedule taints of node conditions and "
        "spec.unschedulable, and the pods of a node no longer Ready marked not ready, "
        "as kube-controller-manager's nodelifecycle. Both would write the same nodes, "
        "so it must not run beside upstream's."
    )
    .complete(NodeLifecycle)
)
"""The node lifecycle controller: nodes are the primary type; pods are watched (bound
pods queued) and Leases of kube-node-lease read."""
