"""The pod garbage collector: pods that nothing else will remove, force-deleted, as
upstream's ``pod-garbage-collector-controller`` (pkg/controller/podgc/gc_controller.go).

# A sweep
Every ``--pod-gc-check-period`` (upstream's ``gcCheckPeriod``, 20 s) the collector looks
at every pod and node in its mirror and, in upstream's order (decisions in
:mod:`.collection`):

1. terminated pods (any phase but Pending, Running and Unknown) beyond
   ``--terminated-pod-gc-threshold`` (12500; 0 or less turns this pass off): the evicted
   first, then the oldest by creation, then by name;
2. terminating pods (a deletion timestamp) bound to a node that is not Ready and carries
   the ``node.kubernetes.io/out-of-service`` taint;
3. orphaned pods, bound to a node that does not exist: a node missing from the mirror is
   quarantined for ``--pod-gc-quarantine-time`` (upstream's ``quarantineTime``, 40 s);
   at the first sweep after that, if it is still missing from the mirror, it is asked of
   the API server, and only when the API server says NotFound are its pods collected. A
   node that shows up again, or that the read fails for, leaves the quarantine (a later
   sweep quarantines it again if it is still missing);
4. terminating pods bound to no node.

A pod collected is first marked Failed when it has not finished (a strategic merge patch
of its status with its UID as a precondition; an orphaned pod also gets the condition
``DisruptionTarget`` with reason ``DeletionByPodGC``), then deleted with a grace period
of 0. Passes 1 and 2 delete concurrently, 3 and 4 one pod after the other, as upstream.
A failure (of the patch or the delete, NotFound included) is logged and counted; the pod
is looked at again at the next sweep. A pod collected by one pass is not tried again by
a later pass of the same sweep, nor, once deleted, by a later sweep while the mirror
still holds it (its deletion on its way, or a finalizer holding it): deleting it again
would change nothing, its grace period being 0 already.
Every pod tried is counted in ``pod_gc_collector_force_delete_pods_total`` and every
failure in ``pod_gc_collector_force_delete_pod_errors_total``, by ``namespace`` and
``reason`` (``terminated``, ``out-of-service``, ``orphaned``, ``unscheduled``), upstream's
metrics.

# Keys
Upstream's collector is a loop, not a queue of objects. Here the sweep is one key,
:data:`SWEEP`, which asks to be queued again one period after each sweep. Nodes are the
primary type, but none of their changes queues anything: the runtime queues every node
when the instance becomes active, and a node's key only queues the sweep. A pod's change
queues the sweep when none has run for three periods (a cluster without nodes; an
instance that was standing by). The sweep reads its mirror as it finds it (the runtime
waits for the mirror's sync before the first), as upstream reads its informers' listers.

# What it reads
Pods: metadata, ``spec.nodeName``, and ``status.phase``, ``reason``, ``conditions`` and
``observedGeneration``. Nodes: metadata, their taints' keys and their conditions' types and
statuses (so heartbeats reach no one). Both from the informer; the one direct read is the
GET of a quarantined node.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from prometheus_client import Counter

import steward
from steward import NODES, PODS, ApiError, FencedError, NotFoundError, Request, Result, utc_now
from steward.controllers.podgc.collection import (
    ORPHANED,
    OUT_OF_SERVICE,
    TERMINATED,
    UNSCHEDULED,
    Quarantine,
    failed_status_patch,
    missing_nodes,
    node_name,
    orphaned_condition,
    pod_key,
    terminated_over_threshold,
    terminating_out_of_service,
    unscheduled_terminating,
)
from steward.runtime.times import go_duration

log = logging.getLogger(__name__)

NAME = "podgc"
"""The controller's name with the manager (kube-controller-manager's alias of its
``pod-garbage-collector-controller``)."""
SWEEP = Request("*", "sweep")
"""The one key of a sweep (no pod or node has the namespace ``*``)."""
CHECK_PERIOD = timedelta(seconds=20)
"""Upstream's ``gcCheckPeriod``."""
QUARANTINE_TIME = timedelta(seconds=40)
"""Upstream's ``quarantineTime``."""
THRESHOLD = 12500
"""kube-controller-manager's default ``--terminated-pod-gc-threshold``."""
OVERDUE_PERIODS = 3
"""Periods without a sweep after which a pod's change queues one."""
POD_FIELDS = (
    "spec.nodeName",
    "status.phase",
    "status.reason",
    "status.conditions",
    "status.observedGeneration",
)
NODE_FIELDS = ("spec.taints.key", "status.conditions.type", "status.conditions.status")

