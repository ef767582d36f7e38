"""From mirror changes to work-queue keys: the object's own key, its owner's, or a mapping.

Each source turns a :class:`~steward.runtime.mirror.Change` into zero or more
:class:`~steward.runtime.reconcile.Request` keys and passes the change's trace context
along, so the queue keeps the context of every event coalesced into a key. Predicates
filter changes before they become keys (for example: only when the generation changed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorObject
from steward.runtime.reconcile import Request
from steward.runtime.resources import Resource, owner_of
from steward.runtime.selectors import selector_matches
from steward.runtime.workqueue import TraceContext

log = logging.getLogger(__name__)

Predicate = Callable[[Change], bool]
"""Whether a change should produce keys at all."""

Mapper = Callable[[MirrorObject], Iterable[Request]]
"""The keys an object of another type maps to."""

ChangeMapper = Callable[[Change], Iterable[Request]]
"""The keys a change of another type maps to, decided on the old and new object together."""

Enqueue = Callable[[Request, TraceContext | None], None]
"""Where keys go (a work queue's ``add``)."""


def generation_changed(change: Change) -> bool:
    """True for creations and deletions, and for updates that changed ``metadata.generation``
    (a spec change); status-only updates are filtered out."""
    if change.kind is not ChangeKind.MODIFIED or change.old is None:
        return True
    return change.old.meta.generation != change.obj.meta.generation


def labels_changed(change: Change) -> bool:
    """True for creations and deletions, and for updates that changed the labels."""
    if change.kind is not ChangeKind.MODIFIED or change.old is None:
        return True
    return dict(change.old.meta.labels) != dict(change.obj.meta.labels)


def resource_version_changed(change: Change) -> bool:
    """True unless an update carries the same resource version (a relist's re-delivery)."""
    if change.kind is not ChangeKind.MODIFIED or change.old is None:
        return True
    return change.old.resource_version != change.obj.resource_version


class Source:
    """Turns the changes of one resource type into keys."""

    def __init__(self, predicates: Sequence[Predicate] = ()) -> None:
        self.predicates = tuple(predicates)

    def keys(self, change: Change) -> Iterable[Request]:
        raise NotImplementedError

    def handle(self, change: Change, enqueue: Enqueue) -> None:
        """Enqueue the keys of ``change`` if every predicate lets it through."""
        for predicate in self.predicates:
            if not predicate(change):
                return
        for key in self.keys(change):
            enqueue(key, change.trace)


class EnqueueObject(Source):
    """The object's own key (``For`` in controller-runtime)."""

    def keys(self, change: Change) -> Iterable[Request]:
        return (Request(change.obj.namespace, change.obj.name),)


class EnqueueOwner(Source):
    """The key of the object's controlling owner of type ``owner`` (``Owns`` in
    controller-runtime). On an update that changed the controller owner, both the old and
    the new owner are enqueued, so the old one sees it lose the object."""

    def __init__(self, owner: Resource, predicates: Sequence[Predicate] = ()) -> None:
        super().__init__(predicates)
        self.owner = owner

    def _owner(self, obj: MirrorObject) -> Request | None:
        ref = owner_of(obj, self.owner)
        return Request(*ref.key) if ref is not None else None

    def keys(self, change: Change) -> Iterable[Request]:
        keys = []
        new = self._owner(change.obj)
        if new is not None:
            keys.append(new)
        if change.old is not None:
            old = self._owner(change.old)
            if old is not None and old != new:
                keys.append(old)
        return keys


SelectorOf = Callable[[dict[str, Any]], Mapping[str, Any] | None]
"""The label selector of an owner (a decoded object) that its orphans are matched by."""


def spec_selector(owner: dict[str, Any]) -> Mapping[str, Any] | None:
    """``spec.selector``: where workload owners keep their selector."""
    return (owner.get("spec") or {}).get("selector")


class EnqueueAdopters(Source):
    """For an orphan (an object without a controlling owner), the keys of every object of
    type ``owner`` in its namespace whose selector matches its labels: one of them may
    adopt it (upstream's ``getPodReplicaSets``). An orphan without labels, and an owner
    with an empty selector, match nothing. On an update, the owners the old labels
    matched are queued too."""

    def __init__(
        self,
        mirror: Mirror,
        owner: Resource,
        selector: SelectorOf = spec_selector,
        predicates: Sequence[Predicate] = (),
    ) -> None:
        super().__init__(predicates)
        self.mirror = mirror
        self.owner = owner
        self.selector = selector

    def _adopters(self, obj: MirrorObject) -> list[Request]:
        if obj.controller_owner() is not None or not obj.meta.labels:
            return []
        labels = dict(obj.meta.labels)
        return [
            Request(o.namespace, o.name)
            for o in self.mirror.objects(self.owner, obj.namespace)
            if selector_matches(self.selector(o.object), labels)
        ]

    def keys(self, change: Change) -> Iterable[Request]:
        keys = self._adopters(change.obj)
        if change.old is not None:
            keys += [k for k in self._adopters(change.old) if k not in keys]
        return keys


class EnqueueMapped(Source):
    """Keys computed by ``mapper`` from the object (``Watches`` with a map function).

    A mapper that raises is logged and yields no keys; it does not stop the mirror.
    """

    def __init__(self, mapper: Mapper, predicates: Sequence[Predicate] = ()) -> None:
        super().__init__(predicates)
        self.mapper = mapper

    def keys(self, change: Change) -> Iterable[Request]:
        try:
            keys = list(self.mapper(change.obj))
            if change.old is not None:
                keys += [k for k in self.mapper(change.old) if k not in keys]
        except Exception:
            log.exception("mapper failed for %r", change.obj)
            return ()
        return keys


class EnqueueChanged(Source):
    """Keys computed by ``mapper`` from the whole change, where the keys depend on what
    changed between the old and the new object (a node whose fitness for a DaemonSet
    changed). A mapper that raises is logged and yields no keys."""

    def __init__(self, mapper: ChangeMapper, predicates: Sequence[Predicate] = ()) -> None:
        super().__init__(predicates)
        self.mapper = mapper

    def keys(self, change: Change) -> Iterable[Request]:
        try:
            return list(self.mapper(change))
        except Exception:
            log.exception("change mapper failed for %r", change.obj)
            return ()
