"""Projections: the part of an object a subscriber reads, as the informer sends it.

A subscriber of the informer may ask, per resource type, for some paths of each object
rather than the whole object (``WatchTarget.fields``), or for its metadata alone
(``WatchTarget.metadata_only``). The informer then sends each object reduced by a
:class:`Projection`, and the controller's mirror knows which paths it holds. Both sides
use this module, so what the informer keeps and what the mirror allows to be read are
the same thing.

# What a projected object holds
- ``apiVersion`` and ``kind``;
- the paths asked for, each dot-separated from the object's root (``spec.nodeName``,
  ``status.conditions``). A path that goes through a list applies to each item of it
  (``spec.containers.resources`` keeps each container's ``resources``); a path whose
  value is absent in an object is simply absent in its projection;
- ``metadata`` (the whole of it) when asked for or with ``metadata_only``, always without
  ``managedFields`` unless ``metadata.managedFields`` (or a path below it, which keeps
  that part of each entry) is named;
- never ``metadata.resourceVersion``, whatever was asked: the event's parsed metadata
  carries it, and leaving it out is what lets the informer see that a change touched
  nothing the subscriber reads (two versions of an object with the same projection
  encode to the same bytes). The mirror puts the name, namespace, UID and resource
  version from the parsed metadata back into the object it decodes.

# Errors
:meth:`Projection.parse` raises :class:`ValueError` naming the bad path; the informer
answers ``INVALID_ARGUMENT`` with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import orjson

MAX_PATHS = 64
"""Most paths one projection may name."""

MAX_PATH_LENGTH = 256
"""Longest path, in characters."""

_SEGMENT = re.compile(r"^[A-Za-z0-9_$-]+$")


class Omit:
    """A node of the projection tree that keeps a mapping whole but for some keys, and
    keeps some others only in part (``inner``: their own nodes)."""

    __slots__ = ("inner", "keys")

    def __init__(self, keys: frozenset[str], inner: dict[str, Node] | None = None) -> None:
        self.keys = keys
        self.inner: dict[str, Node] = inner or {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Omit) and other.keys == self.keys and other.inner == self.inner

    def __hash__(self) -> int:
        return hash(("omit", self.keys))

    def __repr__(self) -> str:
        return f"Omit({sorted(self.keys)}, {self.inner})"


Node: TypeAlias = "bool | Omit | dict[str, Node]"
"""``True``: keep the value whole; :class:`Omit`: keep a mapping but for some keys; a
dict: keep only these keys of a mapping, each by its own node."""

_ALWAYS_DROPPED = frozenset({"resourceVersion"})
"""Metadata keys never in a projection (see the module docs)."""


class Projection:
    """A parsed, normalised projection; equal projections compare and hash equal, so the
    informer encodes each object once per distinct projection, whatever the number of
    subscribers asking for it."""

    __slots__ = ("_hash", "fields", "metadata_only", "tree")

    def __init__(self, fields: tuple[str, ...], metadata_only: bool, tree: dict[str, Node]):
        self.fields = fields
        """The paths, sorted, without those another path covers."""
        self.metadata_only = metadata_only
        self.tree = tree
        self._hash = hash((fields, metadata_only))

    @classmethod
    def parse(cls, fields: Iterable[str], metadata_only: bool = False) -> Projection | None:
        """The projection of ``fields`` and ``metadata_only``; None when they ask for the
        whole object (no fields and not metadata-only).

        Raises:
            ValueError: a path is empty, too long, has an empty segment or a character
                other than letters, digits, ``_``, ``-`` and ``$``; or there are more
                than :data:`MAX_PATHS` of them.
        """
        paths = list(fields)
        if not paths and not metadata_only:
            return None
        if len(paths) > MAX_PATHS:
            raise ValueError(
                f"fields names {len(paths)} paths; a projection takes at most {MAX_PATHS}"
            )
        split: set[tuple[str, ...]] = set()
        for path in paths:
            if not path:
                raise ValueError("fields holds an empty path: name a path such as 'spec.nodeName'")
            if len(path) > MAX_PATH_LENGTH:
                raise ValueError(
                    f"path {path[:40]!r}... is {len(path)} characters long; the most is "
                    f"{MAX_PATH_LENGTH}"
                )
            segments = tuple(path.split("."))
            for segment in segments:
                if not _SEGMENT.match(segment):
                    raise ValueError(
                        f"malformed path {path!r}: each dot-separated segment is a field "
                        "name of letters, digits, '_', '-' or '$' (e.g. 'status.conditions')"
                    )
            split.add(segments)
        if metadata_only:
            split.add(("metadata",))
        # A path covered by a shorter one adds nothing ("status" covers "status.phase"),
        # except metadata.managedFields, which "metadata" alone leaves out.
        kept = sorted(p for p in split if not any(_covers(q, p) for q in split))
        return cls(tuple(".".join(p) for p in kept), metadata_only, _tree(kept))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Projection)
            and other.fields == self.fields
            and other.metadata_only == self.metadata_only
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Projection({', '.join(self.fields)})"

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The projected form of a decoded object (a new dict sharing the kept values)."""
        return _pick_mapping(obj, self.tree)

    def encode(self, obj: Mapping[str, Any]) -> bytes:
        """The projected form as JSON bytes (what the informer sends)."""
        return orjson.dumps(self.apply(obj))

    def holds(self, path: Iterable[str]) -> bool:
        """Whether the projected objects hold ``path`` (a sequence of keys from the root),
        or a part of it (True for ``("metadata", "name")`` with ``metadata`` kept)."""
        node: Node = self.tree
        for key in path:
            if node is True:
                return True
            if isinstance(node, Omit):
                if key in node.inner:
                    node = node.inner[key]
                    continue
                return key not in node.keys
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        return True


