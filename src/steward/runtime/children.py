"""Children: what a workload controller creates, deletes, adopts and releases, written once.

``ctx.children(PODS)`` is a :class:`Children` of the controller's primary type (upstream's
``PodControl`` with its Events, ``ControllerExpectations`` and ``ControllerRefManager``
together):

- :meth:`Children.create` posts a child (the trace context stamped on it) and records
  ``SuccessfulCreate`` / ``FailedCreate`` on the owner; :meth:`Children.delete` deletes
  one and records ``SuccessfulDelete`` / ``FailedDelete``;
- :meth:`Children.create_all` and :meth:`Children.delete_all` do many under the
  controller's expectations (slow-start batches for creations, as upstream), lowering at
  once the expectation of every write that failed;
- :meth:`Children.claim` adopts matching orphans and releases children that stopped
  matching (:class:`~steward.runtime.ownership.Ownership`).

The builder's ``owns(PODS, expect=True)`` lowers those expectations as the mirror shows
each child appear or go (:func:`expectation_observer`), and ``adopts(PODS)`` queues the
owners whose selector matches an orphan (:class:`~steward.runtime.source.EnqueueAdopters`),
so a controller holds only its own decisions.

# A terminating namespace
One rule for every controller: a creation refused because the namespace is being deleted
(the Status cause ``NamespaceTerminating``, :func:`namespace_terminating`) is no error and
records no Event: every creation there would fail, and the namespace's deletion removes
the owner too. As upstream's callers of ``PodControl``, it counts as done: its
expectation waits for the owner's deletion to be forgotten (or expires).

# Errors
:meth:`Children.create` and :meth:`Children.delete` raise the API server's error after
recording the Warning Event (a child already gone raises
:class:`~steward.kube.NotFoundError` without an Event: it counts as deleted). The batch
forms collect errors in a :class:`~steward.runtime.expectations.BatchOutcome` instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from steward.kube import (
    NAMESPACE_TERMINATING,
    ApiError,
    ApiStatusError,
    ConflictError,
    NotFoundError,
    error_message,
)
from steward.runtime.client import ResourceClient
from steward.runtime.events import EventRecorder
from steward.runtime.expectations import BatchOutcome, Expectations
from steward.runtime.mirror import Change, ChangeKind, Handler, Mirror
from steward.runtime.ownership import Ownership, controller_ref
from steward.runtime.resources import Resource, owner_of

Object = dict[str, Any]


def namespace_terminating(err: BaseException) -> bool:
    """Whether ``err`` is the API server refusing a creation because the namespace is
    being deleted (the one rule of the module docs)."""
    return isinstance(err, ApiStatusError) and err.has_cause(NAMESPACE_TERMINATING)


def owner_key(owner: Mapping[str, Any]) -> tuple[str, str]:
    """``(namespace, name)`` of an owner: the key of its expectations."""
    meta = owner.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))


def _child_name(child: Mapping[str, Any]) -> str:
    meta = child.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Children:
    """Children of type ``child`` of owners of type ``owner``; see the module docs.

    ``finalizers`` are the owner's own on its children: added on adoption, removed on
    release, and removed before a child is deleted (the Job controller's tracking
    finalizer). ``events`` False records no Events of creations and deletions (children
    upstream creates silently, such as EndpointSlices)."""

    def __init__(
        self,
        client: ResourceClient,
        owner: Resource,
        expectations: Expectations,
        recorder: EventRecorder | None,
        *,
        finalizers: Sequence[str] = (),
        strategic: bool = True,
    ) -> None:
        self.client = client
        self.resource = client.resource
        self.owner = owner
        self.expectations = expectations
        self.recorder = recorder
        self.finalizers = tuple(finalizers)
        self.ownership = Ownership(
            client.api, owner, client.resource, finalizers=finalizers, strategic=strategic
        )
        self._noun = client.resource.kind.lower()

    def ref(self, owner: Mapping[str, Any]) -> Object:
        """The controller reference a child of ``owner`` carries."""
        return controller_ref(owner, self.owner)

    def _event(self, owner: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(dict(owner), etype, reason, message)

    # One child --------------------------------------------------------------------------
    async def create(self, owner: Mapping[str, Any], body: Object) -> Object | None:
        """Create one child of ``owner`` (``body`` carries its controller reference, and
        gets the trace context) in the body's namespace, else the owner's; the child as
        stored, or None when the namespace is being deleted. Raises the API server's
        error after a ``FailedCreate`` Event."""
        namespace = (body.get("metadata") or {}).get("namespace") or owner_key(owner)[0]
        try:
            child = await self.client.create(body, namespace=namespace, stamp_trace=True)
        except ApiError as err:
            if namespace_terminating(err):
                return None
            self._event(owner, "Warning", "FailedCreate", f"Error creating: {error_message(err)}")
            raise
        name = (child.get("metadata") or {}).get("name", "")
        self._event(owner, "Normal", "SuccessfulCreate", f"Created {self._noun}: {name}")
        return child

    async def delete(
        self, owner: Mapping[str, Any], child: Mapping[str, Any], *, precondition: bool = False
    ) -> None:
        """Delete one child of ``owner`` (its owner's finalizers removed first; with
        ``precondition``, only if it still has the same UID). A child gone already raises
        :class:`~steward.kube.NotFoundError` without an Event — so does one whose UID
        precondition failed: that child is gone, another took its name. Any other
        refusal raises after a ``FailedDelete`` Event."""
        meta = child.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            held = [f for f in self.finalizers if f in (meta.get("finalizers") or ())]
            if held:
                await self.remove_finalizers(child)
            await self.client.delete(ns, name, uid=meta.get("uid") if precondition else None)
        except NotFoundError:
            raise
        except ConflictError as err:
            if precondition:  # the child of that UID is gone; another has its name
                raise NotFoundError(404, f"{ns}/{name}: {err.message}") from err
            self._event(owner, "Warning", "FailedDelete", f"Error deleting: {error_message(err)}")
            raise
        except ApiError as err:
            self._event(owner, "Warning", "FailedDelete", f"Error deleting: {error_message(err)}")
            raise
        self._event(owner, "Normal", "SuccessfulDelete", f"Deleted {self._noun}: {name}")

    async def remove_finalizers(self, child: Mapping[str, Any]) -> Object:
        """Remove the owner's finalizers from ``child`` (a strategic merge patch); the
        child as stored. Raises the API server's error (404 when it is gone)."""
        meta = child.get("metadata") or {}
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": list(self.finalizers)}}
        return await self.client.patch(meta.get("namespace", ""), meta.get("name", ""), patch)

    # Many, under expectations -------------------------------------------------------------
    async def create_all(
        self,
        owner: Mapping[str, Any],
        bodies: Sequence[Object],
        *,
        initial_batch: int = 1,
    ) -> BatchOutcome:
        """Create ``bodies`` as children of ``owner`` in slow-start batches, expected
        under the owner's key; a failed batch stops the rest (see
        :meth:`~steward.runtime.expectations.Expectations.create`)."""

        async def one(i: int) -> None:
            await self.create(owner, bodies[i])

        return await self.expectations.create(
            owner_key(owner), len(bodies), one, initial_batch=initial_batch
        )

    async def delete_all(
        self,
        owner: Mapping[str, Any],
        victims: Sequence[Mapping[str, Any]],
        *,
        precondition: bool = False,
    ) -> BatchOutcome:
        """Delete ``victims`` at once, expected under the owner's key; a child gone
        already counts as deleted (see
        :meth:`~steward.runtime.expectations.Expectations.delete`)."""

        async def one(i: int) -> None:
            await self.delete(owner, victims[i], precondition=precondition)

        names = [_child_name(v) for v in victims]
        return await self.expectations.delete(owner_key(owner), names, one)

    # Ownership ----------------------------------------------------------------------------
    async def claim(
        self,
        owner: Mapping[str, Any],
        candidates: Iterable[Mapping[str, Any]],
        selector: Mapping[str, Any] | None = None,
    ) -> list[Object]:
        """The children of ``owner`` among ``candidates``, adopting and releasing
        (:meth:`~steward.runtime.ownership.Ownership.claim`)."""
        return await self.ownership.claim(owner, candidates, selector)


def expectation_observer(
    mirror: Mirror, owner: Resource, child: Resource, expectations: Expectations
) -> Handler:
    """The observer ``owns(child, expect=True)`` installs: a child whose controlling owner
    resolves (by name and UID) to an object of ``owner`` in the mirror lowers that owner's
    expected creation when it appears, and its expected deletion when it gets a deletion
    timestamp or goes; an owner's deletion forgets its expectations."""

    def observe(change: Change) -> None:
        obj = change.obj
        if obj.type == owner and change.kind is ChangeKind.DELETED:
            expectations.forget(obj.key)
        if obj.type != child:  # (owners may be of the children's own type)
            return
        ref = owner_of(obj, owner)
        if ref is None:
            return
        held = mirror.get(owner, ref.namespace, ref.name)
        if held is None or held.meta.uid != ref.uid:
            return
        if change.kind is ChangeKind.ADDED:
            expectations.creation_observed(ref.key)
        if change.kind is ChangeKind.DELETED or obj.meta.HasField("deletion_timestamp"):
            expectations.deletion_observed(ref.key, f"{obj.namespace}/{obj.name}")

    return observe
