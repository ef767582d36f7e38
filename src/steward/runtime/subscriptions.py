"""What a controller reads of each type it watches, sent to the informer per type.

A controller's sources (:class:`~steward.runtime.controller.ControllerBuilder`) each say
what they need of their type: which objects (selectors; the kinds of controller owner,
and orphans), and which paths of each (a projection, or the metadata alone). The runtime
merges the sources of one type into one :class:`TypeSubscription`, the mirror sends it
as that type's ``WatchTarget`` and the informer leaves out, before it encodes anything,
whatever the controller does not read (see informer.proto).

# Merging the sources of a type
- owners: the union of the kinds, orphans if any source wants them; any source that
  wants every object of the type (no owner filter) wins;
- projection: the union of the paths, metadata if any source wants it; any source that
  wants the whole object wins;
- selectors: equal or absent in every source; two different ones are an error (the
  informer's filters are a conjunction, and a source's objects must all be delivered);
- selected by: the same join in every source, else every object.

# Reading outside the projection
The mirror hands a projected object out as :class:`Projected` mappings along the paths
of the projection: reading a key the projection leaves out raises
:class:`ProjectionError` naming the path and the projection (a controller that forgot a
path fails loudly, in its tests first, rather than reading a silent ``None``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from steward.projection import Node, Omit, Projection
from steward.runtime.resources import Resource
from steward.v1 import informer_pb2 as pb


@dataclass(frozen=True)
class TypeSubscription:
    """What of one type a controller (or one of its sources) reads. The default reads
    everything."""

    label_selector: str = ""
    """Only objects with these labels (a Kubernetes label selector)."""
    field_selector: str = ""
    """Only objects passing this field selector (metadata.name, metadata.namespace)."""
    owner_kinds: frozenset[tuple[str, str]] | None = None
    """Only objects whose controller owner is of one of these (group, kind); None for
    every object."""
    orphans: bool = False
    """With ``owner_kinds``: objects without a controller owner too."""
    fields: tuple[str, ...] = ()
    """The paths read of each object (see steward.projection); empty with
    ``metadata_only`` False for the whole object."""
    metadata_only: bool = False
    """The object's metadata (plus ``fields``), as client-go's metadata informer."""
    selected_by: tuple[Resource, str] | None = None
    """Only objects some object of this type selects by the selector at this path, in
    the same namespace (e.g. ``(SERVICES, "spec.selector")``); None for every object."""

    @property
    def whole(self) -> bool:
        """Whether whole objects are read."""
        return not self.fields and not self.metadata_only

    def projection(self) -> Projection | None:
        """The parsed projection (None for whole objects); ValueError when malformed."""
        return Projection.parse(self.fields, self.metadata_only)

    def target(self, rtype: Resource, resource_version: str = "") -> pb.WatchTarget:
        """The type's ``WatchTarget``."""
        target = pb.WatchTarget(
            type=rtype.wire,
            resource_version=resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            fields=list(self.fields),
            metadata_only=self.metadata_only,
        )
        if self.selected_by is not None:
            selecting, path = self.selected_by
            target.selected_by.type.CopyFrom(selecting.wire)
            target.selected_by.path = path
        if self.owner_kinds is not None:
            target.owner_filter.orphans = self.orphans
            for group, kind in sorted(self.owner_kinds):
                target.owner_filter.kinds.add(group=group, kind=kind)
        return target


EVERYTHING = TypeSubscription()


def subscription(
    *,
    owned_by: Iterable[Resource] | None = None,
    orphans: bool = False,
    label_selector: str = "",
    field_selector: str = "",
    fields: Sequence[str] | None = None,
    metadata_only: bool = False,
    selected_by: tuple[Resource, str] | None = None,
) -> TypeSubscription:
    """A source's subscription from the builder's keywords; ``owned_by`` are resource
    types with their kind (``steward.REPLICASETS``).

    Raises:
        ValueError: an owner type has no kind, ``orphans`` without ``owned_by``, or a
            malformed projection path.
    """
    kinds: frozenset[tuple[str, str]] | None = None
    if owned_by is not None:
        pairs = set()
        for owner in owned_by:
            if not owner.kind:
                raise ValueError(f"owned_by={owner}: the resource needs its kind")
            pairs.add((owner.group, owner.kind))
        kinds = frozenset(pairs)
        if not kinds and not orphans:
            raise ValueError("owned_by=[] without orphans=True would receive nothing")
    elif orphans:
        raise ValueError("orphans=True needs owned_by (without it every object is read)")
    sub = TypeSubscription(
        label_selector=label_selector,
        field_selector=field_selector,
        owner_kinds=kinds,
        orphans=orphans,
        fields=tuple(fields or ()),
        metadata_only=metadata_only,
        selected_by=selected_by,
    )
    sub.projection()  # malformed paths fail at declaration, not at the first watch
    return sub


