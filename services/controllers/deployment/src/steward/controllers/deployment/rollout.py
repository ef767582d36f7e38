"""The Deployment controller's arithmetic, without I/O: surge and unavailability, which
ReplicaSet is new, proportional scaling, revisions, conditions and the status — each as
upstream's pkg/controller/deployment (v1.37) computes it.

Deployments and ReplicaSets are the API server's JSON (dicts); functions that change one
change it in place and say whether they did. Missing fields read as the API server's
defaults.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from steward import copy_json, format_time, parse_time

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
HASH_LABEL = "pod-template-hash"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ROLLBACK_TO = "deprecated.deployment.rollback.to"
MAX_INT32 = 2**31 - 1
MAX_REVISION_HISTORY_CHARS = 2000

# Condition reasons (upstream's deploymentutil constants).
REPLICA_SET_UPDATED = "ReplicaSetUpdated"
FAILED_RS_CREATE = "ReplicaSetCreateError"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"

_SKIP_ANNOTATIONS = frozenset(
    {LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, ROLLBACK_TO}
)

Obj = dict[str, Any]


# Fields ---------------------------------------------------------------------------------
def meta(obj: Obj) -> Obj:
    return obj.setdefault("metadata", {})  # type: ignore[no-any-return]


def annotations_of(obj: Obj) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def replicas(obj: Obj) -> int:
    """``spec.replicas`` (1 when absent, the API server's default)."""
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def status_int(obj: Obj, field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def strategy_type(d: Obj) -> str:
    return str(((d.get("spec") or {}).get("strategy") or {}).get("type") or "RollingUpdate")


def is_rolling(d: Obj) -> bool:
    return strategy_type(d) == "RollingUpdate"


def progress_deadline(d: Obj) -> int | None:
    """``spec.progressDeadlineSeconds``, None when there is none (absent or MaxInt32)."""
    value = (d.get("spec") or {}).get("progressDeadlineSeconds")
    if value is None or int(value) == MAX_INT32:
        return None
    return int(value)


def history_limit(d: Obj) -> int | None:
    value = (d.get("spec") or {}).get("revisionHistoryLimit")
    if value is None or int(value) == MAX_INT32:
        return None
    return int(value)


# Surge and unavailability -----------------------------------------------------------------
def scaled_value(value: int | str | None, total: int, round_up: bool) -> int:
    """An int-or-percent against ``total`` (percentages rounded up or down).

    Raises:
        ValueError: a string that is not ``N%``.
    """
    if value is None:
        raise ValueError("nil value for IntOrString")
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ValueError(f"invalid value for IntOrString: {value!r} is not a percentage")
    pct = int(value[:-1])
    exact = pct * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def resolve_fenceposts(
    max_surge: int | str | None, max_unavailable: int | str | None, desired: int
) -> tuple[int, int]:
    """(surge, unavailable): surge rounded up, unavailable rounded down; both zero would
    wedge a rollout, so unavailable becomes 1."""
    surge = scaled_value(0 if max_surge is None else max_surge, desired, True)
    unavailable = scaled_value(0 if max_unavailable is None else max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _rolling_params(d: Obj) -> tuple[int | str | None, int | str | None]:
    ru = ((d.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    return ru.get("maxSurge"), ru.get("maxUnavailable")


def max_surge(d: Obj) -> int:
    if not is_rolling(d):
        return 0
    surge, _ = resolve_fenceposts(*_rolling_params(d), replicas(d))
    return surge


def max_unavailable(d: Obj) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    _, unavailable = resolve_fenceposts(*_rolling_params(d), replicas(d))
    return min(unavailable, replicas(d))


# ReplicaSet selection -------------------------------------------------------------------
def by_creation(rs: Obj) -> tuple[str, str]:
    """Oldest first, then by name (ReplicaSetsByCreationTimestamp)."""
    return (str(meta(rs).get("creationTimestamp") or ""), str(meta(rs).get("name") or ""))


def _prune(value: Any) -> Any:
    """Drop empty and null members, as semantic equality treats them as absent."""
    if isinstance(value, dict):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [], "", 0, False)}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def equal_ignore_hash(t1: Obj, t2: Obj) -> bool:
    """Whether two pod templates are equal once the pod-template-hash label is removed."""
    a, b = copy_json(t1), copy_json(t2)
    for t in (a, b):
        labels = (t.get("metadata") or {}).get("labels")
        if labels:
            labels.pop(HASH_LABEL, None)
    return bool(_prune(a) == _prune(b))


def template(obj: Obj) -> Obj:
    return (obj.get("spec") or {}).get("template") or {}


def find_new(d: Obj, rs_list: Sequence[Obj]) -> Obj | None:
    """The oldest ReplicaSet whose template equals the Deployment's."""
    for rs in sorted(rs_list, key=by_creation):
        if equal_ignore_hash(template(rs), template(d)):
            return rs
    return None


def find_old(d: Obj, rs_list: Sequence[Obj]) -> list[Obj]:
    """Every ReplicaSet but the new one."""
    new = find_new(d, rs_list)
    new_uid = meta(new).get("uid") if new is not None else None
    return [rs for rs in rs_list if new is None or meta(rs).get("uid") != new_uid]


def active(rs_list: Iterable[Obj | None]) -> list[Obj]:
    return [rs for rs in rs_list if rs is not None and replicas(rs) > 0]


def revision(obj: Obj) -> int:
    """The revision annotation (0 when absent).

    Raises:
        ValueError: it is not an integer.
    """
    value = annotations_of(obj).get(REVISION)
    return 0 if value is None else int(value)


def max_revision(rs_list: Iterable[Obj]) -> int:
    best = 0
    for rs in rs_list:
        try:
            best = max(best, revision(rs))
        except ValueError:
            continue
    return best


def by_revision(rs: Obj) -> tuple[int, str, str]:
    try:
        rev = revision(rs)
    except ValueError:
        rev = -1
    return (rev, *by_creation(rs))


def find_active_or_latest(new: Obj | None, old: Sequence[Obj]) -> Obj | None:
    """The one active ReplicaSet, or the latest when none is active; None when several."""
    if new is None and not old:
        return None
    newest_first = sorted(old, key=by_creation, reverse=True)
    live = active([*newest_first, new])
    if not live:
        return new if new is not None else newest_first[0]
    return live[0] if len(live) == 1 else None


# Annotations ----------------------------------------------------------------------------
def set_replicas_annotations(rs: Obj, desired: int, maximum: int) -> bool:
    ann = meta(rs).setdefault("annotations", {})
    changed = False
    for key, value in ((DESIRED_REPLICAS, str(desired)), (MAX_REPLICAS, str(maximum))):
        if ann.get(key) != value:
            ann[key] = value
            changed = True
    return changed


def replicas_annotations_need_update(rs: Obj, desired: int, maximum: int) -> bool:
    ann = annotations_of(rs)
    return ann.get(DESIRED_REPLICAS) != str(desired) or ann.get(MAX_REPLICAS) != str(maximum)


def _annotation_int(rs: Obj, key: str) -> int | None:
    value = annotations_of(rs).get(key)
    if value is None or not value.isdigit() or int(value) > MAX_INT32:
        return None
    return int(value)


def set_new_rs_annotations(d: Obj, rs: Obj, new_revision: int, exists: bool) -> bool:
    """Copy the Deployment's annotations (but the controller's own) to the new
    ReplicaSet, raise its revision (remembering the old one in revision-history), and for
    a ReplicaSet about to be created set desired/max replicas. True if anything changed."""
    ann = meta(rs).setdefault("annotations", {})
    changed = False
    for key, value in annotations_of(d).items():
        if key in _SKIP_ANNOTATIONS or ann.get(key) == value:
            continue
        ann[key] = value
        changed = True
    had = REVISION in ann
    old_text = ann.get(REVISION, "")
    try:
        old = int(old_text) if old_text else 0
    except ValueError:
        return False
    if old < new_revision:
        ann[REVISION] = str(new_revision)
        changed = True
        if had:
            history = ann.get(REVISION_HISTORY, "")
            parts = history.split(",")
            if not parts[0]:
                ann[REVISION_HISTORY] = old_text
            else:
                total = len(history) + len(old_text) + 1
                start = 0
                while total > MAX_REVISION_HISTORY_CHARS and start < len(parts):
                    total -= len(parts[start]) + 1
                    start += 1
                if total <= MAX_REVISION_HISTORY_CHARS:
                    ann[REVISION_HISTORY] = ",".join([*parts[start:], old_text])
    if not exists and set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)):
        changed = True
    return changed


def set_deployment_revision(d: Obj, rev: str) -> bool:
    ann = meta(d).setdefault("annotations", {})
    if ann.get(REVISION) != rev:
        ann[REVISION] = rev
        return True
    return False


# Scaling --------------------------------------------------------------------------------
def new_rs_new_replicas(d: Obj, all_rss: Sequence[Obj | None], new: Obj) -> int:
    """How many replicas the new ReplicaSet may have now."""
    if strategy_type(d) == "Recreate":
        return replicas(d)
    surge = scaled_value(_rolling_params(d)[0], replicas(d), True)
    current = sum(replicas(rs) for rs in all_rss if rs is not None)
    max_total = replicas(d) + surge
    if current >= max_total:
        return replicas(new)
    scale_up = min(max_total - current, replicas(d) - replicas(new))
    return replicas(new) + scale_up


class InvalidScale(Exception):
    """A step would scale an old ReplicaSet up where it may only scale it down."""


def unhealthy_cleanup(old: Sequence[Obj], most: int) -> list[tuple[int, int]]:
    """Upstream's ``cleanupUnhealthyReplicas``: scale old ReplicaSets (``old``, oldest
    first) down by their unavailable pods, at most ``most`` pods in all. Returns (index
    into ``old``, new size) pairs.

    Raises:
        InvalidScale: a ReplicaSet reports more available pods than it asks for (its
            status lags a scale-down): the step would scale it *up*, past the surge.
            Upstream fails the sync then, and so does this; the retry sees the status
            caught up.
    """
    plan: list[tuple[int, int]] = []
    total = 0
    for i, rs in enumerate(old):
        if total >= most:
            break
        size, available = replicas(rs), status_int(rs, "availableReplicas")
        if size == 0 or size == available:
            continue
        down = min(most - total, size - available)
        if down < 0:
            raise InvalidScale(
                "when cleaning up unhealthy replicas, got invalid request to scale down "
                f"{meta(rs).get('namespace', '')}/{meta(rs).get('name')} {size} -> {size - down}"
            )
        plan.append((i, size - down))
        total += down
    return plan


def is_saturated(d: Obj, rs: Obj | None) -> bool:
    if rs is None:
        return False
    desired = annotations_of(rs).get(DESIRED_REPLICAS, "")
    try:
        want = int(desired)
    except ValueError:
        return False
    return (
        replicas(rs) == replicas(d)
        and want == replicas(d)
        and status_int(rs, "availableReplicas") == replicas(d)
    )


def _round(x: float) -> int:
    """Round half away from zero (Go's math.Round)."""
    return math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)


