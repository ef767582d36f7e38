"""Ownership: controller references, and claiming, adopting and releasing children.

A workload controller's children are the objects whose controller reference names the
owner (by UID) and whose labels match the owner's selector. :class:`Ownership` claims them
the way upstream's ``ControllerRefManager`` does:

- controlled by this owner and matching: claimed (even while the owner is being deleted:
  that takes no write);
- controlled by this owner but no longer matching: released (the owner reference removed),
  unless the owner is being deleted;
- controlled by someone else: left alone;
- an orphan that matches, not being deleted itself, while the owner is not being deleted:
  adopted (the owner's controller reference added) — but only after a fresh, uncached read
  of the owner shows it still exists under the same UID and is not being deleted
  (upstream's ``RecheckDeletionTimestamp``), asked once per claim.

Writes are patches with the child's UID as precondition, so a child deleted and created
again under the same name is never adopted or released by mistake: a strategic merge
patch for built-in types (the owner reference list is merged by UID), a JSON merge patch
carrying the whole list and the child's resource version for types that do not take
strategic merge patches (custom resources). ``finalizers`` given to :class:`Ownership` are
added on adoption and removed on release (the Job controller's tracking finalizer).

# Errors
A child gone meanwhile (404) is skipped; a release the API server refuses as invalid (422:
the reference was already removed) is done. Any other failure of an adoption or release is
collected, the remaining children are still tried, and :meth:`Ownership.claim` raises the
first error at the end — so the sync is retried with backoff, as upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from steward.kube import ApiError, ApiStatusError, ConflictError, KubeClient, NotFoundError
from steward.runtime.mirror import MirrorObject
from steward.runtime.resources import Resource
from steward.runtime.selectors import selector_matches

_SMP = "application/strategic-merge-patch+json"
_MERGE = "application/merge-patch+json"


def controller_ref(owner: Mapping[str, Any], owner_type: Resource) -> dict[str, Any]:
    """The controller reference to ``owner`` (an object of ``owner_type``) that its
    children carry: ``controller`` and ``blockOwnerDeletion`` set."""
    meta = owner.get("metadata") or {}
    return {
        "apiVersion": owner_type.api_version,
        "kind": owner_type.kind,
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The owner reference with ``controller: true`` of an object (a dict), if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s controller reference names ``owner`` by UID."""
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == (owner.get("metadata") or {}).get("uid")


def index_by_controller(obj: MirrorObject) -> Iterable[str]:
    """A mirror index (``with_index``) of objects by the UID of their controlling owner:
    a workload's children, looked up by the owner's UID."""
    ref = obj.controller_owner()
    return (ref.uid,) if ref is not None else ()


def orphan_index(*rtypes: Resource) -> Callable[[MirrorObject], Iterable[str]]:
    """A mirror index of the objects of ``rtypes`` that have no controlling owner, by
    namespace: the adoption candidates of an owner's namespace."""
    keys = frozenset(rtypes)

    def index(obj: MirrorObject) -> Iterable[str]:
        if obj.type not in keys or obj.controller_owner() is not None:
            return ()
        return (obj.namespace,)

    return index


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


