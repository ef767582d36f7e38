"""The EndpointSlice controller: Services, their pods, nodes and slices from the mirror,
:mod:`.sync`'s decisions, and the writes to the API server (EndpointSlices, Events).

# Whose slices
The controller reads and writes only slices labelled ``endpointslice.kubernetes.io/
managed-by`` with its own value (``--managed-by``); slices of any other value are left
alone, as upstream's controller leaves them. The default is upstream's own
``endpointslice-controller.k8s.io`` (:data:`~.sync.MANAGED_BY`): in upstream's place the
controller is a drop-in replacement, keeping the slices upstream's wrote. Beside
upstream's it must have a value of its own, ``endpointslice-controller.steward.io``
(:data:`~.sync.STEWARD_MANAGED_BY`, the definition's flags for running beside upstream's,
which the local control plane gives it then), each controller writing its own slices for
every Service. ``--replace-managed-by`` names values whose slices it deletes for each
Service it syncs, once its own are written (a hand-over from another controller that is
off, e.g. Steward's own slices of a time it ran beside upstream's).

# A sync
A Service that is gone is forgotten (its slices go with it: they carry its controller
reference). A Service of type ExternalName, or without a selector, is left alone. Else,
unless the mirror may not yet show the sync's own earlier writes (below), the pods its
selector matches, its slices (those being deleted aside) and the nodes give the plan
(:func:`.sync.plan`), written in upstream's order: creations, updates, deletions.
Topology-hint Events from the plan are recorded on the Service.

# Stale mirror
A sync that would act on a mirror older than its own writes would write twice: create a
slice again, or delete one twice. Creations and deletions are expectations
(:attr:`steward.Context.expectations`, lowered by :meth:`EndpointSliceReconciler.observe`
as the mirror shows the slices appear and go, for the Service their service-name label
names): while any is pending the sync writes nothing and comes back with backoff. Updates
need nothing of the controller's own: the mirror's read-your-writes guard ends the sync
(:class:`steward.StaleRead`) while a slice it updated shows an older version, and queues
it again once the mirror caught up.

# Queueing
Every change of a Service queues it. A pod change queues the Services of its namespace
selecting its old or new labels when the change can move endpoints
(:func:`steward.endpoints.endpoints_changed`). A slice change queues its Service when the
slice is ours and the change is not the controller's own write (a generation it did not
write), when its managed-by or service-name label changed (old and new Service), and
when one of ours was deleted by someone else. A node change that matters to topology
hints (added, deleted, readiness or zone changed) recomputes the zones' CPU shares and
queues the Services whose hints now overload a zone, as upstream.

# What it reads
Services and EndpointSlices whole (an update is a copy of the mirror's slice); of a pod
only :data:`POD_FIELDS`, of a node only :data:`NODE_FIELDS`: a change touching none of
them never reaches the controller.

# Errors
A refused write ends the sync with the API server's error, after a Warning Event
``FailedToUpdateEndpointSlices`` on the Service, and the key is retried with backoff; a
create refused because the namespace is being deleted
(:func:`steward.namespace_terminating`) ends the sync quietly, writing nothing more (as
upstream). Creating or deleting a slice records no Event of its own (upstream records
none). Pods whose node is missing are left out of the slices written and then fail the
sync (so it is retried), unless the Service publishes not-ready addresses. After
:data:`MAX_RETRIES` failed syncs in a row the key is dropped (upstream's maxRetries)
until its next event.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from typing import Any

import steward
from steward import ENDPOINT_SLICES, NODES, PODS, SERVICES, ApiError, Request, Result
from steward.controllers.endpointslice import hints
from steward.controllers.endpointslice.sync import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MAX_ENDPOINTS_PER_SLICE,
    SERVICE_NAME_LABEL,
    STEWARD_MANAGED_BY,
    UPSTREAM_MANAGED_BY,
    Plan,
    Settings,
    Slice,
    owned_by,
    plan,
)

log = logging.getLogger(__name__)

NAME = "endpointslice"
"""The controller's name with the manager (kube-controller-manager's --controllers alias
of its endpointslice-controller)."""
COMPONENT = "endpoint-slice-controller"
"""The Events' source component, as upstream's."""
QUEUE = "endpoint_slice"
"""Upstream's work queue name (the ``name`` label of ``workqueue_*``)."""
MAX_RETRIES = 15
"""Failed syncs in a row after which a key is dropped until its next event (upstream's
maxRetries)."""
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 1000.0
"""A failed Service's retries: 1 s doubling to 1000 s (upstream's defaultSyncBackOff and
maxSyncBackOff)."""
POD_FIELDS = (*steward.endpoints.POD_FIELDS, "spec.nodeName")
"""What the controller reads of a pod: what ``steward.endpoints`` reads, and the node name
of its endpoint (:func:`.sync.endpoint_for`)."""
NODE_FIELDS = (
    "metadata.labels",
    "status.allocatable.cpu",
    "status.conditions.type",
    "status.conditions.status",
)
"""What the controller reads of a node: its labels (zone, control-plane roles), its
allocatable CPU and its Ready condition (:mod:`.hints`, :func:`.sync.endpoint_for`); so
neither heartbeats nor image lists reach it."""

