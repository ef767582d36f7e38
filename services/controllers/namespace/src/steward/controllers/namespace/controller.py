"""The namespace controller: a deleted namespace's content removed through discovery, then
the namespace finalized, as upstream's ``namespace-controller``.

# A sync
A namespace without ``deletionTimestamp`` is left alone. One being deleted is read afresh
from the API server (several controllers edit a namespace while it terminates) and:

1. its phase becomes ``Terminating`` unless it is already (status update; a conflict
   reads it again and retries);
2. once ``spec.finalizers`` is empty, nothing more is done (upstream's ``finalized``:
   with other finalizers alone the content is still deleted, and finalizing removes
   nothing);
3. discovery (aggregated, read afresh) gives every namespaced resource in its preferred
   version that supports ``delete``; group versions it could not discover become
   ``NamespaceDeletionDiscoveryFailure`` and the rest are deleted all the same;
4. pods first: ``deletecollection`` (Background propagation) where the type supports it,
   else a metadata list and one delete each, then a metadata list of what remains. While
   any pod remains, the conditions are written and the sync ends there, so a
   terminating pod keeps its ConfigMaps and Secrets (upstream's ordered deletion);
5. then every other type the same way;
6. the five conditions (:mod:`.deletion`) are written to the status when they changed
   (a refused write is logged, as upstream);
7. if anything failed the sync fails (retried with backoff, at most a minute apart); if
   something remains, it is looked at again after ``estimate / 2 + 1`` seconds; else
   ``kubernetes`` is removed from ``spec.finalizers`` (PUT ``/finalize``), after which
   kube-apiserver deletes the namespace once its other finalizers are gone.

The estimate is the longest grace period of the pods not yet terminal, for as long as
that has not passed since the namespace's deletion; 15 s when what remains has
finalizers. Content that remains with neither is an error
(``NamespaceDeletionContentFailure``).

# Queueing
Only namespaces being deleted are queued, on every change (add, update, the resync), and
each change is acted on five seconds after it arrived (upstream's
``namespaceDeletionGracePeriod``: HA API servers see the deletion, and last-moment
creations reach every etcd member, before the content is listed).

# What it reads
Namespaces whole, from the informer (the key and the deletion mark); everything else
with direct calls: the namespace itself, discovery, metadata lists, the pods.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import steward
from steward import (
    NAMESPACES,
    ApiError,
    ApiStatusError,
    ConflictError,
    NotFoundError,
    Request,
    Resource,
    Result,
    error_message,
    format_time,
    parse_time,
    utc_now,
)
from steward.controllers.namespace.deletion import (
    PODS,
    ConditionUpdater,
    Remaining,
    Totals,
    UnexpectedContent,
    allowed_estimate,
    discovery_failure_message,
    finalized_spec,
    group_version_text,
    parse_group_version,
    pods_estimate,
    remaining_of,
    requeue_seconds,
)
from steward.runtime.discovery import ApiResource, Discovery

log = logging.getLogger(__name__)

NAME = "namespace"
"""The controller's name with the manager (kube-controller-manager's --controllers name
of its namespace-controller), also its work queue's name."""
RATE_LIMIT_SCALE = (20.0, 100.0)
"""The client's ``--kube-api-qps`` and ``--kube-api-burst`` multipliers, as upstream's
(cmd/kube-controller-manager/app/core.go: ``QPS *= 20``, ``Burst *= 100``)."""
WORKERS = 10
"""Namespaces synced at once (``--concurrent-namespace-syncs``)."""
SYNC_PERIOD = 300.0
"""Seconds between two resyncs (``--namespace-sync-period``, 5 minutes)."""
DELETION_GRACE_PERIOD = 5.0
"""Seconds between a change of a namespace being deleted and its sync (upstream's
``namespaceDeletionGracePeriod``)."""
MAX_BACKOFF = 60.0
"""The longest retry delay of a failing namespace (upstream's rate limiter: at least every
minute)."""
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
"""The Accept header of a metadata-only list."""
BACKGROUND = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
"""Every delete's options: the garbage collector removes dependents in the background
rather than orphaning them."""


class SyncFailed(Exception):
    """Some of a namespace's content could not be discovered or deleted (the sync is retried
    with backoff); the text lists every failure."""


