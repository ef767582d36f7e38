"""The pods marked for eviction and when each is due: what upstream keeps in its
``TimedWorkerQueue`` (pkg/controller/tainteviction/timed_workers.go), decided as its
``processPodOnNode`` (taint_eviction.go) decides, without timers of its own: the
controller queues a pod's key again for the moment its eviction is due.

# A pod on a node with NoExecute taints
:meth:`Evictions.process`, for one pod, its tolerations and its node's NoExecute taints,
at ``now``:

- no taints: any eviction of the pod is cancelled;
- a taint none of its tolerations tolerates: the pod is due at once (a pending timed
  eviction is cancelled first; one already due at once is kept);
- every taint tolerated, and none of the tolerations used has ``tolerationSeconds``: the
  pod may stay forever, any eviction is cancelled;
- every taint tolerated for a while (the shortest ``tolerationSeconds`` of the
  tolerations used): an eviction already scheduled is kept as it is (its start, so the
  time a pod has tolerated its node's taints is never counted afresh while they last, as
  upstream's); else one is scheduled, due that many seconds from ``now``.

The start of a timed eviction is when this controller first saw the pod tolerating the
node's taints for a while, not the taint's ``timeAdded``: upstream counts from its own
``time.Now()`` too. A controller that starts afresh (a restart, another instance taking
over) counts afresh, as kube-controller-manager does.

# Cancelled, with an Event or not
Cancelling a *timed* eviction (one with a delay) is worth an Event ("Cancelling deletion
of Pod ..."); cancelling one that was due at once is silent, as upstream's, whose timed
worker of a zero delay is not kept (``createWorker`` returns nil, and ``CancelWork``
reports only a worker it could stop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from steward.controllers.tainteviction.tolerations import (
    Taint,
    Toleration,
    matching_tolerations,
    min_toleration_seconds,
)

PodKey = tuple[str, str]
"""A pod's namespace and name."""


@dataclass
class Eviction:
    """One pod's eviction: scheduled at ``created_at``, due at ``fire_at`` (seconds of the
    controller's monotonic clock)."""

    created_at: float
    fire_at: float
    marked: bool = False
    """Whether its "Marking for deletion" Event was recorded (once, on the first attempt
    to delete, as upstream records it when its timer fires)."""

    @property
    def timed(self) -> bool:
        """Whether it waits (a delay above zero) rather than being due at once."""
        return self.fire_at > self.created_at

    def remaining(self, now: float) -> float:
        """Seconds until it is due (0 when due)."""
        return max(0.0, self.fire_at - now)


class Evictions:
    """The scheduled evictions, by pod (see the module docs)."""

    def __init__(self) -> None:
        self._scheduled: dict[PodKey, Eviction] = {}

    def __len__(self) -> int:
        return len(self._scheduled)

    def get(self, key: PodKey) -> Eviction | None:
        """The pod's scheduled eviction, if any."""
        return self._scheduled.get(key)

    def cancel(self, key: PodKey) -> bool:
        """Forget the pod's eviction; True when it was a timed one (an Event is due)."""
        found = self._scheduled.pop(key, None)
        return found is not None and found.timed

    def done(self, key: PodKey) -> None:
        """The pod was deleted: forget its eviction, silently."""
        self._scheduled.pop(key, None)

    def process(
        self,
        key: PodKey,
        tolerations: Sequence[Toleration] | None,
        taints: Sequence[Taint],
        now: float,
    ) -> bool:
        """Decide the pod's eviction at ``now`` (see the module docs); True when a timed
        eviction was cancelled (an Event is due). :meth:`get` then tells what is
        scheduled."""
        if not taints:
            return self.cancel(key)
        used = matching_tolerations(taints, tolerations)
        existing = self._scheduled.get(key)
        if used is None:
            if existing is not None and not existing.timed:
                return False
            cancelled = self.cancel(key)
            self._scheduled[key] = Eviction(now, now)
            return cancelled
        seconds = min_toleration_seconds(used)
        if seconds is None:
            return self.cancel(key)
        if existing is None:
            self._scheduled[key] = Eviction(now, now + seconds)
        return False