def rs_fraction(rs: Obj, d: Obj) -> int:
    """How much of a scaling event falls to this ReplicaSet."""
    if replicas(d) == 0:
        return -replicas(rs)
    deployment_max = replicas(d) + max_surge(d)
    before = _annotation_int(rs, MAX_REPLICAS)
    if not before:
        before = status_int(d, "replicas")
        if before == 0:
            return 0
    return _round(replicas(rs) * deployment_max / before) - replicas(rs)


def rs_proportion(rs: Obj | None, d: Obj, to_add: int, added: int) -> int:
    if rs is None or replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = rs_fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def proportional_sizes(d: Obj, all_active: Sequence[Obj]) -> list[tuple[Obj, int]]:
    """New sizes of the active ReplicaSets when the Deployment was scaled mid-rollout:
    the difference spread in proportion to their sizes, the leftover to the largest."""
    total = sum(replicas(rs) for rs in all_active)
    allowed = replicas(d) + max_surge(d) if replicas(d) > 0 else 0
    to_add = allowed - total
    rss = list(all_active)
    if to_add > 0:  # largest first, newer first among equals
        rss.sort(key=lambda r: by_creation(r), reverse=True)
        rss.sort(key=replicas, reverse=True)
    elif to_add < 0:  # largest first, older first among equals
        rss.sort(key=by_creation)
        rss.sort(key=replicas, reverse=True)
    added = 0
    sizes: list[int] = []
    for rs in rss:
        if to_add != 0:
            part = rs_proportion(rs, d, to_add, added)
            sizes.append(replicas(rs) + part)
            added += part
        else:
            sizes.append(replicas(rs))
    if rss and to_add != 0:
        sizes[0] = max(0, sizes[0] + to_add - added)
    return list(zip(rss, sizes, strict=True))