Key = tuple[str, str]
"""(namespace, name) of a Service: the key of its expectations."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The controller's own flags: whose slices it writes, and how full they get."""
    parser.add_argument(
        "--managed-by",
        default=MANAGED_BY,
        help="the endpointslice.kubernetes.io/managed-by value of the slices this "
        f"controller writes; it touches no others (default {MANAGED_BY}, upstream's, "
        "for running in its place; beside kube-controller-manager's endpointslice-"
        f"controller give a value of its own, e.g. {STEWARD_MANAGED_BY})",
    )
    parser.add_argument(
        "--replace-managed-by",
        action="append",
        default=[],
        metavar="VALUE",
        help="also delete the slices of the Services this controller manages that carry "
        "this managed-by value, once its own are written (repeatable; its own "
        "--managed-by value is ignored here): for a hand-over from a controller that is "
        "off and has left its slices behind, never while it runs",
    )
    parser.add_argument(
        "--max-endpoints-per-slice",
        type=int,
        default=MAX_ENDPOINTS_PER_SLICE,
        help=f"most endpoints in one slice (default {MAX_ENDPOINTS_PER_SLICE}, as upstream)",
    )


def _service_index(obj: steward.MirrorObject) -> tuple[str, ...]:
    """Index of slices by ``namespace/service`` (their service-name label)."""
    name = obj.meta.labels.get(SERVICE_NAME_LABEL, "")
    return (f"{obj.namespace}/{name}",) if name else ()


def node_change_matters(change: steward.Change) -> bool:
    """Whether a node change can move topology hints: added, deleted, readiness or zone
    changed (upstream's node handlers)."""
    old = change.old
    if change.kind is not steward.ChangeKind.MODIFIED or old is None:
        return True
    return hints.node_topology(old.object) != hints.node_topology(change.obj.object)


class _OwnWrites:
    """The generation of every slice the controller last wrote (by UID) and the slices it
    deleted, so the events of its own writes do not queue their Service again
    (upstream's EndpointSliceTracker, for queueing only)."""

    def __init__(self) -> None:
        self._generations: dict[str, int] = {}
        self._deleted: set[str] = set()

    def wrote(self, answer: Mapping[str, Any]) -> None:
        meta = answer.get("metadata") or {}
        if meta.get("uid"):
            self._generations[str(meta["uid"])] = int(meta.get("generation") or 0)

    def deleting(self, uid: str) -> None:
        self._deleted.add(uid)

    def is_news(self, obj: steward.MirrorObject) -> bool:
        """Whether the slice (as the mirror now shows it) is at a generation the
        controller did not write."""
        written = self._generations.get(obj.meta.uid)
        return written is None or obj.meta.generation > written

    def gone(self, uid: str) -> bool:
        """The slice is gone: whether the controller deleted it (forgets it either way)."""
        self._generations.pop(uid, None)
        if uid in self._deleted:
            self._deleted.discard(uid)
            return True
        return False


