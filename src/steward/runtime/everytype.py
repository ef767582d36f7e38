"""Controllers over every type the API server serves: the types follow discovery.

The garbage collector reads the owner references of every object of every type, custom
resources included, and the set of types changes while it runs (a CustomResourceDefinition
created or deleted, an aggregated API server coming and going). Declared with
:meth:`~steward.runtime.controller.ControllerBuilder.for_every_type`, such a controller's
mirror watches the types :class:`EveryType` selects from discovery, and a
:class:`TypeFollower` keeps them current:

- at start, before the mirror opens its stream, and then every :attr:`EveryType.period`
  seconds, discovery is read (:mod:`steward.runtime.discovery`) and the mirror retargeted
  (:meth:`~steward.runtime.mirror.Mirror.retarget`): the types that stay resume where they
  were, new ones arrive as a snapshot of ADDED changes, dropped ones leave quietly;
- when the informer refuses the watch for good (NOT_FOUND: a type discovery listed a
  moment ago is gone), discovery is read at once and the watch retried if the types
  changed;
- group versions discovery could not read (an aggregated API server that is down) keep
  the types of theirs the mirror has synced, as upstream's garbage collector keeps their
  monitors, so a flapping API server does not drop and relist them.

Reading discovery fails quietly for the loop (logged, counted in :attr:`TypeFollower.errors`,
retried next period); the first reading is retried with the mirror's backoff until it
succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from steward.kube import ApiError
from steward.runtime.discovery import Discovered, Discovery
from steward.runtime.mirror import Mirror, MirrorError
from steward.runtime.resources import Resource
from steward.runtime.subscriptions import TypeSubscription, subscription

log = logging.getLogger(__name__)

ANY_TYPE = Resource("", "", "", "")
"""The primary type of a controller over every type: it has none of its own (no object
is queued by being of it, and its context names no type for Events or children)."""


@dataclass(frozen=True)
class EveryType:
    """Which types a controller over every type watches, and how."""

    verbs: tuple[str, ...] = ("list", "watch")
    """Only types that serve every one of these verbs (the garbage collector's: list,
    watch and delete)."""
    ignored: frozenset[tuple[str, str]] = frozenset()
    """(group, plural) pairs never watched, whatever the version (``--gc-ignored-resources``)."""
    period: float = 30.0
    """Seconds between readings of discovery (upstream's garbage collector: 30)."""
    subscription: TypeSubscription = field(default_factory=lambda: subscription(metadata_only=True))
    """What is read of each type (the default: metadata only)."""

    def wanted(self, found: Discovered) -> dict[Resource, TypeSubscription]:
        """The types to watch by ``found``: preferred versions serving :attr:`verbs`, less
        :attr:`ignored`."""
        chosen: dict[Resource, TypeSubscription] = {}
        for res in found.preferred():
            r = res.resource
            if res.supports(*self.verbs) and (r.group, r.plural) not in self.ignored:
                chosen[r] = self.subscription
        return chosen


class TypeFollower:
    """Keeps ``mirror``'s types equal to what discovery lists (see the module docs).

    ``on_change`` is told of each change of the types (added, dropped), after the mirror
    was retargeted."""

    def __init__(
        self,
        mirror: Mirror,
        discovery: Discovery,
        spec: EveryType,
        fixed: Iterable[Resource] = (),
        on_change: Callable[[list[Resource], list[Resource]], None] | None = None,
    ) -> None:
        self.mirror = mirror
        self.discovery = discovery
        self.spec = spec
        self.fixed = {t: mirror.subscription(t) for t in fixed}
        """Types the controller watches besides (its other sources'), never dropped."""
        self.on_change = on_change
        self.errors = 0
        """Readings of discovery that failed."""
        self.on_error: Callable[[], None] | None = None
        """Called for each failed reading (a controller's metric of it)."""
        self.synced_once = asyncio.Event()
        """Set once discovery was read and the mirror retargeted the first time."""
        mirror.refused = self._refused

    @property
    def types(self) -> list[Resource]:
        """The types followed now (without the fixed ones)."""
        return [t for t in self.mirror.watched_types() if t not in self.fixed]

    async def sync(self) -> bool:
        """Read discovery and retarget the mirror; whether the types changed.

        Raises:
            ApiError: discovery could not be read (nothing changed).
        """
        found = await self.discovery.read(fresh=True)
        failed_gvs = set(found.failed)
        wanted = self.spec.wanted(found)
        for rtype in self.types:
            stale = rtype.api_version in failed_gvs
            if rtype not in wanted and stale and self.mirror.synced(rtype):
                wanted[rtype] = self.mirror.subscription(rtype)
        if not wanted:
            # An API server answering with no type at all is not one without objects.
            raise ApiError("discovery listed no type to watch; keeping the types as they are")
        added, dropped = self.mirror.retarget({**wanted, **self.fixed})
        self.synced_once.set()
        if added or dropped:
            log.info(
                "types changed: %d watched; added %s; dropped %s",
                len(self.mirror.watched_types()),
                ", ".join(map(str, added)) or "none",
                ", ".join(map(str, dropped)) or "none",
            )
            if self.on_change is not None:
                self.on_change(added, dropped)
        return bool(added or dropped)

    def _failed(self) -> None:
        self.errors += 1
        if self.on_error is not None:
            self.on_error()

    async def _refused(self, err: MirrorError) -> bool:
        log.info("the informer refused the watch (%s); reading discovery again", err)
        try:
            return await self.sync()
        except ApiError as failure:
            self._failed()
            log.warning("cannot read discovery: %s", failure)
            return True  # try again after the mirror's backoff rather than give up

    async def run(self) -> None:
        """Follow discovery until cancelled: at once (retried until it succeeds), then
        every period."""
        delay = self.mirror.options.initial_backoff
        while not self.synced_once.is_set():
            try:
                await self.sync()
            except ApiError as err:
                self._failed()
                log.warning("cannot read discovery (retrying in %.1fs): %s", delay, err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.mirror.options.max_backoff)
        while True:
            await asyncio.sleep(self.spec.period)
            try:
                await self.sync()
            except ApiError as err:
                self._failed()
                log.warning("cannot read discovery: %s", err)