# Conditions and status ------------------------------------------------------------------
def new_condition(ctype: str, status: str, reason: str, message: str, now: datetime) -> Obj:
    stamp = format_time(now)
    return {
        "type": ctype,
        "status": status,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def get_condition(status: Obj, ctype: str) -> Obj | None:
    for cond in status.get("conditions") or ():
        if cond.get("type") == ctype:
            return cond  # type: ignore[no-any-return]
    return None


def set_condition(status: Obj, cond: Obj) -> None:
    """Set a condition unless one of the same status and reason is there; a change of
    reason keeps the transition time when the status is the same."""
    current = get_condition(status, cond["type"])
    if current is not None and (current.get("status"), current.get("reason")) == (
        cond["status"],
        cond["reason"],
    ):
        return
    cond = dict(cond)
    if current is not None and current.get("status") == cond["status"]:
        cond["lastTransitionTime"] = current.get("lastTransitionTime")
    rest = [c for c in status.get("conditions") or () if c.get("type") != cond["type"]]
    status["conditions"] = [*rest, cond]


def remove_condition(status: Obj, ctype: str) -> None:
    rest = [c for c in status.get("conditions") or () if c.get("type") != ctype]
    if rest:
        status["conditions"] = rest
    else:
        status.pop("conditions", None)


def terminating_replicas(rss: Iterable[Obj | None]) -> int | None:
    total = 0
    for rs in rss:
        if rs is None:
            continue
        st = rs.get("status") or {}
        value = st.get("terminatingReplicas")
        if value is None:
            if not st.get("observedGeneration"):
                continue
            return None
        total += int(value)
    return total


def calculate_status(all_rss: Sequence[Obj | None], new: Obj | None, d: Obj, now: datetime) -> Obj:
    """The status from the ReplicaSets, with the Available condition; other conditions
    carried over."""
    rss = [rs for rs in all_rss if rs is not None]
    available = sum(status_int(rs, "availableReplicas") for rs in rss)
    total = sum(replicas(rs) for rs in rss)
    old = d.get("status") or {}
    status: Obj = {
        "observedGeneration": int(meta(d).get("generation") or 0),
        "replicas": sum(status_int(rs, "replicas") for rs in rss),
        "updatedReplicas": status_int(new, "replicas") if new is not None else 0,
        "readyReplicas": sum(status_int(rs, "readyReplicas") for rs in rss),
        "availableReplicas": available,
        "unavailableReplicas": max(0, total - available),
    }
    if old.get("collisionCount") is not None:
        status["collisionCount"] = old["collisionCount"]
    terminating = terminating_replicas(rss)
    if terminating is not None:
        status["terminatingReplicas"] = terminating
    if old.get("conditions"):
        status["conditions"] = copy_json(old["conditions"])
    if available >= replicas(d) - max_unavailable(d):
        set_condition(
            status,
            new_condition(
                "Available", "True", MIN_AVAILABLE, "Deployment has minimum availability.", now
            ),
        )
    else:
        set_condition(
            status,
            new_condition(
                "Available",
                "False",
                MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.",
                now,
            ),
        )
    return status


def deployment_complete(d: Obj, status: Obj) -> bool:
    want = replicas(d)
    return (
        int(status.get("updatedReplicas") or 0) == want
        and int(status.get("replicas") or 0) == want
        and int(status.get("availableReplicas") or 0) == want
        and int(status.get("observedGeneration") or 0) >= int(meta(d).get("generation") or 0)
    )


def deployment_progressing(d: Obj, status: Obj) -> bool:
    old = d.get("status") or {}

    def g(s: Obj, f: str) -> int:
        return int(s.get(f) or 0)

    return (
        g(status, "updatedReplicas") > g(old, "updatedReplicas")
        or g(status, "replicas") - g(status, "updatedReplicas")
        < g(old, "replicas") - g(old, "updatedReplicas")
        or g(status, "readyReplicas") > g(old, "readyReplicas")
        or g(status, "availableReplicas") > g(old, "availableReplicas")
    )


def deployment_timed_out(d: Obj, status: Obj, now: datetime) -> bool:
    deadline = progress_deadline(d)
    if deadline is None:
        return False
    cond = get_condition(status, "Progressing")
    if cond is None or cond.get("reason") == NEW_RS_AVAILABLE:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    since = parse_time(cond.get("lastUpdateTime"))
    return since is not None and since + timedelta(seconds=deadline) < now


def rs_to_deployment_condition(cond: Obj) -> Obj:
    return {
        "type": cond.get("type"),
        "status": cond.get("status"),
        "lastUpdateTime": cond.get("lastTransitionTime"),
        "lastTransitionTime": cond.get("lastTransitionTime"),
        "reason": cond.get("reason"),
        "message": cond.get("message"),
    }


def replica_failures(all_rss: Sequence[Obj | None], new: Obj | None) -> list[Obj]:
    def of(rs: Obj) -> list[Obj]:
        return [
            rs_to_deployment_condition(c)
            for c in (rs.get("status") or {}).get("conditions") or ()
            if c.get("type") == "ReplicaFailure"
        ]

    if new is not None and (found := of(new)):
        return found
    return [c for rs in all_rss if rs is not None for c in of(rs)]


def rollout_status(
    all_rss: Sequence[Obj | None], new: Obj | None, d: Obj, now: datetime
) -> tuple[Obj, float | None]:
    """The status after a rollout step (Progressing condition included) and, when it is
    unchanged and a deadline may pass, the seconds after which to look again."""
    status = calculate_status(all_rss, new, d, now)
    deadline = progress_deadline(d)
    if deadline is None:
        remove_condition(status, "Progressing")
    current = get_condition(d.get("status") or {}, "Progressing")
    complete = (
        status["replicas"] == status["updatedReplicas"]
        and current is not None
        and current.get("reason") == NEW_RS_AVAILABLE
    )
    name = meta(d).get("name")
    rs_name = meta(new).get("name") if new is not None else None
    if deadline is not None and not complete:
        if deployment_complete(d, status):
            msg = (
                f'ReplicaSet "{rs_name}" has successfully progressed.'
                if new is not None
                else f'Deployment "{name}" has successfully progressed.'
            )
            set_condition(status, new_condition("Progressing", "True", NEW_RS_AVAILABLE, msg, now))
        elif deployment_progressing(d, status):
            msg = (
                f'ReplicaSet "{rs_name}" is progressing.'
                if new is not None
                else f'Deployment "{name}" is progressing.'
            )
            cond = new_condition("Progressing", "True", REPLICA_SET_UPDATED, msg, now)
            if current is not None:
                if current.get("status") == "True":
                    cond["lastTransitionTime"] = current.get("lastTransitionTime")
                remove_condition(status, "Progressing")
            set_condition(status, cond)
        elif deployment_timed_out(d, status, now):
            msg = (
                f'ReplicaSet "{rs_name}" has timed out progressing.'
                if new is not None
                else f'Deployment "{name}" has timed out progressing.'
            )
            set_condition(status, new_condition("Progressing", "False", TIMED_OUT, msg, now))
    failures = replica_failures(all_rss, new)
    if failures:
        set_condition(status, failures[0])
    else:
        remove_condition(status, "ReplicaFailure")
    requeue: float | None = None
    if (
        status_equal(d.get("status") or {}, status)
        and deadline is not None
        and current
        and not deployment_complete(d, status)
        and current.get("reason") != TIMED_OUT
    ):
        since = parse_time(current.get("lastUpdateTime")) or now
        after = (since + timedelta(seconds=deadline) - now).total_seconds()
        requeue = 0.5 if after < 1 else after + 1
    return status, requeue


def status_equal(a: Obj, b: Obj) -> bool:
    """Whether two statuses are the same (absent fields as their zero value)."""
    return bool(_prune(a) == _prune(b))
