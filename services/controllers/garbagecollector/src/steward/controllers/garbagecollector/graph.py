"""The ownership graph: every object of every watched type, its owners and its dependents.

Built from the mirror's changes in their order (upstream's GraphBuilder, whose single
``graph_changes`` worker this is: the mirror calls the controller on the event loop, one
change at a time). Each change updates the graph and says which nodes the collector must
look at (:class:`Work`): ``delete`` (upstream's attemptToDelete: is it garbage? is a
foreground deletion done?) and ``orphan`` (attemptToOrphan: an owner deleted with the
``orphan`` finalizer).

# Nodes
A node is an object by UID, with its identity (API version, kind, namespace, name), its
owner references, the nodes that name it as owner, and whether it is being deleted (and
whether it waits for its dependents: ``foregroundDeletion``). An owner named by a
reference but not observed yet is a *virtual* node, with the reference's coordinates and
the dependent's namespace; it is queued at once, so the collector asks the API server
whether it exists (by UID). Once observed, a virtual node takes the identity observed;
dependents that named it otherwise are queued to be checked, and those whose namespace
differs from a namespaced owner's get an ``OwnerRefInvalidNamespace`` Event
(:attr:`Graph.invalid`), as upstream.

A *virtual delete* (:meth:`Graph.virtual_delete`) is what the collector reports when the
API server says an unobserved owner does not exist (or exists under another UID): the
node leaves the graph and its dependents are queued, unless some dependents name it by
other coordinates, as upstream's ``processGraphChanges``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from steward.runtime.meta import Meta, OwnerRef
from steward.runtime.resources import Resource

ORPHAN = "orphan"
"""The finalizer of a deletion that orphans the dependents."""
FOREGROUND = "foregroundDeletion"
"""The finalizer of a deletion that waits for the blocking dependents."""


class Work(NamedTuple):
    """A key of the collector's queue: what to do (``delete`` or ``orphan``) to whom."""

    action: str
    uid: str

    def __str__(self) -> str:
        return f"{self.action} {self.uid}"


