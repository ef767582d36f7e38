"""Expectations: what a controller's last sync wrote that its mirror has not shown yet.

A sync that created or deleted children must not act again on a mirror that does not show
those writes yet, or it would create or delete twice (client-go's
``ControllerExpectations`` and ``UIDTrackingControllerExpectations``). Per key (the owner's
``(namespace, name)``) this records:

- how many creations are expected (children usually have generated names, so a count);
- which children are being deleted, by name: a deletion counts once per child, whether the
  mirror first shows it with a deletion timestamp or gone;
- which children a finalizer is being removed from, by UID (``removals``), for controllers
  that keep their children with a finalizer until they are counted (the Job controller).

The controller lowers them as its mirror shows the writes: the runtime calls the observers
declared on the builder (:meth:`~steward.runtime.controller.ControllerBuilder.observe`)
for every change *before* the change's key is queued, so a sync never starts on a change
whose expectation is still up.

While creations or deletions are pending (:meth:`Expectations.satisfied` is False) a sync
should count and report, but neither create nor delete.

# Recovery
A write that fails is lowered at once (the mirror will never show it).
:meth:`Expectations.create` and :meth:`Expectations.delete` do that for a batch of writes,
and when the sync is cancelled mid-way (the instance stopped being active, or shuts down)
they lower every write whose outcome is unknown: a child that was written after all shows
up in the mirror and is counted by the next sync. Expectations that never come down (a
lost event) expire after :data:`TTL` seconds (client-go's five minutes), so a key is never
wedged for good. After a restart every key starts satisfied, which is safe because a sync
counts what the mirror shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from steward.kube import ApiError, NotFoundError
from steward.runtime.clock import Clock, MonotonicClock

TTL = 300.0
"""Seconds after which unmet expectations are ignored (client-go's ExpectationsTimeout)."""


@dataclass
class _Record:
    adds: int = 0
    deleting: set[str] = field(default_factory=set)
    removals: set[str] = field(default_factory=set)
    at: float = 0.0


@dataclass
class BatchOutcome:
    """What a batch of writes did: how many succeeded, and the errors of those that failed
    (the first is usually the one to raise)."""

    succeeded: int = 0
    errors: list[Exception] = field(default_factory=list)


def slow_start_batches(count: int, initial: int = 1) -> list[int]:
    """Batch sizes for ``count`` writes: ``initial``, then doubling (each at most what
    remains), as upstream's ``slowStartBatch``: a failing batch stops the rest, so a
    quota or admission refusal costs one request rather than ``count``."""
    sizes: list[int] = []
    size, left = max(initial, 1), count
    while left > 0:
        take = min(size, left)
        sizes.append(take)
        left -= take
        size *= 2
    return sizes


class Expectations:
    """Pending creations, deletions and finalizer removals per key; see the module docs.

    Not thread-safe: use it from the event loop (observers and reconciles run there).
    """

    def __init__(self, ttl: float = TTL, clock: Clock | None = None) -> None:
        self.ttl = ttl
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._records: dict[Hashable, _Record] = {}

    def _record(self, key: Hashable) -> _Record:
        rec = self._records.get(key)
        if rec is None:
            rec = self._records[key] = _Record()
        return rec

    # Raising ----------------------------------------------------------------------------
    def expect_creations(self, key: Hashable, count: int) -> None:
        """Expect ``count`` more children of ``key`` to appear."""
        rec = self._record(key)
        # Below zero means more was observed than expected (an outcome lowered twice:
        # failed or cancelled here, then seen after all); that must not eat into what is
        # expected now.
        rec.adds = max(rec.adds, 0) + count
        rec.at = self._clock.now()

    def expect_deletions(self, key: Hashable, names: Iterable[str]) -> None:
        """Expect these children of ``key`` (by ``namespace/name``) to be deleted."""
        rec = self._record(key)
        rec.deleting |= set(names)
        rec.at = self._clock.now()

    def expect_removals(self, key: Hashable, uids: Iterable[str]) -> None:
        """Expect a finalizer to disappear from these children of ``key`` (by UID)."""
        self._record(key).removals |= set(uids)

    # Lowering ---------------------------------------------------------------------------
    def creation_observed(self, key: Hashable) -> None:
        """A child of ``key`` appeared (or its creation failed, and it never will)."""
        rec = self._records.get(key)
        if rec is not None:
            rec.adds -= 1

    def deletion_observed(self, key: Hashable, name: str) -> None:
        """Child ``namespace/name`` of ``key`` is being deleted or gone (or its deletion
        failed); counted once however often it is said."""
        rec = self._records.get(key)
        if rec is not None:
            rec.deleting.discard(name)

    def removal_observed(self, key: Hashable, uid: str) -> None:
        """The child shows without the finalizer, is gone, or the removal failed."""
        rec = self._records.get(key)
        if rec is not None:
            rec.removals.discard(uid)

    def forget(self, key: Hashable) -> None:
        """Drop everything about ``key`` (the owner was deleted)."""
        self._records.pop(key, None)

    # Reading ----------------------------------------------------------------------------
    def satisfied(self, key: Hashable) -> bool:
        """True when no creation or deletion is pending for ``key``, or what is pending
        has expired (:attr:`ttl`)."""
        rec = self._records.get(key)
        if rec is None or (rec.adds <= 0 and not rec.deleting):
            return True
        return self._clock.now() - rec.at > self.ttl

    def pending(self, key: Hashable) -> tuple[int, int]:
        """(creations, deletions) still expected for ``key``."""
        rec = self._records.get(key)
        return (0, 0) if rec is None else (max(rec.adds, 0), len(rec.deleting))

    def removals(self, key: Hashable) -> frozenset[str]:
        """UIDs whose finalizer removal is pending for ``key``."""
        rec = self._records.get(key)
        return frozenset(rec.removals) if rec is not None else frozenset()

    # Batches of writes ------------------------------------------------------------------
    async def create(
        self,
        key: Hashable,
        count: int,
        create_one: Callable[[int], Awaitable[object]],
        *,
        initial_batch: int = 1,
    ) -> BatchOutcome:
        """Create ``count`` children of ``key`` in slow-start batches, expecting each.

        ``create_one(i)`` writes the ``i``-th child; it raises :class:`ApiError` when the
        creation failed (lowered at once, and no further batch is started) and returns
        anything otherwise (the child's event lowers the expectation). Creations never
        attempted, or cut off by cancellation with their outcome unknown, are lowered as
        well (module docs, Recovery). Other exceptions propagate, after lowering.
        """
        self.expect_creations(key, count)
        outcome = BatchOutcome()
        settled = 0
        try:
            for size in slow_start_batches(count, initial_batch):
                start = settled
                results = await asyncio.gather(
                    *(_attempt(create_one(start + i)) for i in range(size))
                )
                settled += size
                failed = [r for r in results if r is not None]
                outcome.succeeded += size - len(failed)
                for err in failed:
                    self.creation_observed(key)
                    outcome.errors.append(err)
                if failed:
                    break
        finally:
            for _ in range(count - settled):
                self.creation_observed(key)
        return outcome

    async def delete(
        self,
        key: Hashable,
        names: Sequence[str],
        delete_one: Callable[[int], Awaitable[object]],
    ) -> BatchOutcome:
        """Delete children of ``key`` (``names[i]`` is ``namespace/name`` of the one
        ``delete_one(i)`` deletes), expecting each, all at once.

        A child already gone (:class:`NotFoundError`) counts as deleted and is lowered at
        once; one whose deletion failed (:class:`ApiError`) is lowered and its error
        collected. Cancelled with outcomes unknown, every deletion is lowered: each one
        that did happen is seen by the next sync.
        """
        self.expect_deletions(key, names)

        async def one(i: int) -> Exception | None:
            try:
                await delete_one(i)
            except NotFoundError:
                self.deletion_observed(key, names[i])
            except ApiError as err:
                self.deletion_observed(key, names[i])
                return err
            return None

        outcome = BatchOutcome()
        try:
            results = await asyncio.gather(*(one(i) for i in range(len(names))))
        except BaseException:
            for name in names:
                self.deletion_observed(key, name)
            raise
        outcome.errors = [r for r in results if r is not None]
        outcome.succeeded = len(names) - len(outcome.errors)
        return outcome


async def _attempt(write: Awaitable[object]) -> Exception | None:
    try:
        await write
    except ApiError as err:
        return err
    return None
