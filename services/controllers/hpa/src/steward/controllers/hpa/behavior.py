"""From the replica count the metrics ask for to the count the HPA sets: the stabilization
window over recent recommendations, then the bounds (minReplicas, maxReplicas) and the scale
rate limits — upstream's ``normalizeDesiredReplicas`` and
``normalizeDesiredReplicasWithBehaviors`` with the per-HPA history they keep.

Nothing here talks to the API server; :mod:`.controller` calls :meth:`Normalizer.normalize`
once per sync that computed a proposal and :meth:`Normalizer.record_scale` after each
rescale, and puts what comes back into the AbleToScale and ScalingLimited conditions.

# Without ``spec.behavior``
The proposal is raised to the highest recommendation of the last
``--horizontal-pod-autoscaler-downscale-stabilization`` (five minutes), then held within
``[minReplicas, min(maxReplicas, max(2 * current, 4))]``.

# With ``spec.behavior``
Unset fields take the autoscaling/v2 defaults: scale-up has no window and allows
``max(+4 pods, +100 %)`` per 15 s; scale-down has the controller's window and allows -100 %
per 15 s; ``selectPolicy`` is Max. The proposal is held between the lowest recommendation of
the scale-up window and the highest of the scale-down window (starting from the current
count), then limited by the policies: each policy's bound counts from the replica count at the
start of its period (the current count less the scale-ups and plus the scale-downs recorded
within it); Pods adds or removes ``value`` pods, Percent multiplies by ``1 ± value/100``
(rounded up when scaling up, truncated when scaling down). Max takes the policy that allows
the most change, Min the least, Disabled none. The count never moves against the direction
because of old events, and stays within ``[minReplicas, maxReplicas]``.

# History
Recommendations and scale events live in memory per HPA key, as upstream's maps do: a
restarted controller starts with none. An entry past every window (or every policy period) is
overwritten by the next one rather than removed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)

SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0

WITHIN_RANGE = ("DesiredWithinRange", "the desired count is within the acceptable range")
TOO_FEW = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")
TOO_MANY = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
UP_LIMIT = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
)
DOWN_LIMIT = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
)
READY = ("ReadyForNewScale", "recommended size matches current size")
UP_STABILIZED = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
)
DOWN_STABILIZED = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent "
    "recommendation",
)


@dataclass(frozen=True)
class Limited:
    """The ScalingLimited condition: whether the bounds or rates changed the count, and why."""

    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class AbleToScale:
    """The AbleToScale condition's reason and message after stabilization (its status is
    True)."""

    reason: str
    message: str


@dataclass(frozen=True)
class ScalingPolicy:
    """One ``HPAScalingPolicy``: ``type`` is "Pods" or "Percent"."""

    type: str
    value: int
    period_seconds: int


@dataclass(frozen=True)
class ScalingRules:
    """One direction's ``HPAScalingRules`` with the defaults filled in."""

    stabilization_window_seconds: int
    select_policy: str
    policies: tuple[ScalingPolicy, ...]


@dataclass
class Recommendation:
    """An unstabilized proposal and when it was made."""

    replicas: int
    at: datetime


@dataclass
class ScaleEvent:
    """A rescale by ``change`` replicas (always positive; the direction is the list's) and
    when; ``outdated`` once it is older than the direction's longest policy period."""

    change: int
    at: datetime
    outdated: bool = False


def _policies(raw: Any) -> tuple[ScalingPolicy, ...]:
    return tuple(
        ScalingPolicy(
            str(p.get("type") or ""), int(p.get("value") or 0), int(p.get("periodSeconds") or 0)
        )
        for p in raw or ()
    )


def _rules(
    raw: Mapping[str, Any] | None, window: int, policies: tuple[ScalingPolicy, ...]
) -> ScalingRules:
    raw = raw or {}
    given = raw.get("stabilizationWindowSeconds")
    return ScalingRules(
        stabilization_window_seconds=window if given is None else int(given),
        select_policy=str(raw.get("selectPolicy") or "Max"),
        policies=policies if raw.get("policies") is None else _policies(raw["policies"]),
    )


