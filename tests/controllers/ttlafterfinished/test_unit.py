"""The TTL-after-finished controller's decisions
(:mod:`steward.controllers.ttlafterfinished.expiry`) and its declaration, without a
cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from steward import JOBS
from steward.controllers.ttlafterfinished.controller import (
    CONTROLLER,
    DELETION_DURATION,
    FIELDS,
    added_or_updated,
)
from steward.controllers.ttlafterfinished.expiry import (
    UntimedError,
    finish_time,
    is_finished,
    needs_cleanup,
    time_left,
    wants_cleanup,
)
from steward.runtime.meta import Meta
from steward.runtime.mirror import Change, ChangeKind, MirrorObject

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def job(
    *conditions: tuple[str, str, str | None], ttl: int | None = 10, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": "j", "uid": "u"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T11:00:00Z"
    spec: dict[str, Any] = {} if ttl is None else {"ttlSecondsAfterFinished": ttl}
    status = {
        "conditions": [
            {"type": t, "status": s, **({"lastTransitionTime": at} if at else {})}
            for t, s, at in conditions
        ]
    }
    return {"metadata": meta, "spec": spec, "status": status}


COMPLETE = ("Complete", "True", "2026-12-07T11:59:55Z")
FAILED = ("Failed", "True", "2026-12-07T11:59:50Z")


@pytest.mark.parametrize(
    ("conditions", "finished"),
    [
        ((COMPLETE,), True),
        ((FAILED,), True),
        ((("Complete", "False", "2026-12-07T11:59:55Z"),), False),
        ((("Failed", "Unknown", "2026-12-07T11:59:55Z"),), False),
        ((("SuccessCriteriaMet", "True", "2026-12-07T11:59:55Z"),), False),
        ((("FailureTarget", "True", "2026-12-07T11:59:55Z"),), False),
        ((("Suspended", "True", "2026-12-07T11:59:55Z"),), False),
        ((), False),
    ],
)
def test_finished_is_a_true_complete_or_failed_condition(
    conditions: tuple[tuple[str, str, str | None], ...], finished: bool
) -> None:
    assert is_finished(job(*conditions)) is finished
    assert needs_cleanup(job(*conditions)) is finished


def test_cleanup_needs_a_ttl_and_no_deletion_under_way() -> None:
    assert needs_cleanup(job(COMPLETE, ttl=0))  # 0 is a TTL
    assert not needs_cleanup(job(COMPLETE, ttl=None))
    assert needs_cleanup(job(COMPLETE, deleting=True))
    assert not wants_cleanup(job(COMPLETE, deleting=True))
    assert wants_cleanup(job(COMPLETE))


def test_the_first_finished_condition_gives_the_finish_time() -> None:
    both = job(("Complete", "False", "2026-12-07T10:00:00Z"), FAILED, COMPLETE)
    assert finish_time(both) == datetime(2026, 12, 7, 11, 59, 50, tzinfo=UTC)


@pytest.mark.parametrize("at", [None, "", "yesterday"])
def test_a_finished_job_without_its_time_cannot_be_timed(at: str | None) -> None:
    with pytest.raises(UntimedError, match="unable to find the time"):
        time_left(job(("Complete", "True", at)), NOW)


def test_a_job_not_finished_or_without_ttl_cannot_be_timed() -> None:
    with pytest.raises(UntimedError, match="has not finished"):
        time_left(job(), NOW)
    with pytest.raises(UntimedError, match="no ttlSecondsAfterFinished"):
        time_left(job(COMPLETE, ttl=None), NOW)


def test_time_left_is_the_expiry_less_now() -> None:
    left = time_left(job(COMPLETE, ttl=10), NOW)  # finished 5 s ago
    assert left.finished_at == datetime(2026, 12, 7, 11, 59, 55, tzinfo=UTC)
    assert left.expires_at == datetime(2026, 12, 7, 12, 0, 5, tzinfo=UTC)
    assert left.remaining == timedelta(seconds=5)
    assert not left.expired and not left.skewed


@pytest.mark.parametrize(("ttl", "expired"), [(4, True), (5, True), (6, False)])
def test_expired_once_the_remaining_time_is_zero_or_less(ttl: int, expired: bool) -> None:
    assert time_left(job(COMPLETE, ttl=ttl), NOW).expired is expired


def test_a_finish_in_the_future_is_skew_and_waits_the_whole_ttl_from_it() -> None:
    future = job(("Failed", "True", "2026-12-07T13:00:00Z"), ttl=0)
    left = time_left(future, NOW)
    assert left.skewed
    assert left.remaining == timedelta(hours=1)
    assert not left.expired


def change(kind: ChangeKind, obj: dict[str, Any]) -> Change:
    mirrored = MirrorObject(JOBS, Meta("ns", "j", "u", "1"), orjson.dumps(obj))
    return Change(kind, mirrored, mirrored if kind is ChangeKind.MODIFIED else None, None)


@pytest.mark.parametrize(
    ("kind", "obj", "queued"),
    [
        (ChangeKind.ADDED, job(COMPLETE), True),
        (ChangeKind.MODIFIED, job(FAILED), True),
        (ChangeKind.DELETED, job(COMPLETE), False),
        (ChangeKind.ADDED, job(), False),
        (ChangeKind.MODIFIED, job(COMPLETE, ttl=None), False),
        (ChangeKind.MODIFIED, job(COMPLETE, deleting=True), False),
    ],
)
def test_handlers_queue_the_jobs_that_want_their_cleanup(
    kind: ChangeKind, obj: dict[str, Any], queued: bool
) -> None:
    assert added_or_updated(change(kind, obj)) is queued


def test_declaration() -> None:
    assert CONTROLLER.name == "ttl-after-finished"
    assert CONTROLLER.primary == JOBS
    assert CONTROLLER.options.queue_name == "ttl_jobs_to_delete"
    assert CONTROLLER.options.max_concurrent_reconciles == 5
    assert CONTROLLER.beside_upstream is None
    flags = CONTROLLER.flag_parser().parse_args(["--concurrent-ttl-after-finished-syncs=8"])
    assert flags.workers == 8
    assert set(FIELDS) == {
        "spec.ttlSecondsAfterFinished",
        "status.conditions.type",
        "status.conditions.status",
        "status.conditions.lastTransitionTime",
    }


def test_the_histogram_is_upstreams() -> None:
    upper = [b for b in DELETION_DURATION._upper_bounds]
    assert upper[:3] == [0.1, 0.2, 0.4]
    assert len(upper) == 15  # fourteen buckets and +Inf
    assert upper[13] == pytest.approx(819.2)
    assert DELETION_DURATION._name == (
        "ttl_after_finished_controller_job_deletion_duration_seconds"
    )
