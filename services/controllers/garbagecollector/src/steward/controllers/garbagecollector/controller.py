"""The garbage collector: dependents deleted with their owners, or orphaned, over every type.

It watches the metadata of every type the API server serves with list, watch and delete
(less ``--gc-ignored-resources``: Events by default), followed as discovery changes
(:mod:`steward.runtime.everytype`), and keeps the ownership graph (:mod:`.graph`). Each
change updates the graph and queues the nodes to look at; the workers then act with the
API server's own, fresh answers, never the graph's alone:

- ``delete`` (upstream's attemptToDeleteItem): the object is read live (by its
  coordinates, its UID checked). Gone, or another UID: the node was a virtual owner that
  does not exist, and is removed from the graph (its dependents are queued). Waiting for
  its dependents (``foregroundDeletion``): when no dependent blocks it any more the
  finalizer is removed, else the blocking dependents are queued. Otherwise each owner
  reference is classified by a live read of the owner (cached when absent): *dangling*
  (gone, or another UID), *waiting* (the owner waits for its dependents and this one
  blocks it) or *solid*. With a solid owner, the dangling and waiting references are
  removed; with owners that wait for it, it is deleted in the foreground (after
  unblocking its own references when a dependent of its waits too: a cycle); with none
  left at all, it is deleted, with the propagation its own finalizers ask for. Every
  delete carries the UID as a precondition.
- ``orphan`` (attemptToOrphan): an owner deleted with the ``orphan`` finalizer has its
  reference removed from every dependent, then the finalizer removed.

Removing a finalizer is a JSON merge patch carrying the resource version read (retried on
conflict); removing owner references is a JSON merge patch of the remaining references
carrying the object's UID and resource version, so it never lands on a newer object.

# Invalid owners
A namespaced dependent naming an owner that lives in another namespace gets a Warning Event
``OwnerRefInvalidNamespace`` ("ownerRef [...] does not exist in namespace ...") and the
reference is dangling (the owner is looked for in the dependent's namespace). A
cluster-scoped dependent naming a namespaced owner is left alone, its key dropped: it can
never resolve (upstream's namespacedOwnerOfClusterScopedObjectErr).

# Keys and retries
The queue's keys are :class:`.graph.Work` (action, UID). A failure is retried with
client-go's backoff; a node not yet observed is looked at again until it is (upstream's
requeue of virtual nodes). What the runtime's queue metrics call the queue is the
controller's name, ``garbagecollector``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from typing import Any

from prometheus_client import Counter

import steward
from steward import ApiError, ConflictError, NotFoundError, Resource, Result
from steward.controllers.garbagecollector.graph import (
    FOREGROUND,
    ORPHAN,
    Graph,
    Identity,
    InvalidOwner,
    Node,
    Work,
)
from steward.runtime.discovery import Discovery, split_api_version
from steward.runtime.everytype import EveryType
from steward.runtime.mirror import Change, ChangeKind

log = logging.getLogger(__name__)

NAME = "garbagecollector"
"""The controller's name with the manager (kube-controller-manager's --controllers alias
of its garbage-collector-controller)."""
COMPONENT = "garbage-collector-controller"
"""The Events' source component, as upstream's."""
QUEUE = "garbage_collector_attempt_to_delete"
"""The work queue's name: upstream's queue of objects to check for deletion. Upstream keeps
the orphaning of an owner's dependents (``garbage_collector_attempt_to_orphan``) and the
graph's changes (``garbage_collector_graph_changes``) in queues of their own; here the
graph is fed from the mirror, and orphaning is work of this same queue."""
DEFAULT_IGNORED = frozenset({("", "events"), ("events.k8s.io", "events")})
"""Types never collected (upstream's DefaultIgnoredResources)."""
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
"""Accept header of a metadata-only read."""
SYNC_ERRORS = Counter(
    "garbagecollector_controller_resources_sync_error",
    "Readings of discovery that failed (upstream's metric of the same name).",
)
CONFLICT_RETRIES = 5
"""Attempts of a finalizer removal that meets a conflict (client-go's DefaultBackoff)."""


class VirtualDeleted(Exception):
    """The node's object does not exist: it left the graph (the key is done)."""


class ClusterScopedDependent(Exception):
    """A cluster-scoped object names a namespaced owner: it never resolves (done)."""


class MappingError(Exception):
    """A reference names a kind the API server does not serve (maybe not yet)."""


def _patch_refs(refs: list[dict[str, Any]], uid: str, version: str) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": refs or None, "uid": uid, "resourceVersion": version}}


class GarbageCollector:
    """The reconciler: the graph, and the workers' acts (see the module docs)."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.api = ctx.api
        self.graph = Graph()
        # The discovery that follows the types, shared: its readings every period keep the
        # kinds-to-resources mapping current without reading discovery a second time.
        self.discovery = ctx.types.discovery if ctx.types is not None else Discovery(ctx.api)
        self._recorders: dict[tuple[str, str], steward.EventRecorder] = {}
        if ctx.types is not None:
            ctx.types.on_error = SYNC_ERRORS.inc

    # Graph changes (on the event loop, in order) --------------------------------------
    def graph_change(self, change: Change) -> list[Work]:
        """Update the graph with one change; the nodes to look at."""
        obj = change.obj
        if change.kind is ChangeKind.DELETED:
            work = self.graph.delete(obj.meta)
        else:
            old = change.old.meta if change.old is not None else None
            work = self.graph.upsert(obj.type, obj.meta, old)
        self._record_invalid(self.graph.take_invalid())
        return work

    def _record_invalid(self, found: list[InvalidOwner]) -> None:
        for invalid in found:
            ident = invalid.dependent.identity
            group, version = split_api_version(ident.api_version)
            key = (ident.api_version, ident.kind)
            recorder = self._recorders.get(key)
            if recorder is None:
                recorder = self._recorders[key] = self.ctx.event_recorder(
                    COMPONENT, about=Resource(group, version, "", ident.kind)
                )
            body = {
                "metadata": {"namespace": ident.namespace, "name": ident.name, "uid": ident.uid}
            }
            recorder.event(body, "Warning", "OwnerRefInvalidNamespace", invalid.message())

    # Workers ----------------------------------------------------------------------------
    async def reconcile(self, work: Work) -> Result:
        node = self.graph.get(work.uid)
        if node is None:
            return Result()  # gone from the graph since it was queued
        if work.action == "orphan":
            await self._orphan(node)
            return Result()
        try:
            await self._attempt_delete(node)
        except (VirtualDeleted, ClusterScopedDependent):
            return Result()
        if not node.observed:
            # Not observed yet: look again until the mirror shows it or it is verified
            # absent (an owner created and deleted while a watch was re-established).
            return Result(requeue=True)
        return Result()

    def _enqueue(self, work: list[Work]) -> None:
        for item in work:
            self.ctx.enqueue(item)

    def _virtual_delete(self, identity: Identity) -> None:
        self._enqueue(self.graph.virtual_delete(identity))

    async def _attempt_delete(self, node: Node) -> None:
        if node.being_deleted and not node.deleting_dependents:
            return  # on its way; its deletion will queue its dependents
        identity = node.identity
        latest = await self._get(identity)
        if latest is None or (latest.get("metadata") or {}).get("uid") != identity.uid:
            self._virtual_delete(identity)
            raise VirtualDeleted
        if node.deleting_dependents:
            await self._deleting_dependents(node)
            return
        meta = latest.get("metadata") or {}
        refs = list(meta.get("ownerReferences") or ())
        if not refs:
            return
        solid, dangling, waiting = await self._classify(node, refs)
        if solid:
            if not dangling and not waiting:
                return
            gone = {str(r.get("uid", "")) for r in dangling + waiting}
            log.info("%s: removing references to owners %s", identity, sorted(gone))
            kept = [r for r in refs if r.get("uid") not in gone]
            await self._patch(identity, _patch_refs(kept, identity.uid, meta["resourceVersion"]))
        elif waiting and node.dependents:
            if any(dep.deleting_dependents for dep in node.dependents):
                # A dependent waits for this one while this one waits for its owner: unblock
                # this one's references, or the two would wait for each other.
                unblocked = [
                    {**r, "blockOwnerDeletion": False} if r.get("blockOwnerDeletion") else r
                    for r in refs
                ]
                await self._patch(
                    identity, _patch_refs(unblocked, identity.uid, meta["resourceVersion"])
                )
            await self._delete(identity, "Foreground")
        else:
            finalizers = meta.get("finalizers") or ()
            policy = (
                "Orphan"
                if ORPHAN in finalizers
                else "Foreground"
                if FOREGROUND in finalizers
                else "Background"
            )
            log.info("%s: every owner is gone; deleting it (%s)", identity, policy)
            await self._delete(identity, policy)

    async def _classify(
        self, node: Node, refs: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        solid: list[dict[str, Any]] = []
        dangling: list[dict[str, Any]] = []
        waiting: list[dict[str, Any]] = []
        for ref in refs:
            owner = await self._owner(node, ref)
            if owner is None:
                dangling.append(ref)
            elif ref.get("blockOwnerDeletion") and FOREGROUND in (
                (owner.get("metadata") or {}).get("finalizers") or ()
            ):
                waiting.append(ref)
            else:
                solid.append(ref)
        return solid, dangling, waiting

    async def _owner(self, node: Node, ref: dict[str, Any]) -> dict[str, Any] | None:
        """The owner a reference names, read live; None when it is dangling."""
        absent = Identity(
            ref.get("apiVersion", ""), ref.get("kind", ""), "", ref.get("name", ""), ref["uid"]
        )
        namespaced_absent = Identity(
            absent.api_version, absent.kind, node.identity.namespace, absent.name, absent.uid
        )
        if absent in self.graph.absent or namespaced_absent in self.graph.absent:
            return None
        resource = await self._resource(absent.api_version, absent.kind)
        if resource.namespaced and not node.identity.namespace:
            # Never resolves: upstream gives up on the key (and records nothing).
            log.info(
                "%s: a cluster-scoped object names a namespaced owner %s", node.identity, absent
            )
            raise ClusterScopedDependent
        key = namespaced_absent if resource.namespaced else absent
        try:
            owner = await self.api.arequest(
                "GET",
                resource.path(key.namespace, key.name),
                headers={"Accept": METADATA},
            )
        except NotFoundError:
            self.graph.absent.add(key)
            return None
        if (owner.get("metadata") or {}).get("uid") != key.uid:
            self.graph.absent.add(key)
            return None
        return owner

    async def _deleting_dependents(self, node: Node) -> None:
        blocking = node.blocking_dependents()
        if not blocking:
            await self._remove_finalizer(node.identity, FOREGROUND)
            return
        for dep in blocking:
            if not dep.deleting_dependents:
                self.ctx.enqueue(Work("delete", dep.identity.uid))

    async def _orphan(self, owner: Node) -> None:
        """Remove ``owner``'s reference from every dependent, then its ``orphan`` finalizer."""
        uid = owner.identity.uid

        async def release(dep: Node) -> None:
            latest = await self._get(dep.identity)
            if latest is None:
                return
            meta = latest.get("metadata") or {}
            refs = meta.get("ownerReferences") or ()
            kept = [r for r in refs if r.get("uid") != uid]
            if len(kept) == len(refs) or meta.get("uid") != dep.identity.uid:
                return
            await self._patch(
                dep.identity, _patch_refs(kept, dep.identity.uid, meta["resourceVersion"])
            )

        results = await asyncio.gather(
            *(release(d) for d in list(owner.dependents)), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise ApiError(
                f"orphaning the dependents of {owner.identity}: {len(failed)} failed, "
                f"the first: {failed[0]}"
            )
        await self._remove_finalizer(owner.identity, ORPHAN)

    # API ------------------------------------------------------------------------------
    async def _resource(self, api_version: str, kind: str) -> Resource:
        try:
            group, version = split_api_version(api_version)
        except ValueError as err:
            raise MappingError(str(err)) from err
        found = await self.discovery.find(group, version, kind)
        if found is None:
            raise MappingError(f"no resource of kind {kind!r} in {api_version!r} is served")
        return found

    def _path(self, resource: Resource, identity: Identity) -> str:
        namespace = identity.namespace if resource.namespaced else ""
        return resource.path(namespace, identity.name)

    async def _get(self, identity: Identity) -> dict[str, Any] | None:
        """The object's metadata now; None when it is not found."""
        resource = await self._resource(identity.api_version, identity.kind)
        try:
            return await self.api.arequest(
                "GET", self._path(resource, identity), headers={"Accept": METADATA}
            )
        except NotFoundError:
            return None

    async def _patch(self, identity: Identity, patch: dict[str, Any]) -> None:
        resource = await self._resource(identity.api_version, identity.kind)
        with contextlib.suppress(NotFoundError):
            await self.api.arequest(
                "PATCH",
                self._path(resource, identity),
                patch,
                content_type="application/merge-patch+json",
            )

    async def _delete(self, identity: Identity, policy: str) -> None:
        resource = await self._resource(identity.api_version, identity.kind)
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"uid": identity.uid},
            "propagationPolicy": policy,
        }
        with contextlib.suppress(NotFoundError):  # gone already: its deletion shows
            await self.api.arequest("DELETE", self._path(resource, identity), body)

    async def _remove_finalizer(self, identity: Identity, finalizer: str) -> None:
        for attempt in range(CONFLICT_RETRIES):
            latest = await self._get(identity)
            if latest is None:
                return
            meta = latest.get("metadata") or {}
            if meta.get("uid") != identity.uid:
                return
            finalizers = list(meta.get("finalizers") or ())
            if finalizer not in finalizers:
                return
            kept = [f for f in finalizers if f != finalizer]
            patch = {
                "metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": kept or None}
            }
            try:
                await self._patch(identity, patch)
                log.info("%s: finalizer %s removed", identity, finalizer)
                return
            except ConflictError:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * 5**attempt)