def scale_up_rules(raw: Mapping[str, Any] | None) -> ScalingRules:
    """``spec.behavior.scaleUp`` with the autoscaling/v2 defaults: no window, Max of +4 pods
    and +100 % per 15 s."""
    return _rules(raw, 0, (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)))


def scale_down_rules(raw: Mapping[str, Any] | None, window_seconds: int) -> ScalingRules:
    """``spec.behavior.scaleDown`` with the autoscaling/v2 defaults: the controller's window
    (``window_seconds``), Max of -100 % per 15 s."""
    return _rules(raw, window_seconds, (ScalingPolicy("Percent", 100, 15),))


def scale_up_limit(current_replicas: int) -> int:
    """The most replicas one sync may ask for without ``spec.behavior``: twice the current
    count, at least 4 (upstream's ``calculateScaleUpLimit``)."""
    return int(max(SCALE_UP_LIMIT_FACTOR * float(current_replicas), SCALE_UP_LIMIT_MINIMUM))


def convert_with_rules(
    current_replicas: int, desired: int, min_replicas: int, max_replicas: int
) -> tuple[int, str, str]:
    """The count within ``[min_replicas, min(max_replicas, scale_up_limit(current))]``, with
    the ScalingLimited reason and message (upstream's ``convertDesiredReplicasWithRules``)."""
    limit = scale_up_limit(current_replicas)
    if max_replicas > limit:
        maximum, reason = limit, UP_LIMIT
    else:
        maximum, reason = max_replicas, TOO_MANY
    if desired < min_replicas:
        return (min_replicas, *TOO_FEW)
    if desired > maximum:
        return (maximum, *reason)
    return (desired, *WITHIN_RANGE)


def replicas_change_in_period(
    period_seconds: int, events: Sequence[ScaleEvent], now: datetime
) -> int:
    """The replicas the events within the last ``period_seconds`` changed."""
    cutoff = now - timedelta(seconds=period_seconds)
    return sum(e.change for e in events if e.at > cutoff)


def scale_up_limit_with_rules(
    current_replicas: int,
    up_events: Sequence[ScaleEvent],
    down_events: Sequence[ScaleEvent],
    rules: ScalingRules,
    now: datetime,
) -> int:
    """The most replicas the scale-up policies allow now (upstream's
    ``calculateScaleUpLimitWithScalingRules``)."""
    if rules.select_policy == "Disabled":
        return current_replicas
    pick_min = rules.select_policy == "Min"
    result = MAX_INT32 if pick_min else MIN_INT32
    for policy in rules.policies:
        start = (
            current_replicas
            - replicas_change_in_period(policy.period_seconds, up_events, now)
            + replicas_change_in_period(policy.period_seconds, down_events, now)
        )
        proposed = 0
        if policy.type == "Pods":
            proposed = start + policy.value
        elif policy.type == "Percent":
            proposed = math.ceil(float(start) * (1 + float(policy.value) / 100))
        result = min(result, proposed) if pick_min else max(result, proposed)
    return result


def scale_down_limit_with_rules(
    current_replicas: int,
    up_events: Sequence[ScaleEvent],
    down_events: Sequence[ScaleEvent],
    rules: ScalingRules,
    now: datetime,
) -> int:
    """The fewest replicas the scale-down policies allow now (upstream's
    ``calculateScaleDownLimitWithBehaviors``)."""
    if rules.select_policy == "Disabled":
        return current_replicas
    pick_min_change = rules.select_policy == "Min"
    result = MIN_INT32 if pick_min_change else MAX_INT32
    for policy in rules.policies:
        start = (
            current_replicas
            - replicas_change_in_period(policy.period_seconds, up_events, now)
            + replicas_change_in_period(policy.period_seconds, down_events, now)
        )
        proposed = 0
        if policy.type == "Pods":
            proposed = start - policy.value
        elif policy.type == "Percent":
            proposed = int(float(start) * (1 - float(policy.value) / 100))
        result = max(result, proposed) if pick_min_change else min(result, proposed)
    return result