def merge(rtype: Resource, subs: Sequence[TypeSubscription]) -> TypeSubscription:
    """The subscription that serves every one of ``subs`` (see the module docs).

    Raises:
        ValueError: two sources of ``rtype`` give different selectors.
    """
    if not subs:
        return EVERYTHING
    selectors = set()
    for sub in subs:
        selectors.add((sub.label_selector, sub.field_selector))
    if len(selectors) > 1:
        raise ValueError(
            f"the sources of {rtype} ask for different selectors {sorted(selectors)}: "
            "one type is watched once, so give them all the same selectors"
        )
    label_selector, field_selector = selectors.pop()
    if any(sub.owner_kinds is None for sub in subs):
        kinds, orphans = None, False
    else:
        kinds = frozenset(k for sub in subs for k in sub.owner_kinds or ())
        orphans = any(sub.orphans for sub in subs)
    if any(sub.whole for sub in subs):
        fields: tuple[str, ...] = ()
        metadata_only = False
    else:
        fields = tuple(sorted({f for sub in subs for f in sub.fields}))
        metadata_only = any(sub.metadata_only for sub in subs)
    # Objects selected by one type, or by another: one target cannot say both, so a type
    # whose sources disagree receives every object.
    joins = {sub.selected_by for sub in subs}
    selected_by = joins.pop() if len(joins) == 1 else None
    return TypeSubscription(
        label_selector, field_selector, kinds, orphans, fields, metadata_only, selected_by
    )


class ProjectionError(Exception):
    """A read of a path the type's projection leaves out (see the module docs)."""


class Projected(dict[str, Any]):
    """A mapping of a projected object: reading a key the projection leaves out raises
    :class:`ProjectionError` rather than finding nothing."""

    __slots__ = ("_node", "_path", "_projection")
    _node: Node
    _path: tuple[str, ...]
    _projection: Projection

    def _outside(self, key: object) -> bool:
        node = self._node
        if isinstance(node, Omit):
            return key in node.keys and key not in node.inner
        return isinstance(node, dict) and key not in node

    def _refuse(self, key: object) -> ProjectionError:
        path = ".".join([*self._path, str(key)])
        return ProjectionError(
            f"{path} is not in the projection this controller watches ({self._projection}): "
            "add it to the source's fields=[...] (or read the whole object)"
        )

    def __getitem__(self, key: str) -> Any:
        if self._outside(key):
            raise self._refuse(key)
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        if self._outside(key):
            raise self._refuse(key)
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        if self._outside(key):
            raise self._refuse(key)
        return dict.__contains__(self, key)


def readable_tree(projection: Projection) -> dict[str, Node]:
    """The projection's tree as the mirror serves it: with the metadata the mirror puts
    back (name, namespace, UID and resource version, from the event's parsed metadata)."""
    tree = dict(projection.tree)
    metadata = tree.get("metadata")
    if isinstance(metadata, dict):
        tree["metadata"] = {**metadata, "resourceVersion": True}
    elif isinstance(metadata, Omit):
        tree["metadata"] = Omit(metadata.keys - {"resourceVersion"}, metadata.inner)
    return tree


def guard(value: Any, node: Node, projection: Projection, path: tuple[str, ...] = ()) -> Any:
    """``value`` (a decoded projected object or part of it) with :class:`Projected`
    mappings wherever the projection keeps only some keys."""
    if node is True:
        return value
    if isinstance(value, list):
        return [guard(item, node, projection, path) for item in value]
    if not isinstance(value, dict):
        return value
    out = Projected(value)
    out._node = node
    out._path = path
    out._projection = projection
    children = node.inner if isinstance(node, Omit) else node
    assert isinstance(children, dict)
    for key, child in children.items():
        if child is not True and dict.__contains__(out, key):
            value = dict.__getitem__(out, key)
            dict.__setitem__(out, key, guard(value, child, projection, (*path, key)))
    return out
