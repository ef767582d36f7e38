"""Expectations: what a Job's last sync did that the mirror has not shown yet.

A sync that created or deleted pods must not act again on a mirror that does not show
those writes yet, or it would create or delete twice. So the controller records how
many creations and deletions it expects per Job, and which pods' tracking finalizer it
is removing; the mirror's pod events lower the counts. While any is pending the Job's
sync counts and reports but does not create or delete.

# Recovery
A write that fails is un-expected at once (the mirror will never show it). Counts that
never come down (a lost event) expire after :data:`TTL` seconds, as in client-go, so a Job
is never wedged for good.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

TTL = 300.0
"""Seconds after which unmet creation/deletion expectations are ignored."""

JobKey = tuple[str, str]
"""(namespace, name) of a Job."""


@dataclass
class _Record:
    adds: int = 0
    dels: int = 0
    at: float = 0.0
    removals: set[str] = field(default_factory=set)


class Expectations:
    """Pending pod creations, deletions and finalizer removals per Job."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._records: dict[JobKey, _Record] = {}

    def _record(self, key: JobKey) -> _Record:
        rec = self._records.get(key)
        if rec is None:
            rec = self._records[key] = _Record()
        return rec

    def expect(self, key: JobKey, adds: int = 0, dels: int = 0) -> None:
        """Expect ``adds`` more creations and ``dels`` more deletions for the Job."""
        rec = self._record(key)
        # A count below zero means more was observed than expected (an outcome lowered
        # twice: failed or cancelled here, then seen after all); it must not eat into
        # what is expected now.
        rec.adds = max(rec.adds, 0) + adds
        rec.dels = max(rec.dels, 0) + dels
        rec.at = self._clock()

    def creation_observed(self, key: JobKey) -> None:
        """A pod of the Job appeared (or a creation failed and never will)."""
        rec = self._records.get(key)
        if rec is not None:
            rec.adds -= 1

    def deletion_observed(self, key: JobKey) -> None:
        """A pod of the Job is gone or being deleted (or a deletion failed)."""
        rec = self._records.get(key)
        if rec is not None:
            rec.dels -= 1

    def satisfied(self, key: JobKey) -> bool:
        """True when nothing is pending for the Job, or what is pending has expired."""
        rec = self._records.get(key)
        if rec is None or (rec.adds <= 0 and rec.dels <= 0):
            return True
        return self._clock() - rec.at > TTL

    def expect_removals(self, key: JobKey, uids: set[str]) -> None:
        """Expect the tracking finalizer to disappear from these pods."""
        self._record(key).removals |= uids

    def removal_observed(self, key: JobKey, uid: str) -> None:
        """The pod shows without the finalizer, is gone, or its removal failed."""
        rec = self._records.get(key)
        if rec is not None:
            rec.removals.discard(uid)

    def removals(self, key: JobKey) -> frozenset[str]:
        """UIDs whose finalizer removal is pending."""
        rec = self._records.get(key)
        return frozenset(rec.removals) if rec is not None else frozenset()

    def forget(self, key: JobKey) -> None:
        """Drop everything about the Job (it was deleted)."""
        self._records.pop(key, None)