class Ownership:
    """Claims children of ``child_type`` for owners of ``owner_type``; see the module
    docs."""

    def __init__(
        self,
        api: KubeClient,
        owner_type: Resource,
        child_type: Resource,
        *,
        finalizers: Sequence[str] = (),
        strategic: bool = True,
    ) -> None:
        self.api = api
        self.owner_type = owner_type
        self.owner_kind = owner_type.kind
        self.child_type = child_type
        self.finalizers = tuple(finalizers)
        self.strategic = strategic

    def ref(self, owner: Mapping[str, Any]) -> dict[str, Any]:
        """The controller reference to ``owner``."""
        return controller_ref(owner, self.owner_type)

    async def claim(
        self,
        owner: Mapping[str, Any],
        candidates: Iterable[Mapping[str, Any]],
        selector: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The children of ``owner`` among ``candidates`` (the mirror's objects: those it
        controls plus orphans), adopting and releasing as the module docs say. The
        selector defaults to the owner's ``spec.selector``. Adopted children are returned
        as the API server stored them. Raises the first adoption or release error after
        trying every candidate."""
        meta = owner.get("metadata") or {}
        uid = meta.get("uid")
        if selector is None:
            selector = (owner.get("spec") or {}).get("selector")
        owner_deleting = _deleting(owner)
        claimed: list[dict[str, Any]] = []
        orphans: list[Mapping[str, Any]] = []
        errors: list[Exception] = []
        for child in candidates:
            cmeta = child.get("metadata") or {}
            ref = controller_of(child)
            matches = selector_matches(selector, cmeta.get("labels") or {})
            if ref is not None:
                if ref.get("uid") != uid:
                    continue
                if matches:
                    claimed.append(dict(child))
                elif not owner_deleting:
                    try:
                        await self.release(owner, child)
                    except ApiError as err:
                        errors.append(err)
            elif (
                matches
                and not owner_deleting
                and not _deleting(child)
                and (
                    not self.owner_type.namespaced
                    or cmeta.get("namespace", "") == meta.get("namespace", "")
                )
            ):
                orphans.append(child)
        if orphans:
            refusal = await self.can_adopt(owner)
            for child in orphans:
                if refusal is not None:
                    errors.append(refusal)
                    break
                try:
                    adopted = await self.adopt(owner, child)
                except ApiError as err:
                    errors.append(err)
                    continue
                if adopted is not None:
                    claimed.append(adopted)
        if errors:
            raise errors[0]
        return claimed

    async def can_adopt(self, owner: Mapping[str, Any]) -> ApiError | None:
        """None when a fresh read shows ``owner`` under the same UID and not being
        deleted, else why not."""
        meta = owner.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            fresh = await self.api.arequest("GET", self.owner_type.path(ns, name))
        except ApiError as err:
            return err
        fmeta = fresh.get("metadata") or {}
        if fmeta.get("uid") != meta.get("uid"):
            got, wanted = fmeta.get("uid"), meta.get("uid")
            what = f"{self.owner_kind} {ns}/{name}"
            return ApiError(f"original {what} is gone: got uid {got}, wanted {wanted}")
        if fmeta.get("deletionTimestamp"):
            return ApiError(f"{self.owner_kind} {ns}/{name} has just been deleted")
        return None

    async def adopt(
        self, owner: Mapping[str, Any], child: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Make ``owner`` the child's controller (adding :attr:`finalizers`); None when the
        child is gone. Raises the API server's error otherwise (a conflict: someone else
        changed it first; the next sync looks again)."""
        cmeta = child.get("metadata") or {}
        patch: dict[str, Any]
        if self.strategic:
            patch = {"metadata": {"ownerReferences": [self.ref(owner)], "uid": cmeta.get("uid")}}
            if self.finalizers:
                patch["metadata"]["finalizers"] = list(self.finalizers)
        else:
            finalizers = list(cmeta.get("finalizers") or ())
            finalizers += [f for f in self.finalizers if f not in finalizers]
            patch = {
                "metadata": {
                    "ownerReferences": [*(cmeta.get("ownerReferences") or ()), self.ref(owner)],
                    "finalizers": finalizers,
                    "uid": cmeta.get("uid"),
                    "resourceVersion": cmeta.get("resourceVersion"),
                }
            }
        try:
            return await self._patch(cmeta, patch)
        except NotFoundError:
            return None

    async def release(self, owner: Mapping[str, Any], child: Mapping[str, Any]) -> None:
        """Remove ``owner``'s reference (and :attr:`finalizers`) from the child; a child
        gone or already released is done. Raises the API server's error otherwise."""
        cmeta = child.get("metadata") or {}
        uid = (owner.get("metadata") or {}).get("uid")
        patch: dict[str, Any]
        if self.strategic:
            patch = {
                "metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": uid}],
                    "uid": cmeta.get("uid"),
                }
            }
            if self.finalizers:
                patch["metadata"]["$deleteFromPrimitiveList/finalizers"] = list(self.finalizers)
        else:
            patch = {
                "metadata": {
                    "ownerReferences": [
                        r for r in cmeta.get("ownerReferences") or () if r.get("uid") != uid
                    ],
                    "finalizers": [
                        f for f in cmeta.get("finalizers") or () if f not in self.finalizers
                    ],
                    "uid": cmeta.get("uid"),
                    "resourceVersion": cmeta.get("resourceVersion"),
                }
            }
        try:
            await self._patch(cmeta, patch)
        except NotFoundError:
            return
        except ConflictError:
            if self.strategic:
                raise
            return  # changed meanwhile: the next sync looks at it again
        except ApiStatusError as err:
            if err.status == 422:
                return  # the reference is gone already
            raise

    async def _patch(self, cmeta: Mapping[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        path = self.child_type.path(cmeta.get("namespace", ""), cmeta.get("name", ""))
        return await self.api.arequest(
            "PATCH", path, patch, content_type=_SMP if self.strategic else _MERGE
        )