DELETED = Counter(
    "pod_gc_collector_force_delete_pods_total",
    "Number of pods that are being forcefully deleted since the Pod GC Controller started.",
    ["namespace", "reason"],
)
ERRORS = Counter(
    "pod_gc_collector_force_delete_pod_errors_total",
    "Number of errors encountered when forcefully deleting the pods since the Pod GC "
    "Controller started.",
    ["namespace", "reason"],
)
"""Upstream's two metrics, with its names, help texts and labels."""


def _positive_duration(text: str) -> timedelta:
    value = go_duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def add_flags(parser: argparse.ArgumentParser) -> None:
    """kube-controller-manager's threshold flag, and two of Steward's for upstream's
    constants (tests shorten them)."""
    parser.add_argument(
        "--terminated-pod-gc-threshold",
        type=int,
        default=THRESHOLD,
        metavar="N",
        help="Number of terminated pods that can exist before the terminated pod garbage "
        "collector starts deleting terminated pods. If <= 0, the terminated pod garbage "
        f"collector is disabled. (default {THRESHOLD})",
    )
    parser.add_argument(
        "--pod-gc-check-period",
        type=_positive_duration,
        default=CHECK_PERIOD,
        metavar="DURATION",
        help="Steward's: time between two sweeps (upstream's constant gcCheckPeriod; a Go "
        "duration, default 20s)",
    )
    parser.add_argument(
        "--pod-gc-quarantine-time",
        type=_positive_duration,
        default=QUARANTINE_TIME,
        metavar="DURATION",
        help="Steward's: how long a node is missing from the informer before it is asked "
        "of the API server and its pods collected (upstream's constant quarantineTime; a Go "
        "duration, default 40s)",
    )


def never(change: steward.Change) -> bool:
    """No node change queues its key (see the module docs)."""
    return False