class EndpointSliceReconciler:
    """Reconciles one Service's EndpointSlices by key; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.expectations = ctx.expectations
        self.events = ctx.event_recorder(COMPONENT)
        self.slices = ctx.children(ENDPOINT_SLICES)  # no Events: upstream records none
        self.client = ctx.client(ENDPOINT_SLICES)
        self.settings = Settings(
            managed_by=str(ctx.flags.managed_by),
            max_endpoints=int(ctx.flags.max_endpoints_per_slice),
        )
        self.triggers = steward.endpoints.TriggerTimes()
        self.topology = hints.TopologyCache()
        self._topology_stale = True
        # Never its own value: those slices are the ones it keeps.
        self.replaces = frozenset(str(v) for v in ctx.flags.replace_managed_by or ()) - {
            self.settings.managed_by
        }
        self.own = _OwnWrites()

    def _ours(self, obj: steward.MirrorObject) -> bool:
        return obj.meta.labels.get(MANAGED_BY_LABEL) == self.settings.managed_by

    def _replaced(self, obj: steward.MirrorObject) -> bool:
        return obj.meta.labels.get(MANAGED_BY_LABEL, "") in self.replaces

    # Events -----------------------------------------------------------------------------
    def observe(self, change: steward.Change) -> None:
        """Lower expectations as the mirror shows our slices (and those we replace)
        appear, get a deletion timestamp, or go; forget a deleted Service's.

        Not the runtime's ``owns(..., expect=True)``: that counts every slice the Service
        controls, upstream's too (running beside, its creations would lower ours), and
        only slices whose controller reference still resolves to the Service (a slice of
        a Service deleted and created again, which a sync deletes, would never lower its
        deletion). A slice counts here for the Service its service-name label names."""
        obj = change.obj
        if obj.type == SERVICES:
            if change.kind is steward.ChangeKind.DELETED:
                self.expectations.forget(obj.key)
            return
        if obj.type != ENDPOINT_SLICES or not (self._ours(obj) or self._replaced(obj)):
            return
        service = obj.meta.labels.get(SERVICE_NAME_LABEL, "")
        if not service:
            return
        key = (obj.namespace, service)
        if change.kind is steward.ChangeKind.ADDED:
            self.expectations.creation_observed(key)
        if obj.meta.HasField("deletion_timestamp") or change.kind is steward.ChangeKind.DELETED:
            self.expectations.deletion_observed(key, f"{obj.namespace}/{obj.name}")

    def services_of_pod(self, obj: steward.MirrorObject) -> list[Request]:
        """The Services of the pod's namespace whose selector matches its labels."""
        return steward.endpoints.services_selecting(self.mirror, obj)

    def service_of_slice(self, obj: steward.MirrorObject) -> list[Request]:
        """The Service of a slice change that is news (see the module docs, Queueing).

        Asked of the new state, of the old state of an update, and of a deleted slice's
        last state: which one it is shows in what the mirror holds now."""
        service = obj.meta.labels.get(SERVICE_NAME_LABEL, "")
        held = self.mirror.get(ENDPOINT_SLICES, obj.namespace, obj.name)
        if held is None or held.meta.uid != obj.meta.uid:  # deleted
            expected = self.own.gone(obj.meta.uid)
            return (
                [Request(obj.namespace, service)]
                if service and self._ours(obj) and not expected
                else []
            )
        if held.resource_version != obj.resource_version:  # the old state of an update
            keys: list[Request] = []
            now = held.meta.labels.get(SERVICE_NAME_LABEL, "")
            if now != service or self._ours(held) != self._ours(obj):
                keys += [Request(obj.namespace, s) for s in (service, now) if s]
            return keys
        if service and self._ours(obj) and self.own.is_news(obj):
            return [Request(obj.namespace, service)]
        return []

    def services_of_node(self, obj: steward.MirrorObject) -> list[Request]:
        """After a node change that matters to hints: the zones' CPU shares recomputed,
        and the Services whose hints now overload a zone (while the mirror's initial
        snapshot arrives, only marked for recomputation: every Service is synced then)."""
        self._topology_stale = True
        if not self.mirror.has_synced():
            return []
        self._refresh_topology()
        found = []
        for key in self.topology.overloaded_services():
            ns, _, name = key.partition("/")
            found.append(Request(ns, name))
        return found

    def _refresh_topology(self) -> None:
        if self._topology_stale:
            self.topology.set_nodes(n.object for n in self.mirror.objects(NODES))
            self._topology_stale = False

    # Reconcile ----------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Sync one Service's slices (the runtime retries a failure with backoff, at most
        :data:`MAX_RETRIES` times in a row)."""
        return await self._sync((request.namespace, request.name))

    async def _sync(self, key: Key) -> Result:
        ns, name = key
        found = self.mirror.get(SERVICES, ns, name)
        if found is None:
            self.triggers.forget(ns, name)
            self.topology.forget(f"{ns}/{name}")
            self.expectations.forget(key)
            return Result()
        service = found.object
        if not steward.endpoints.managed(service):
            return Result()
        if not self.expectations.satisfied(key):
            creations, deletions = self.expectations.pending(key)
            log.debug(
                "%s/%s: mirror not current (%d creations, %d deletions pending); later",
                ns,
                name,
                creations,
                deletions,
            )
            return Result(requeue=True)
        pods = steward.endpoints.selected_pods(self.mirror, service)
        indexed = self.mirror.by_index(ENDPOINT_SLICES, "service", f"{ns}/{name}")
        live = [s for s in indexed if not s.meta.HasField("deletion_timestamp")]
        slices = [s.object for s in live if self._ours(s)]
        # Computed on every sync, so the tracker follows the pods even when nothing is
        # written (as upstream).
        trigger_time = self.triggers.compute(service, pods)
        self._refresh_topology()
        decided = plan(
            service,
            pods,
            slices,
            self._node,
            settings=self.settings,
            topology=self.topology,
            trigger_time=trigger_time,
        )
        # Slices of a controller this one replaces go once ours are written (the writes
        # are ordered: creations, updates, deletions).
        decided.delete += [
            s.object for s in live if self._replaced(s) and owned_by(s.object, service)
        ]
        try:
            await self._write(service, key, decided)
        except ApiError as err:
            self._failed(service, steward.error_message(err))
            raise
        finally:
            for event in decided.events:
                self.events.event(service, event.type, event.reason, event.message)
        if decided.errors:
            message = "; ".join(decided.errors)
            self._failed(service, message)
            raise RuntimeError(message)
        return Result()

    def _node(self, name: str) -> dict[str, Any] | None:
        node = self.mirror.get(NODES, "", name) if name else None
        return None if node is None else node.object

    def _failed(self, service: dict[str, Any], message: str) -> None:
        meta = service["metadata"]
        self.events.event(
            service,
            "Warning",
            "FailedToUpdateEndpointSlices",
            f"Error updating Endpoint Slices for Service {meta['namespace']}/{meta['name']}: "
            f"{message}",
        )

    # Writes -------------------------------------------------------------------------------
    async def _write(self, service: dict[str, Any], key: Key, decided: Plan) -> None:
        """Creations (expected), updates, deletions (expected), in upstream's order; the
        first refusal raises. A namespace being deleted ends the writes quietly."""
        if decided.create and not await self._create(service, key, decided.create):
            log.debug("not creating slices in %s: the namespace is being deleted", key[0])
            return
        for body in decided.update:
            self.own.wrote(await self.client.update(body))
        if decided.delete:
            await self._delete(service, key, decided.delete)

    async def _create(self, service: dict[str, Any], key: Key, bodies: list[Slice]) -> bool:
        """Create ``bodies`` in slow-start batches, expected under ``key``; False when
        the namespace is being deleted (the rest are not sent, as upstream, and their
        expectations lowered; the refused one's waits for the Service's deletion)."""
        terminating = False

        async def one(i: int) -> None:
            nonlocal terminating
            if terminating:
                self.expectations.creation_observed(key)  # never sent
                return
            created = await self.slices.create(service, bodies[i])
            if created is None:
                terminating = True
            else:
                self.own.wrote(created)

        outcome = await self.expectations.create(key, len(bodies), one)
        if outcome.errors:
            raise outcome.errors[0]
        return not terminating

    async def _delete(self, service: dict[str, Any], key: Key, victims: list[Slice]) -> None:
        """Delete ``victims`` at once, expected under ``key``; the first refusal raises."""

        async def one(i: int) -> None:
            uid = str(victims[i]["metadata"].get("uid") or "")
            self.own.deleting(uid)
            try:
                await self.slices.delete(service, victims[i])
            except steward.NotFoundError:
                raise
            except ApiError:
                self.own.gone(uid)  # not deleted: a later deletion is someone else's
                raise

        names = [f"{key[0]}/{s['metadata']['name']}" for s in victims]
        outcome = await self.expectations.delete(key, names, one)
        if outcome.errors:
            raise outcome.errors[0]


CONTROLLER = (
    steward.ControllerBuilder[EndpointSliceReconciler](NAME)
    .for_(SERVICES)
    .watches(
        PODS,
        EndpointSliceReconciler.services_of_pod,
        steward.endpoints.pod_change_matters,
        fields=POD_FIELDS,
        # Only pods some Service selects: a Job's pods never reach the controller.
        selected_by=(SERVICES, "spec.selector"),
    )
    # Whole: an update is a copy of the slice as the mirror holds it.
    .watches(ENDPOINT_SLICES, EndpointSliceReconciler.service_of_slice)
    .watches(
        NODES, EndpointSliceReconciler.services_of_node, node_change_matters, fields=NODE_FIELDS
    )
    .observe(EndpointSliceReconciler.observe)
    .with_index("service", _service_index)
    .with_index(steward.endpoints.LABEL_INDEX, steward.endpoints.index_pod_labels)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=5,
            max_retries=MAX_RETRIES,
            queue_name=QUEUE,
            backoff_base_seconds=BACKOFF_BASE_SECONDS,
            backoff_max_seconds=BACKOFF_MAX_SECONDS,
        )
    )
    .flags(add_flags)
    # Beside upstream's, slices of its own; alone, upstream's value (the default), and the
    # slices it wrote beside upstream's before a hand-over are deleted once its own are.
    .beside_upstream(
        [f"--managed-by={STEWARD_MANAGED_BY}"],
        alone=[f"--replace-managed-by={STEWARD_MANAGED_BY}"],
    )
    .describe(
        "Steward's EndpointSlice controller: keeps the discovery.k8s.io/v1 EndpointSlices "
        "of every Service with a selector in line with the Service's pods (packed at most "
        "--max-endpoints-per-slice to a slice, one set per address type, with topology "
        "hints). It writes only slices labelled with its --managed-by value: upstream's "
        f"by default ({UPSTREAM_MANAGED_BY}), for running in the place of "
        "kube-controller-manager's endpointslice-controller; with a value of its own it "
        "runs beside it."
    )
    .complete(EndpointSliceReconciler)
)
"""The EndpointSlice controller: Services are the primary type; pods map to the Services
selecting them (old and new labels), slices to their Service, nodes to the Services whose
topology hints they overload. Slices are indexed by Service."""
