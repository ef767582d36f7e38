"""A client-side mirror of one resource type, built from Watch events the way a client would."""

from __future__ import annotations

from dataclasses import dataclass, field

from steward.v1 import informer_pb2 as pb

ADDED = pb.EVENT_TYPE_ADDED
MODIFIED = pb.EVENT_TYPE_MODIFIED
DELETED = pb.EVENT_TYPE_DELETED
BOOKMARK = pb.EVENT_TYPE_BOOKMARK
INITIAL_EVENTS_END = pb.EVENT_TYPE_INITIAL_EVENTS_END
REPLACED = pb.EVENT_TYPE_REPLACED


@dataclass
class Mirror:
    """Objects by (namespace, name) → resource version, and the resume point."""

    objects: dict[tuple[str, str], str] = field(default_factory=dict)
    resource_version: str = ""
    synced: bool = False
    replaced: int = 0
    _fresh: set[tuple[str, str]] | None = None

    def apply(self, event: pb.Event) -> None:
        key = (event.metadata.namespace, event.metadata.name)
        if event.type == REPLACED:
            self.replaced += 1
            self._fresh = set()
        elif event.type in (ADDED, MODIFIED):
            self.objects[key] = event.metadata.resource_version
            if self._fresh is not None:
                self._fresh.add(key)
        elif event.type == DELETED:
            self.objects.pop(key, None)
        elif event.type == INITIAL_EVENTS_END:
            if self._fresh is not None:
                for gone in set(self.objects) - self._fresh:
                    del self.objects[gone]
                self._fresh = None
            self.synced = True
        if event.resource_version:
            self.resource_version = event.resource_version

    def start_stream(self) -> None:
        """A new stream without a resume point starts from scratch."""
        if not self.resource_version:
            self.objects.clear()
        self._fresh = None