def _is_deleting(obj: steward.MirrorObject) -> bool:
    return obj.meta.deletion_timestamp is not None


def being_deleted(change: steward.Change) -> bool:
    """Upstream's enqueue filter: only namespaces with a deletion mark, never a deletion."""
    return change.kind is not steward.ChangeKind.DELETED and _is_deleting(change.obj)


def _unsupported(err: ApiStatusError) -> bool:
    # MethodNotSupported, or a literal NotFound of a type that serves no collection verbs
    # (kubernetes/kubernetes#22413): either way the operation is not supported.
    return err.status in (404, 405)


class NamespaceReconciler:
    """Deletes one namespace's content and finalizes it; see the module docs."""

    def __init__(self, ctx: steward.Context, clock: Callable[[], float] = time.monotonic) -> None:
        self.mirror = ctx.mirror
        self.api = ctx.api
        self.namespaces = ctx.client(NAMESPACES)
        self.discovery = Discovery(ctx.api)
        self.clock = clock
        self.changed_at: dict[str, float] = {}
        """When each namespace being deleted last changed (monotonic seconds)."""

    # Queueing -------------------------------------------------------------------------
    def observe(self, change: steward.Change) -> None:
        """Note when a namespace being deleted changed, so its sync waits
        :data:`DELETION_GRACE_PERIOD` from then; forget it once it is gone."""
        if change.kind is steward.ChangeKind.DELETED:
            self.changed_at.pop(change.obj.name, None)
        elif _is_deleting(change.obj):
            self.changed_at[change.obj.name] = self.clock()

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Sync one namespace (see the module docs)."""
        name = request.name
        found = self.mirror.get(NAMESPACES, "", name)
        if found is None:
            log.info("namespace %s has been deleted", name)
            self.changed_at.pop(name, None)
            return Result()
        if not _is_deleting(found):
            return Result()
        wait = self.changed_at.get(name, float("-inf")) + DELETION_GRACE_PERIOD - self.clock()
        if wait > 0:
            return Result(requeue_after=wait)
        started = time.monotonic()
        try:
            estimate = await self.delete(name)
        finally:
            log.debug("finished syncing namespace %s in %.3fs", name, time.monotonic() - started)
        if estimate > 0:
            after = requeue_seconds(estimate)
            log.debug("content remaining in namespace %s; waiting %gs", name, after)
            return Result(requeue_after=after)
        return Result()

    async def delete(self, name: str) -> int:
        """Upstream's ``Delete``: the estimate in seconds while content remains, else 0
        once the namespace is finalized (or needs nothing).

        Raises:
            SyncFailed: discovery or a deletion failed (the conditions say which).
            ApiError: the namespace could not be read or written.
        """
        try:
            namespace = await self.namespaces.get("", name)
        except NotFoundError:
            return 0
        if not (namespace.get("metadata") or {}).get("deletionTimestamp"):
            return 0
        try:
            namespace = await self._retry_on_conflict(namespace, self._mark_terminating)
        except NotFoundError:
            return 0
        meta = namespace.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            return 0
        if not (namespace.get("spec") or {}).get("finalizers"):
            return 0  # finalized already
        estimate = await self.delete_all_content(namespace)
        if estimate > 0:
            return estimate
        # NotFound: another controller with the same token finished it.
        with contextlib.suppress(NotFoundError):
            await self._retry_on_conflict(namespace, self._finalize)
        log.info("namespace %s: content removed, finalized", name)
        return 0

    # The namespace ----------------------------------------------------------------------
    async def _retry_on_conflict(
        self, namespace: dict[str, Any], write: Callable[[dict[str, Any]], Any]
    ) -> dict[str, Any]:
        latest = namespace
        while True:
            try:
                result: dict[str, Any] = await write(latest)
                return result
            except ConflictError:
                previous = latest
                latest = await self.namespaces.get("", (latest.get("metadata") or {})["name"])
                if (previous.get("metadata") or {}).get("uid") != (
                    latest.get("metadata") or {}
                ).get("uid"):
                    raise ApiError("namespace uid has changed across retries") from None

    async def _mark_terminating(self, namespace: dict[str, Any]) -> dict[str, Any]:
        status = namespace.get("status") or {}
        if status.get("phase") == "Terminating":
            return namespace
        body = steward.copy_json(namespace)
        body.setdefault("status", {})["phase"] = "Terminating"
        result: dict[str, Any] = await self.namespaces.update(body, subresource="status")
        return result

    async def _finalize(self, namespace: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": namespace.get("metadata") or {},
            "spec": {**(namespace.get("spec") or {}), "finalizers": finalized_spec(namespace)},
        }
        try:
            result: dict[str, Any] = await self.namespaces.update(body, subresource="finalize")
        except NotFoundError:
            return namespace  # removed already
        return result

    async def _write_conditions(self, namespace: dict[str, Any], updater: ConditionUpdater) -> None:
        if not updater.update(namespace.setdefault("status", {})):
            return
        name = namespace["metadata"]["name"]
        try:
            await self.namespaces.update(namespace, subresource="status")
        except ApiError as err:  # upstream logs it; the next sync writes them again
            log.warning("couldn't update status condition for namespace %s: %s", name, err)

    # The content ------------------------------------------------------------------------
    async def deletable(
        self, updater: ConditionUpdater, errors: list[str]
    ) -> dict[Resource, frozenset[str]]:
        """The namespaced resources to delete (preferred versions that support
        ``delete``) with their verbs; what failed is noted in ``updater`` and ``errors``."""
        try:
            found = await self.discovery.read()
        except ApiError as err:
            errors.append(str(err))
            updater.discovery_failed(error_message(err))
            return {}
        if found.failed:
            errors.append(discovery_failure_message(found.failed))
            updater.discovery_failed(discovery_failure_message(found.failed))
        resources: list[ApiResource] = [
            r for r in found.preferred() if r.resource.namespaced and r.supports("delete")
        ]
        for res in resources:
            try:
                parse_group_version(group_version_text(res.resource.group, res.resource.version))
            except ValueError as err:  # one unparseable group version: nothing is deleted
                errors.append(str(err))
                updater.group_version_failed(str(err))
                return {}
        return {r.resource: r.verbs for r in resources}

    async def delete_all_content(self, namespace: dict[str, Any]) -> int:
        """Delete everything in the namespace, pods first, and write the conditions; the
        estimate.

        Raises:
            SyncFailed: something could not be discovered or deleted.
        """
        meta = namespace["metadata"]
        name = meta["name"]
        deleted_at = parse_time(meta["deletionTimestamp"]) or utc_now()
        updater = ConditionUpdater(format_time(utc_now()))
        errors: list[str] = []
        estimate = 0
        totals = Totals()
        resources = await self.deletable(updater, errors)
        if PODS in resources:
            remaining = await self._delete_type(
                PODS, resources[PODS], name, deleted_at, updater, errors, pods=True
            )
            estimate = max(estimate, remaining.estimate)
            totals.add(PODS, remaining)
            if totals.by_resource.get(PODS, 0) > 0:
                log.debug("namespace %s: pods remain, other content waits", name)
                # As upstream: the remaining totals are not part of these conditions.
                await self._write_conditions(namespace, updater)
                return self._outcome(name, estimate, errors)
        for resource, verbs in resources.items():
            if resource == PODS:
                continue
            remaining = await self._delete_type(resource, verbs, name, deleted_at, updater, errors)
            estimate = max(estimate, remaining.estimate)
            totals.add(resource, remaining)
        updater.content_totals(totals)
        await self._write_conditions(namespace, updater)
        return self._outcome(name, estimate, errors)

    @staticmethod
    def _outcome(name: str, estimate: int, errors: list[str]) -> int:
        if errors:
            raise SyncFailed(f"deletion of namespace {name} failed: {'; '.join(errors)}")
        return estimate

    async def _delete_type(
        self,
        resource: Resource,
        verbs: frozenset[str],
        namespace: str,
        deleted_at: datetime,
        updater: ConditionUpdater,
        errors: list[str],
        *,
        pods: bool = False,
    ) -> Remaining:
        try:
            return await self.delete_content(resource, verbs, namespace, deleted_at)
        except UnexpectedContent as err:
            text, remaining = str(err.args[0]), err.args[1]
            errors.append(text)
            updater.delete_content_failed(text)
            return remaining  # type: ignore[no-any-return]
        except _ContentError as err:
            text = str(err.args[0])
            errors.append(
                f"failed to delete pods for namespace: {namespace}, err: {text}" if pods else text
            )
            updater.delete_content_failed(text)
            return err.args[1]  # type: ignore[no-any-return]

    async def delete_content(
        self, resource: Resource, verbs: frozenset[str], namespace: str, deleted_at: datetime
    ) -> Remaining:
        """Delete every object of ``resource`` in ``namespace``; what remains.

        Raises:
            UnexpectedContent: objects remain with nothing to wait for.
            _ContentError: a request failed (its text, and the estimate so far).
        """
        estimate = 0
        try:
            if resource == PODS:
                listed = await self.api.arequest("GET", PODS.path(namespace))
                estimate = pods_estimate(listed.get("items") or ())
            estimate = allowed_estimate(estimate, deleted_at, utc_now())
        except ApiError as err:
            raise _ContentError(_text(err), Remaining()) from err
        try:
            if not await self._delete_collection(resource, verbs, namespace):
                await self._delete_each(resource, verbs, namespace)
            items = await self._list(resource, verbs, namespace)
        except ApiError as err:
            raise _ContentError(_text(err), Remaining(estimate)) from err
        if items is None:
            return Remaining(estimate)
        return remaining_of(resource, namespace, items, estimate)

    async def _delete_collection(
        self, resource: Resource, verbs: frozenset[str], namespace: str
    ) -> bool:
        """Whether the type supports deletecollection (then everything was asked to go)."""
        if "deletecollection" not in verbs:
            return False
        try:
            await self.api.arequest("DELETE", resource.path(namespace), BACKGROUND)
        except ApiStatusError as err:
            if _unsupported(err):
                return False
            raise
        return True

    async def _list(
        self, resource: Resource, verbs: frozenset[str], namespace: str
    ) -> list[dict[str, Any]] | None:
        """The metadata of every object of the type in the namespace (None: the type
        cannot be listed)."""
        if "list" not in verbs:
            return None
        try:
            listed = await self.api.arequest(
                "GET", resource.path(namespace), headers={"Accept": METADATA_LIST}
            )
        except ApiStatusError as err:
            if _unsupported(err):
                return None
            raise
        return list(listed.get("items") or ())

    async def _delete_each(self, resource: Resource, verbs: frozenset[str], namespace: str) -> None:
        items = await self._list(resource, verbs, namespace)
        for item in items or ():
            item_name = (item.get("metadata") or {}).get("name", "")
            try:
                await self.api.arequest("DELETE", resource.path(namespace, item_name), BACKGROUND)
            except ApiStatusError as err:
                if not _unsupported(err):
                    raise


class _ContentError(Exception):
    """A request of a type's deletion failed: ``args`` are its text (as the condition
    shows it) and the :class:`Remaining` known so far."""


def _text(err: ApiError) -> str:
    return err.message if isinstance(err, ApiStatusError) else str(err)


CONTROLLER = (
    steward.ControllerBuilder[NamespaceReconciler](NAME)
    .for_(NAMESPACES, being_deleted)
    .observe(NamespaceReconciler.observe)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=WORKERS,
            resync_period=SYNC_PERIOD,
            backoff_max_seconds=MAX_BACKOFF,
            # Upstream's namespace controller has a client of its own with 20 times
            # kube-controller-manager's QPS and 100 times its burst ("very chatty": each
            # sync lists and deletes every type of the namespace).
            rate_limit_scale=RATE_LIMIT_SCALE,
        )
    )
    .beside_upstream(None)
    .describe(
        "Steward's namespace controller: deletes the content of a namespace being deleted "
        "(every namespaced type discovery serves, pods first) and then removes the "
        "'kubernetes' finalizer, as kube-controller-manager's namespace-controller. "
        "--workers is upstream's --concurrent-namespace-syncs (10), --resync-period its "
        "--namespace-sync-period (300 s). Both would finalize the same namespaces, so it "
        "must not run beside upstream's."
    )
    .complete(NamespaceReconciler)
)
"""The namespace controller: namespaces are the primary (and only watched) type."""
