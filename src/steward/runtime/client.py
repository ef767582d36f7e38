"""Typed writes: one client per resource type, with its verbs, so no controller builds paths.

``ctx.client(JOBS)`` is a :class:`ResourceClient` (kube-rs' ``Api<K>``, controller-runtime's
``client.Client``): ``get``, ``create``, ``update``, ``update_status``, ``patch`` and
``delete`` of one type, over the controller's API client — fenced by its lease and told to
its mirror by construction (see :class:`~steward.runtime.controller.Controller`), and each
request a client span of the current trace that sends its context as ``traceparent``.

# Errors
Each verb raises what :meth:`~steward.kube.KubeClient.arequest` raises:
:class:`~steward.kube.NotFoundError` (404), :class:`~steward.kube.ConflictError` (409: a
stale ``resourceVersion`` or a name taken), any other refusal as
:class:`~steward.kube.ApiStatusError`, :class:`~steward.kube.FencedError` when this
instance does not hold its lease, :class:`~steward.kube.ApiUnavailableError` when the API
server cannot be reached. :meth:`ResourceClient.update_status` can retry a conflict once
on a fresh read (``retry_on_conflict``), as upstream's workload controllers do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from steward.kube import ConflictError, KubeClient
from steward.runtime.resources import Resource
from steward.runtime.tracing import stamp_trace_context

Object = dict[str, Any]

PatchType = Literal["strategic", "merge", "json"]
"""A patch's flavour: strategic merge (built-in types), JSON merge (RFC 7386, any type) or
JSON patch (RFC 6902)."""

_CONTENT_TYPES: dict[str, str] = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}

Propagation = Literal["Background", "Foreground", "Orphan"]
"""A deletion's propagation policy for the object's dependents."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


class ResourceClient:
    """The verbs of one resource type; see the module docs."""

    def __init__(self, api: KubeClient, resource: Resource) -> None:
        self.api = api
        self.resource = resource

    def _path(self, obj: Mapping[str, Any], subresource: str = "") -> str:
        meta = _meta(obj)
        return self.resource.path(meta.get("namespace", ""), meta.get("name", ""), subresource)

    async def get(self, namespace: str, name: str, *, subresource: str = "") -> Object:
        """The object as the API server has it now (an uncached read)."""
        return await self.api.arequest("GET", self.resource.path(namespace, name, subresource))

    async def create(
        self, body: Object, *, namespace: str | None = None, stamp_trace: bool = False
    ) -> Object:
        """Create ``body`` in ``namespace`` (default: its own ``metadata.namespace``); the
        object as stored. With ``stamp_trace``, the current trace context is written into
        its annotations first (``body`` is changed), so the new object's own events
        continue this trace (:func:`~steward.runtime.tracing.stamp_trace_context`)."""
        ns = _meta(body).get("namespace", "") if namespace is None else namespace
        path = self.resource.path(ns if self.resource.namespaced else "")
        return await self.api.arequest(
            "POST", path, stamp_trace_context(body) if stamp_trace else body
        )

    async def update(
        self, obj: Object, *, subresource: str = "", stamp_trace: bool = False
    ) -> Object:
        """Replace ``obj`` (PUT; its ``resourceVersion`` makes it conditional), or its
        ``subresource`` (``scale``: ``obj`` is then the Scale, named as its target); the
        object as stored. ``stamp_trace`` as for :meth:`create`."""
        return await self.api.arequest(
            "PUT",
            self._path(obj, subresource),
            stamp_trace_context(obj) if stamp_trace else obj,
        )

    async def update_status(
        self,
        obj: Object,
        status: Mapping[str, Any] | Callable[[Object], Mapping[str, Any]] | None = None,
        *,
        retry_on_conflict: bool = False,
    ) -> Object:
        """Replace the status of ``obj`` (its ``status`` subresource) with ``status`` (a
        mapping, or a function of the object that gives it; None: ``obj``'s own status).
        With ``retry_on_conflict``, a conflict reads the object afresh and writes the
        status onto that once more (a function is asked again, of the fresh object); a
        second conflict raises. Returns the object as stored."""

        def body(base: Object) -> Object:
            if status is None:
                return base
            return {**base, "status": dict(status(base) if callable(status) else status)}

        try:
            return await self.api.arequest("PUT", self._path(obj, "status"), body(obj))
        except ConflictError:
            if not retry_on_conflict:
                raise
        meta = _meta(obj)
        fresh = await self.get(meta.get("namespace", ""), meta.get("name", ""))
        return await self.api.arequest("PUT", self._path(fresh, "status"), body(fresh))

    async def patch(
        self,
        namespace: str,
        name: str,
        patch: Object | list[Any],
        *,
        patch_type: PatchType = "strategic",
        subresource: str = "",
    ) -> Object:
        """Patch one object (or its ``subresource``) with a patch of ``patch_type``; the
        object as stored."""
        return await self.api.arequest(
            "PATCH",
            self.resource.path(namespace, name, subresource),
            patch,
            content_type=_CONTENT_TYPES[patch_type],
        )

    async def delete(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: Propagation | None = None,
        grace_period_seconds: int | None = None,
    ) -> Object:
        """Delete one object; with ``uid`` (and/or ``resource_version``) only that very
        object (a precondition: 409 if it was replaced or changed meanwhile), with
        ``propagation`` its dependents' policy, with ``grace_period_seconds`` the seconds
        it is given to terminate (None: its own, a pod's
        ``terminationGracePeriodSeconds``; 0: deleted at once, a pod without waiting for
        its kubelet's word). Returns what the API server answered: the object, still
        there and terminating while a grace period or a finalizer holds it, else the
        deletion's Status."""
        options: Object = {}
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        if propagation is not None:
            options["propagationPolicy"] = propagation
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        body = {"kind": "DeleteOptions", "apiVersion": "v1", **options} if options else None
        return await self.api.arequest("DELETE", self.resource.path(namespace, name), body)


class Client:
    """A controller's typed API client: ``client(resource)`` gives the verbs of one type;
    :attr:`api` is the raw client beneath (``arequest`` for the odd call: discovery, a
    subresource no verb covers)."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self._clients: dict[Resource, ResourceClient] = {}

    def __call__(self, resource: Resource) -> ResourceClient:
        client = self._clients.get(resource)
        if client is None:
            client = self._clients[resource] = ResourceClient(self.api, resource)
        return client