def _covers(shorter: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether ``shorter`` keeps all of ``path``: it is a prefix of it, except that
    ``metadata`` leaves managedFields out."""
    if shorter == path or path[: len(shorter)] != shorter:
        return False
    return not (shorter == ("metadata",) and path[:2] == ("metadata", "managedFields"))


def _tree(paths: list[tuple[str, ...]]) -> dict[str, Node]:
    tree: dict[str, Node] = {"apiVersion": True, "kind": True}
    metadata: dict[str, Node] = {"name": True, "namespace": True, "uid": True}
    tree["metadata"] = metadata
    whole_metadata = False
    for path in paths:
        if path == ("metadata",):
            whole_metadata = True
            continue
        node: dict[str, Node] = tree
        for segment in path[:-1]:
            child = node.get(segment)
            if not isinstance(child, dict):
                child = node[segment] = {}
            node = child
        node[path[-1]] = True
    metadata.pop("resourceVersion", None)
    if whole_metadata:
        # All of metadata, but managedFields only as far as asked (the paths below
        # "metadata" that remain are those under managedFields, see _covers).
        managed = metadata.get("managedFields")
        if managed is None:
            tree["metadata"] = Omit(_ALWAYS_DROPPED | {"managedFields"})
        elif managed is True:
            tree["metadata"] = Omit(_ALWAYS_DROPPED)
        else:
            tree["metadata"] = Omit(_ALWAYS_DROPPED | {"managedFields"}, {"managedFields": managed})
    return tree


def _pick(value: Any, node: Node) -> Any:
    if node is True:
        return value
    if isinstance(value, list):
        return [_pick(item, node) for item in value]
    if not isinstance(value, Mapping):
        return value  # a path that goes deeper than the object: keep what is there
    if isinstance(node, Omit):
        inner = node.inner
        return {
            k: _pick(v, inner[k]) if k in inner else v
            for k, v in value.items()
            if k not in node.keys or k in inner
        }
    assert isinstance(node, dict)
    return _pick_mapping(value, node)


def _pick_mapping(value: Mapping[str, Any], node: dict[str, Node]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, child in node.items():
        if key in value:
            out[key] = _pick(value[key], child)
    return out