@dataclass(frozen=True, slots=True)
class Identity:
    """An object's coordinates (upstream's ``objectReference``)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    @classmethod
    def of_owner(cls, ref: OwnerRef, namespace: str) -> Identity:
        """The coordinates a reference names, in ``namespace`` (the dependent's)."""
        return cls(ref.api_version, ref.kind, namespace, ref.name, ref.uid)

    def coordinates(self) -> tuple[str, str, str, str]:
        """API version, kind, name and UID: what an owner reference names."""
        return (self.api_version, self.kind, self.name, self.uid)

    def __str__(self) -> str:
        return (
            f"[{self.api_version}/{self.kind}, namespace: {self.namespace}, "
            f"name: {self.name}, uid: {self.uid}]"
        )


def _coordinates(ref: OwnerRef) -> tuple[str, str, str, str]:
    return (ref.api_version, ref.kind, ref.name, ref.uid)


def _same_ref(a: OwnerRef, b: OwnerRef) -> bool:
    return _coordinates(a) == _coordinates(b) and (a.controller, a.block_owner_deletion) == (
        b.controller,
        b.block_owner_deletion,
    )


class Node:
    """One object (or a virtual owner) of the graph; see the module docs."""

    __slots__ = (
        "being_deleted",
        "deleting_dependents",
        "dependents",
        "identity",
        "observed",
        "owners",
        "rtype",
        "virtual",
    )

    def __init__(
        self,
        identity: Identity,
        *,
        owners: tuple[OwnerRef, ...] = (),
        virtual: bool = False,
        rtype: Resource | None = None,
    ) -> None:
        self.identity = identity
        self.owners = owners
        self.dependents: set[Node] = set()
        self.virtual = virtual
        self.observed = not virtual
        self.being_deleted = False
        self.deleting_dependents = False
        self.rtype = rtype
        """The type it was observed as (None while virtual)."""

    def blocking_dependents(self) -> list[Node]:
        """Dependents whose reference to this node has ``blockOwnerDeletion``."""
        uid = self.identity.uid
        return [
            dep
            for dep in self.dependents
            if any(r.uid == uid and r.block_owner_deletion for r in dep.owners)
        ]

    def __repr__(self) -> str:
        flags = [
            f
            for f, on in (
                ("virtual", self.virtual and not self.observed),
                ("being-deleted", self.being_deleted),
                ("deleting-dependents", self.deleting_dependents),
            )
            if on
        ]
        return f"Node({self.identity}{', ' if flags else ''}{', '.join(flags)})"


@dataclass(frozen=True)
class InvalidOwner:
    """A dependent that names a namespaced owner of another namespace: the Event upstream
    records about it (``OwnerRefInvalidNamespace``)."""

    dependent: Node
    owner: Identity
    """The owner as referenced, in the dependent's namespace."""

    def message(self) -> str:
        return (
            f"ownerRef {self.owner} does not exist in namespace "
            f'"{self.dependent.identity.namespace}"'
        )


def _being_deleted(meta: Meta | None) -> bool:
    return meta is not None and meta.deletion_timestamp is not None


def _starts_waiting(old: Meta | None, new: Meta, finalizer: str) -> bool:
    """Whether ``new`` is being deleted with ``finalizer`` and ``old`` was not (upstream's
    deletionStartsWithFinalizer)."""
    if not _being_deleted(new) or finalizer not in new.finalizers:
        return False
    return old is None or not _being_deleted(old) or finalizer not in old.finalizers


class Graph:
    """The graph of every observed object; see the module docs."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.invalid: list[InvalidOwner] = []
        """Invalid owner references found since the collector last took them."""
        self.absent: AbsentOwners = AbsentOwners()
        """Owners the collector verified absent (upstream's absentOwnerCache)."""

    def __len__(self) -> int:
        return len(self.nodes)

    def get(self, uid: str) -> Node | None:
        return self.nodes.get(uid)

    def take_invalid(self) -> list[InvalidOwner]:
        found, self.invalid = self.invalid, []
        return found

    # Observed changes -----------------------------------------------------------------
    def upsert(self, rtype: Resource, meta: Meta, old: Meta | None) -> list[Work]:
        """An object added or updated (``old``: its previous metadata, if any)."""
        work: list[Work] = []
        identity = Identity(rtype.api_version, rtype.kind, meta.namespace, meta.name, meta.uid)
        node = self.nodes.get(meta.uid)
        if node is not None and not node.observed:
            self._observe_virtual(node, identity, work)
        owners = tuple(meta.owner_references)
        if node is None:
            node = Node(identity, owners=owners, rtype=rtype)
            node.being_deleted = _being_deleted(meta)
            node.deleting_dependents = node.being_deleted and FOREGROUND in meta.finalizers
            self.nodes[meta.uid] = node
            self._add_to_owners(node, owners, work)
        else:
            node.rtype = rtype
            node.identity = identity
            old_by_uid = {r.uid: r for r in node.owners}
            new_by_uid = {r.uid: r for r in owners}
            added = [r for u, r in new_by_uid.items() if u not in old_by_uid]
            removed = [r for u, r in old_by_uid.items() if u not in new_by_uid]
            changed = [
                (old_by_uid[u], r)
                for u, r in new_by_uid.items()
                if u in old_by_uid and not _same_ref(old_by_uid[u], r)
            ]
            if added or removed or changed:
                self._unblocked_owners(removed, changed, work)
                node.owners = owners
                self._add_to_owners(node, added, work)
                self._remove_from_owners(node, removed)
            if _being_deleted(meta):
                node.being_deleted = True
        self._transitions(old, meta, node, work)
        return work

    def delete(self, meta: Meta) -> list[Work]:
        """An object deleted (observed)."""
        node = self.nodes.get(meta.uid)
        if node is None:
            return []
        work: list[Work] = []
        self._remove(node, work)
        return work

    def virtual_delete(self, identity: Identity) -> list[Work]:
        """The API server said an unobserved node does not exist under these coordinates
        (or has another UID): see the module docs."""
        node = self.nodes.get(identity.uid)
        if node is None:
            return []
        work: list[Work] = []
        # As upstream, a node made virtual stays judged as one once observed: its
        # dependents may name it by coordinates of their own.
        if not node.virtual:
            if node.identity != identity:
                # An observed node disagrees with the coordinates verified absent: keep it,
                # and have the dependents that named those coordinates checked.
                matching, _ = _partition(node.dependents, identity)
                if matching:
                    self.absent.add(identity)
                    work += [Work("delete", d.identity.uid) for d in matching]
                return work
        else:
            matching, other = _partition(node.dependents, identity)
            if other:
                # Some dependents name this owner by other coordinates: keep the node.
                if matching:
                    self.absent.add(identity)
                    work += [Work("delete", d.identity.uid) for d in matching]
                if node.identity == identity:
                    replacement = _other_identity(other, identity)
                    if replacement is not None:
                        node.identity = replacement
                        work.append(Work("delete", node.identity.uid))
                return work
        self._remove(node, work, identity)
        return work

    # Helpers ----------------------------------------------------------------------------
    def _observe_virtual(self, node: Node, identity: Identity, work: list[Work]) -> None:
        if identity != node.identity:
            _, suspects = _partition(node.dependents, identity)
            for dep in suspects:
                if identity.namespace and dep.identity.namespace != identity.namespace:
                    self._report_invalid(dep, identity.uid)
                work.append(Work("delete", dep.identity.uid))
            node.identity = identity
        node.observed = True

    def _add_to_owners(self, node: Node, refs: Iterable[OwnerRef], work: list[Work]) -> None:
        suspect = False
        for ref in refs:
            owner = self.nodes.get(ref.uid)
            if owner is None:
                owner = Node(Identity.of_owner(ref, node.identity.namespace), virtual=True)
                self.nodes[ref.uid] = owner
                owner.dependents.add(node)
                work.append(Work("delete", ref.uid))  # does it exist?
                continue
            owner.dependents.add(node)
            if suspect:
                continue
            owner_ns = owner.identity.namespace
            if owner_ns and owner_ns != node.identity.namespace:
                if owner.observed:
                    self._report_invalid(node, ref.uid)
                suspect = True
            elif _coordinates(ref) != owner.identity.coordinates():
                suspect = True
            elif not owner_ns and owner_ns != node.identity.namespace and not owner.observed:
                # A virtual cluster-scoped owner of a namespaced dependent: maybe a missing
                # namespaced owner that a cluster-scoped child named (upstream's #98040).
                suspect = True
        if suspect:
            work.append(Work("delete", node.identity.uid))

    def _remove_from_owners(self, node: Node, refs: Iterable[OwnerRef]) -> None:
        for ref in refs:
            owner = self.nodes.get(ref.uid)
            if owner is not None:
                owner.dependents.discard(node)

    def _unblocked_owners(
        self,
        removed: list[OwnerRef],
        changed: list[tuple[OwnerRef, OwnerRef]],
        work: list[Work],
    ) -> None:
        """Owners waiting for their dependents that a dependent no longer blocks."""
        refs = [r for r in removed if r.block_owner_deletion]
        refs += [
            old for old, new in changed if old.block_owner_deletion and not new.block_owner_deletion
        ]
        for ref in refs:
            owner = self.nodes.get(ref.uid)
            if owner is not None and owner.deleting_dependents:
                work.append(Work("delete", ref.uid))

    def _transitions(self, old: Meta | None, new: Meta, node: Node, work: list[Work]) -> None:
        if _starts_waiting(old, new, ORPHAN):
            work.append(Work("orphan", node.identity.uid))
            return
        if _starts_waiting(old, new, FOREGROUND):
            node.deleting_dependents = True
            work += [Work("delete", d.identity.uid) for d in node.dependents]
            work.append(Work("delete", node.identity.uid))

    def _remove(self, node: Node, work: list[Work], identity: Identity | None = None) -> None:
        del self.nodes[node.identity.uid]
        for ref in node.owners:
            owner = self.nodes.get(ref.uid)
            if owner is not None:
                owner.dependents.discard(node)
        if node.dependents:
            self.absent.add(identity or node.identity)
        work += [Work("delete", d.identity.uid) for d in node.dependents]
        for ref in node.owners:
            owner = self.nodes.get(ref.uid)
            if owner is not None and owner.deleting_dependents:
                work.append(Work("delete", ref.uid))

    def _report_invalid(self, dependent: Node, owner_uid: str) -> None:
        for ref in dependent.owners:
            if ref.uid == owner_uid:
                owner = Identity.of_owner(ref, dependent.identity.namespace)
                self.invalid.append(InvalidOwner(dependent, owner))
                return

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())


def _partition(dependents: Iterable[Node], owner: Identity) -> tuple[list[Node], list[Node]]:
    """The dependents whose reference to ``owner``'s UID matches its coordinates (and, for a
    namespaced owner, its namespace), and the others."""
    matching: list[Node] = []
    other: list[Node] = []
    for dep in dependents:
        named = any(
            r.uid == owner.uid and _coordinates(r) == owner.coordinates() for r in dep.owners
        )
        same_ns = not owner.namespace or owner.namespace == dep.identity.namespace
        (matching if named and same_ns else other).append(dep)
    return matching, other


def _order(identity: Identity) -> tuple[str, str, str, str]:
    return (identity.namespace, identity.api_version, identity.kind, identity.name)


def _other_identity(dependents: list[Node], verified_absent: Identity) -> Identity | None:
    """Another identity the dependents name the owner by (upstream's
    getAlternateOwnerIdentity): the first, in the dependents' order, that sorts after the
    absent one, else the first. A cluster-scoped absent identity makes references of its
    API version and kind cluster-scoped too."""
    cluster_scoped = not verified_absent.namespace
    seen = {verified_absent}
    first: Identity | None = None
    first_greater: Identity | None = None
    for dep in dependents:
        for ref in dep.owners:
            if ref.uid != verified_absent.uid:
                continue
            namespace = dep.identity.namespace
            if (
                cluster_scoped
                and ref.api_version == verified_absent.api_version
                and ref.kind == verified_absent.kind
            ):
                namespace = ""
            candidate = Identity.of_owner(ref, namespace)
            if candidate in seen:
                continue
            seen.add(candidate)
            if first is None:
                first = candidate
            if first_greater is None and _order(verified_absent) < _order(candidate):
                first_greater = candidate
    return first_greater or first


class AbsentOwners:
    """Owners verified absent, least recently used first out (upstream keeps 500)."""

    def __init__(self, size: int = 500) -> None:
        self.size = size
        self._items: dict[Identity, None] = {}

    def add(self, identity: Identity) -> None:
        self._items.pop(identity, None)
        self._items[identity] = None
        while len(self._items) > self.size:
            del self._items[next(iter(self._items))]

    def __contains__(self, identity: object) -> bool:
        if identity in self._items:
            assert isinstance(identity, Identity)
            self._items.pop(identity)
            self._items[identity] = None
            return True
        return False
