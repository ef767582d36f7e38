"""Expectations: what a ReplicaSet's last sync did that the mirror has not shown yet.

A sync that created or deleted pods must not act again on a mirror that does not show
those writes yet, or it would create or delete twice. So the controller records how many
creations it expects per ReplicaSet and *which* pods (by ``namespace/name``) it is
deleting; the mirror's pod events lower them. While any is pending, the ReplicaSet's sync
claims pods and writes its status but creates and deletes nothing (client-go's
``UIDTrackingControllerExpectations``).

A deletion is counted once per pod, whether the mirror first shows the pod with a
deletion timestamp or gone, so a pod seen twice does not lower the count twice.

# Recovery
A write that fails is un-expected at once (the mirror will never show it). Expectations
that never come down (a lost event) expire after :data:`TTL` seconds, as in client-go, so
a ReplicaSet is never wedged for good. After a restart every ReplicaSet starts satisfied.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

TTL = 300.0
"""Seconds after which unmet expectations are ignored (client-go's ExpectationsTimeout)."""

Key = tuple[str, str]
"""(namespace, name) of a ReplicaSet."""


@dataclass
class _Record:
    adds: int = 0
    deleting: set[str] = field(default_factory=set)
    at: float = 0.0


class Expectations:
    """Pending pod creations (a count) and deletions (pod keys) per ReplicaSet."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._records: dict[Key, _Record] = {}

    def expect_creations(self, key: Key, count: int) -> None:
        """Expect ``count`` more pods of the ReplicaSet to appear (replaces what was
        pending, as a sync only acts once everything before was observed)."""
        rec = self._records.setdefault(key, _Record())
        rec.adds = count
        rec.at = self._clock()

    def expect_deletions(self, key: Key, pods: Iterable[str]) -> None:
        """Expect these pods (``namespace/name``) of the ReplicaSet to be deleted."""
        rec = self._records.setdefault(key, _Record())
        rec.deleting = set(pods)
        rec.at = self._clock()

    def creation_observed(self, key: Key) -> None:
        """A pod of the ReplicaSet appeared (or a creation failed or was skipped)."""
        rec = self._records.get(key)
        if rec is not None and rec.adds > 0:
            rec.adds -= 1

    def deletion_observed(self, key: Key, pod: str) -> None:
        """Pod ``namespace/name`` of the ReplicaSet is being deleted or gone (or its
        deletion failed); counted once."""
        rec = self._records.get(key)
        if rec is not None:
            rec.deleting.discard(pod)

    def pending(self, key: Key) -> tuple[int, int]:
        """(creations, deletions) still expected."""
        rec = self._records.get(key)
        return (0, 0) if rec is None else (rec.adds, len(rec.deleting))

    def satisfied(self, key: Key) -> bool:
        """True when nothing is pending for the ReplicaSet, or what is pending expired."""
        rec = self._records.get(key)
        if rec is None or (rec.adds <= 0 and not rec.deleting):
            return True
        return self._clock() - rec.at > TTL

    def forget(self, key: Key) -> None:
        """Drop everything about the ReplicaSet (it was deleted)."""
        self._records.pop(key, None)