def _ignored_resources(text: str) -> frozenset[tuple[str, str]]:
    """``--gc-ignored-resources``: ``resource.group`` entries, comma-separated ("events"
    for the core group)."""
    found = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        resource, _, group = item.partition(".")
        found.add((group, resource))
    return frozenset(found)


def _add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gc-ignored-resources",
        type=_ignored_resources,
        default=None,
        metavar="RESOURCE[.GROUP],...",
        help="types never collected (default: events and events.events.k8s.io, as upstream)",
    )
    parser.add_argument(
        "--discovery-period",
        type=float,
        default=30.0,
        help="seconds between readings of discovery (default %(default)s, as upstream)",
    )


def _every_from_flags(flags: argparse.Namespace, spec: EveryType) -> EveryType:
    ignored = getattr(flags, "gc_ignored_resources", None)
    period = getattr(flags, "discovery_period", None) or spec.period
    return EveryType(
        spec.verbs,
        spec.ignored if ignored is None else ignored,
        period,
        spec.subscription,
    )


CONTROLLER = (
    steward.ControllerBuilder[GarbageCollector](NAME)
    .for_every_type(
        GarbageCollector.graph_change,  # type: ignore[arg-type]
        verbs=("list", "watch", "delete"),
        ignored=DEFAULT_IGNORED,
        from_flags=_every_from_flags,
    )
    .flags(_add_flags)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=20,
            queue_name=QUEUE,
            # Upstream's collector client has twice kube-controller-manager's QPS: "each
            # object deletion takes two API calls" (a read, then the delete).
            rate_limit_scale=(2.0, 1.0),
        )
    )
    .beside_upstream(None)
    .describe(
        "Steward's garbage collector: deletes the dependents of deleted owners "
        "(background and foreground cascades), orphans them when asked, over every "
        "type the API server serves with list, watch and delete, custom resources "
        "included. It must not run beside kube-controller-manager's "
        "garbage-collector-controller."
    )
    .complete(GarbageCollector)
)
"""The garbage collector: every type's metadata feeds the graph; keys are graph nodes."""