class PodGC:
    """Sweeps the pods; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.pods = ctx.client(PODS)
        self.nodes = ctx.client(NODES)
        self.threshold: int = ctx.flags.terminated_pod_gc_threshold
        self.period: float = ctx.flags.pod_gc_check_period.total_seconds()
        self.quarantine = Quarantine(
            ctx.flags.pod_gc_quarantine_time.total_seconds(), time.monotonic
        )
        self.last_sweep: float | None = None
        self.collected: set[str] = set()
        """The UIDs of the pods this collector deleted that the mirror still holds."""

    def overdue(self) -> bool:
        """No sweep has started for :data:`OVERDUE_PERIODS` periods (or ever)."""
        last = self.last_sweep
        return last is None or time.monotonic() - last > OVERDUE_PERIODS * self.period

    def pod_changed(self, change: steward.Change) -> list[Request]:
        """A pod's change queues the sweep only when it is overdue."""
        return [SWEEP] if self.overdue() else []

    async def reconcile(self, request: Request) -> Result:
        if request != SWEEP:
            # A node queued as the instance became active: the sweep starts (again).
            self.ctx.enqueue(SWEEP)
            return Result()
        self.last_sweep = time.monotonic()
        await self.sweep()
        return Result(requeue_after=self.period)

    async def sweep(self) -> None:
        """Upstream's ``gc``: the four passes, in its order."""
        pods = [obj.object for obj in self.mirror.objects(PODS)]
        self.collected &= {_uid(pod) for pod in pods}
        nodes = {obj.name: obj.object for obj in self.mirror.objects(NODES)}
        tried: set[tuple[str, str]] = set()
        if self.threshold > 0:
            doomed = terminated_over_threshold(pods, self.threshold)
            if doomed:
                log.info("garbage collecting %d terminated pods", len(doomed))
            await self.collect_all(doomed, TERMINATED, tried)
        doomed = terminating_out_of_service(pods, nodes.get)
        if doomed:
            log.info("garbage collecting %d terminating pods on out-of-service nodes", len(doomed))
        await self.collect_all(doomed, OUT_OF_SERVICE, tried)
        await self.collect_orphaned(pods, set(nodes), tried)
        for pod in unscheduled_terminating(pods):
            await self.collect(pod, UNSCHEDULED, tried)

    async def collect_all(
        self, pods: Sequence[Mapping[str, Any]], reason: str, tried: set[tuple[str, str]]
    ) -> None:
        await asyncio.gather(*(self.collect(pod, reason, tried) for pod in pods))

    async def collect_orphaned(
        self, pods: Sequence[Mapping[str, Any]], existing: set[str], tried: set[tuple[str, str]]
    ) -> None:
        """Pass 3: quarantine the missing nodes, then collect the pods of those whose
        quarantine is over and that the API server does not know either."""
        self.quarantine.add(missing_nodes(pods, existing))
        gone: set[str] = set()
        for name in self.quarantine.due():
            if name in existing:
                continue
            try:
                await self.nodes.get("", name)
            except NotFoundError:
                gone.add(name)
            except ApiError as err:
                log.error("getting node %s: %s", name, err)  # quarantined again next sweep
        for pod in pods:
            if node_name(pod) in gone:
                log.info(
                    "pod %s/%s: its node %s no longer exists, deleting",
                    *pod_key(pod),
                    node_name(pod),
                )
                await self.collect(pod, ORPHANED, tried, orphaned_condition())

    async def collect(
        self,
        pod: Mapping[str, Any],
        reason: str,
        tried: set[tuple[str, str]],
        condition: Mapping[str, str] | None = None,
    ) -> None:
        """Mark the pod Failed (unless it finished) and force-delete it; count it, and
        its failure. Losing the lease ends the sweep."""
        key = pod_key(pod)
        if key in tried or _uid(pod) in self.collected:
            return  # taken this sweep, or deleted already (with a grace period of 0)
        tried.add(key)
        namespace, name = key
        DELETED.labels(namespace, reason).inc()
        log.info("force deleting pod %s/%s (%s)", namespace, name, reason)
        try:
            patch = failed_status_patch(pod, utc_now(), condition)
            if patch is not None:
                await self.pods.patch(namespace, name, patch, subresource="status")
            # Upstream's metav1.NewDeleteOptions(0): no grace period, no precondition.
            await self.pods.delete(namespace, name, grace_period_seconds=0)
            self.collected.add(_uid(pod))
        except FencedError:
            raise
        except ApiError as err:
            ERRORS.labels(namespace, reason).inc()
            level = logging.INFO if isinstance(err, NotFoundError) else logging.ERROR
            log.log(level, "force deleting pod %s/%s (%s) failed: %s", namespace, name, reason, err)


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


CONTROLLER = (
    steward.ControllerBuilder[PodGC](NAME)
    .for_(NODES, never, metadata_only=True, fields=NODE_FIELDS)
    .watches_changes(PODS, PodGC.pod_changed, metadata_only=True, fields=POD_FIELDS)
    .flags(add_flags)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=1))
    .beside_upstream(None)
    .describe(
        "Steward's pod garbage collector, as kube-controller-manager's "
        "pod-garbage-collector-controller: every --pod-gc-check-period, terminated pods "
        "beyond --terminated-pod-gc-threshold (oldest first), terminating pods on "
        "out-of-service nodes, pods bound to nodes that no longer exist (after "
        "--pod-gc-quarantine-time) and terminating pods never scheduled are marked Failed "
        "and deleted with a grace period of 0. --workers defaults to 1. Both would delete "
        "the same pods, so it must not run beside upstream's."
    )
    .complete(PodGC)
)
"""The collector: nodes are the primary type (their keys only start the sweep); pods are
watched (their changes start an overdue sweep) and read."""