def _longest_period(rules: ScalingRules) -> int:
    return max((p.period_seconds for p in rules.policies), default=0)


@dataclass
class _History:
    recommendations: list[Recommendation] = field(default_factory=list)
    up: list[ScaleEvent] = field(default_factory=list)
    down: list[ScaleEvent] = field(default_factory=list)


class Normalizer:
    """The stabilization and rate limits of every HPA, with each one's history by key.

    Safe to call from several threads (one lock guards the history).
    """

    def __init__(self, downscale_stabilization: timedelta = timedelta(minutes=5)) -> None:
        self.downscale_stabilization = downscale_stabilization
        self._lock = threading.Lock()
        self._history: dict[str, _History] = {}

    def history(self, key: str) -> tuple[list[Recommendation], list[ScaleEvent], list[ScaleEvent]]:
        """The key's recommendations, scale-up events and scale-down events (live lists)."""
        with self._lock:
            h = self._history.setdefault(key, _History())
            return h.recommendations, h.up, h.down

    def forget(self, key: str) -> None:
        """Drop the history of a deleted HPA."""
        with self._lock:
            self._history.pop(key, None)

    def record_initial(self, key: str, current_replicas: int, now: datetime) -> None:
        """Seed the history of an HPA seen for the first time with its current count
        (upstream's ``recordInitialRecommendation``; a no-op once the key has history)."""
        with self._lock:
            h = self._history.setdefault(key, _History())
            if not h.recommendations:
                h.recommendations.append(Recommendation(current_replicas, now))

    def _window_seconds(self) -> int:
        return int(self.downscale_stabilization.total_seconds())

    def rules(self, hpa: Mapping[str, Any]) -> tuple[ScalingRules, ScalingRules] | None:
        """The HPA's (scale-up, scale-down) rules with defaults, or None without
        ``spec.behavior``."""
        behavior = (hpa.get("spec") or {}).get("behavior")
        if behavior is None:
            return None
        return (
            scale_up_rules(behavior.get("scaleUp")),
            scale_down_rules(behavior.get("scaleDown"), self._window_seconds()),
        )

    def normalize(
        self,
        key: str,
        hpa: Mapping[str, Any],
        current_replicas: int,
        prenormalized: int,
        now: datetime,
    ) -> tuple[int, Limited, AbleToScale]:
        """The count to set for a proposal of ``prenormalized`` replicas, the ScalingLimited
        condition and the AbleToScale reason; records the proposal in the key's history.
        ``spec.minReplicas`` defaults to 1 (0 is allowed)."""
        spec = hpa.get("spec") or {}
        given_min = spec.get("minReplicas")
        min_replicas = 1 if given_min is None else int(given_min)
        max_replicas = int(spec.get("maxReplicas") or 0)
        self.record_initial(key, current_replicas, now)
        rules = self.rules(hpa)
        if rules is None:
            stabilized = self.stabilize(key, prenormalized, now)
            able = READY if stabilized == prenormalized else DOWN_STABILIZED
            desired, reason, message = convert_with_rules(
                current_replicas, stabilized, min_replicas, max_replicas
            )
        else:
            up, down = rules
            stabilized, able = self.stabilize_with_behaviors(
                key, current_replicas, prenormalized, up, down, now
            )
            if stabilized == prenormalized:
                able = READY
            desired, reason, message = self.convert_with_behavior_rate(
                key, current_replicas, stabilized, min_replicas, max_replicas, up, down, now
            )
        limited = Limited(desired != stabilized, reason, message)
        return desired, limited, AbleToScale(*able)

    def stabilize(self, key: str, prenormalized: int, now: datetime) -> int:
        """Upstream's ``stabilizeRecommendation``: the highest of ``prenormalized`` and the
        recommendations within the downscale window; records ``prenormalized``."""
        cutoff = now - self.downscale_stabilization
        highest = prenormalized
        with self._lock:
            recs = self._history.setdefault(key, _History()).recommendations
            old = -1
            for i, rec in enumerate(recs):
                if rec.at < cutoff:
                    old = i
                elif rec.replicas > highest:
                    highest = rec.replicas
            _store(recs, old, Recommendation(prenormalized, now))
        return highest

    def stabilize_with_behaviors(
        self,
        key: str,
        current_replicas: int,
        prenormalized: int,
        up: ScalingRules,
        down: ScalingRules,
        now: datetime,
    ) -> tuple[int, tuple[str, str]]:
        """Upstream's ``stabilizeRecommendationWithBehaviors``: the current count held at
        least at the lowest recommendation of the scale-up window and at most at the highest
        of the scale-down window (``prenormalized`` counting in both); records
        ``prenormalized``. Returns the count and the AbleToScale reason and message for when
        it differs from ``prenormalized``."""
        up_cutoff = now - timedelta(seconds=up.stabilization_window_seconds)
        down_cutoff = now - timedelta(seconds=down.stabilization_window_seconds)
        lowest = highest = prenormalized
        with self._lock:
            recs = self._history.setdefault(key, _History()).recommendations
            old = -1
            for i, rec in enumerate(recs):
                if rec.at > up_cutoff:
                    lowest = min(lowest, rec.replicas)
                if rec.at > down_cutoff:
                    highest = max(highest, rec.replicas)
                if rec.at < up_cutoff and rec.at < down_cutoff:
                    old = i
            _store(recs, old, Recommendation(prenormalized, now))
        recommendation = min(max(current_replicas, lowest), highest)
        able = UP_STABILIZED if prenormalized >= current_replicas else DOWN_STABILIZED
        return recommendation, able

    def convert_with_behavior_rate(
        self,
        key: str,
        current_replicas: int,
        desired: int,
        min_replicas: int,
        max_replicas: int,
        up: ScalingRules,
        down: ScalingRules,
        now: datetime,
    ) -> tuple[int, str, str]:
        """Upstream's ``convertDesiredReplicasWithBehaviorRate``: the count within the
        policies' rate and the bounds, with the ScalingLimited reason and message."""
        with self._lock:
            h = self._history.setdefault(key, _History())
            up_events, down_events = list(h.up), list(h.down)
        if desired > current_replicas:
            limit = max(
                scale_up_limit_with_rules(current_replicas, up_events, down_events, up, now),
                current_replicas,
            )
            if max_replicas > limit:
                maximum, reason = limit, UP_LIMIT
            else:
                maximum, reason = max_replicas, TOO_MANY
            if desired > maximum:
                return (maximum, *reason)
        elif desired < current_replicas:
            limit = min(
                scale_down_limit_with_rules(current_replicas, up_events, down_events, down, now),
                current_replicas,
            )
            if min_replicas < limit:
                minimum, reason = limit, DOWN_LIMIT
            else:
                minimum, reason = min_replicas, TOO_FEW
            if desired < minimum:
                return (minimum, *reason)
        return (desired, *WITHIN_RANGE)

    def record_scale(
        self,
        key: str,
        hpa: Mapping[str, Any],
        previous_replicas: int,
        new_replicas: int,
        now: datetime,
    ) -> None:
        """Record a rescale from ``previous_replicas`` to ``new_replicas`` (upstream's
        ``storeScaleEvent``); nothing without ``spec.behavior``, whose limits alone read
        these events."""
        rules = self.rules(hpa)
        if rules is None:
            return
        up, down = rules
        with self._lock:
            h = self._history.setdefault(key, _History())
            if new_replicas > previous_replicas:
                events, longest, change = (
                    h.up,
                    _longest_period(up),
                    new_replicas - previous_replicas,
                )
            else:
                events, longest = h.down, _longest_period(down)
                change = previous_replicas - new_replicas
            cutoff = now - timedelta(seconds=longest)
            old = -1
            for i, event in enumerate(events):
                if event.at < cutoff:
                    event.outdated = True
                if event.outdated:
                    old = i
            _store(events, old, ScaleEvent(change, now))


def _store(entries: list[Any], old: int, entry: Any) -> None:
    """Overwrite the entry at ``old`` (an expired one), or append when it is -1."""
    if old >= 0:
        entries[old] = entry
    else:
        entries.append(entry)
