"""Pod failure policy, backoff limit per index, success policy, pod replacement policy
and elastic Indexed Jobs in the sync decisions, table by table (no I/O)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from steward.controllers.job import failure_policy, indexes, success_policy
from steward.controllers.job.sync import JobSync
from tests.controllers.job.test_sync import NOW, T, ctypes, job, pod, run

pytestmark = pytest.mark.unit


def failed(
    exit_code: int | None = 1,
    *,
    container: str = "c",
    init: bool = False,
    condition: str | None = None,
    index: int | None = None,
    counts: tuple[int, int] = (0, 0),
    phase: str = "Failed",
) -> dict[str, Any]:
    """A pod ended the way a kubelet reports it: terminated container, pod conditions,
    and for Indexed Jobs its index and failure-count annotations."""
    p = pod(phase, index=index)
    p["metadata"]["namespace"] = "ns"
    if index is not None:
        annotations = p["metadata"]["annotations"]
        annotations[indexes.FAILURE_COUNT_KEY] = str(counts[0])
        if counts[1]:
            annotations[indexes.IGNORED_FAILURE_COUNT_KEY] = str(counts[1])
    if exit_code is not None:
        key = "initContainerStatuses" if init else "containerStatuses"
        p["status"][key] = [
            {"name": container, "state": {"terminated": {"exitCode": exit_code, "finishedAt": T}}}
        ]
    if condition is not None:
        p["status"]["conditions"] = [{"type": condition, "status": "True", "lastTransitionTime": T}]
    return p


def on_exit(action: str, operator: str, *values: int, container: str | None = None) -> Any:
    req: dict[str, Any] = {"operator": operator, "values": list(values)}
    if container is not None:
        req["containerName"] = container
    return {"action": action, "onExitCodes": req}


def on_condition(action: str, ctype: str = "DisruptionTarget") -> dict[str, Any]:
    return {"action": action, "onPodConditions": [{"type": ctype, "status": "True"}]}


# Pod failure policy: matching --------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "p", "action", "counts"),
    [
        ([on_exit("FailJob", "In", 42)], failed(42), "FailJob", True),
        ([on_exit("FailJob", "In", 42)], failed(1), None, True),
        ([on_exit("Ignore", "NotIn", 1, 2)], failed(3), "Ignore", False),
        ([on_exit("Ignore", "NotIn", 1, 2)], failed(2), None, True),
        ([on_exit("Ignore", "NotIn", 1)], failed(0), None, True),  # 0 never matches
        ([on_exit("Count", "In", 5, container="other")], failed(5), None, True),
        ([on_exit("Count", "In", 5, container="c")], failed(5), "Count", True),
        ([on_exit("FailJob", "In", 7)], failed(7, init=True), "FailJob", True),
        ([on_condition("Ignore")], failed(None, condition="DisruptionTarget"), "Ignore", False),
        ([on_condition("Ignore")], failed(1, condition="Ready"), None, True),
        (  # the first matching rule wins
            [on_condition("Ignore"), on_exit("FailJob", "In", 1)],
            failed(1, condition="DisruptionTarget"),
            "Ignore",
            False,
        ),
        (
            [on_exit("Count", "In", 9), on_exit("FailIndex", "In", 1)],
            failed(1),
            "FailIndex",
            True,
        ),
        (
            [{"action": "Unknown", "onExitCodes": {"operator": "In", "values": [1]}}],
            failed(),
            None,
            True,
        ),
    ],
)
def test_failure_policy_match(
    rules: list[dict[str, Any]], p: dict[str, Any], action: str | None, counts: bool
) -> None:
    got = failure_policy.match({"rules": rules}, p)
    assert (got.action, got.counts) == (action, counts)


def test_failure_policy_messages_and_no_policy() -> None:
    p = failed(42)
    name = p["metadata"]["name"]
    got = failure_policy.match(
        {"rules": [on_exit("Count", "In", 1), on_exit("FailJob", "In", 42)]}, p
    )
    assert got.message == (
        f"Container c for pod ns/{name} failed with exit code 42 matching FailJob rule at index 1"
    )
    q = failed(None, condition="DisruptionTarget")
    got = failure_policy.match({"rules": [on_condition("FailJob")]}, q)
    assert got.message == (
        f"Pod ns/{q['metadata']['name']} has condition DisruptionTarget matching FailJob rule "
        "at index 0"
    )
    assert failure_policy.match(None, p) == failure_policy.NO_MATCH
    running = pod("Running")
    running["status"]["containerStatuses"] = [{"name": "c", "state": {"running": {}}}]
    assert failure_policy.match({"rules": [on_exit("FailJob", "NotIn", 0)]}, running).action is None


# Pod failure policy: in the sync -------------------------------------------------------


def test_fail_job_rule_fails_the_job_through_failure_target() -> None:
    policy = {"rules": [on_exit("FailJob", "In", 42)]}
    bad, running = failed(42), pod("Running")
    spec = {"parallelism": 2, "completions": 4, "podFailurePolicy": policy}
    out = run(job(**spec, status={"startTime": T}), [bad, running])
    message = (
        f"Container c for pod ns/{bad['metadata']['name']} failed with exit code 42 "
        "matching FailJob rule at index 0"
    )
    assert out.flushed_first
    assert [(c["type"], c["reason"], c["message"]) for c in out.status["conditions"]] == [
        ("FailureTarget", "PodFailurePolicy", message)
    ]
    assert out.plan.delete == [running]
    assert out.status["failed"] == 2  # the failed pod and the one the failure deletes
    assert out.status["terminating"] == 1
    out = run(job(**spec, status=out.status), [])
    assert [(c["type"], c["reason"], c["message"]) for c in out.status["conditions"]] == [
        ("FailureTarget", "PodFailurePolicy", message),
        ("Failed", "PodFailurePolicy", message),
    ]
    assert ("Warning", "PodFailurePolicy", message) in out.events


@pytest.mark.parametrize(
    ("rule", "p", "failed_count", "terminal"),
    [
        (on_condition("Ignore"), failed(1, condition="DisruptionTarget"), 0, False),
        (on_exit("Ignore", "In", 3), failed(3), 0, False),
        (on_exit("Count", "In", 3), failed(3), 1, True),
        (on_exit("Ignore", "In", 3), failed(4), 1, True),  # no match: counted
    ],
    ids=["ignore-disruption", "ignore-exit-code", "count", "no-match"],
)
def test_ignore_does_not_count_toward_backoff_limit(
    rule: dict[str, Any], p: dict[str, Any], failed_count: int, terminal: bool
) -> None:
    spec = {"completions": 1, "backoffLimit": 0, "podFailurePolicy": {"rules": [rule]}}
    out = run(job(**spec, status={"startTime": T}), [p])
    assert out.removed == [p["metadata"]["uid"]]
    assert out.status.get("failed", 0) == failed_count
    assert out.status["uncountedTerminatedPods"] == {"succeeded": [], "failed": []}
    reasons = [r for _, _, r in ctypes(out.status)]
    assert reasons == (["BackoffLimitExceeded", "BackoffLimitExceeded"] if terminal else [])


def test_failure_policy_waits_for_failed_phase_before_replacing() -> None:
    # A podFailurePolicy implies replacement only once the old pod is Failed.
    spec = {"completions": 1, "podFailurePolicy": {"rules": [on_condition("Ignore")]}}
    going = pod("Running", deleting=True)
    out = run(job(**spec, status={"startTime": T}), [going])
    assert out.plan.create == []
    assert out.status["terminating"] == 1
    assert out.status.get("failed", 0) == 0


# Backoff limit per index ---------------------------------------------------------------


def per_index(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": 3,
        "parallelism": 3,
        "backoffLimitPerIndex": 1,
    }
    base.update(spec)
    return job(**base)


@pytest.mark.parametrize(
    ("value", "count"),
    [("3", 3), ("0", 0), ("-1", 0), ("x", 0), (str(2**31), 0), (None, 0)],
)
def test_failure_count_annotation(value: str | None, count: int) -> None:
    p = pod()
    if value is not None:
        p["metadata"]["annotations"] = {indexes.FAILURE_COUNT_KEY: value}
    assert indexes.failure_count(p) == count


def test_first_failure_of_an_index_is_retried_with_count_annotation() -> None:
    first = failed(1, index=1)
    others = [pod("Running", index=0), pod("Running", index=2)]
    status = {"startTime": T}
    # Within the index's backoff (10 s from the failure): nothing created, requeued.
    out = run(per_index(status=status), [first, *others])
    assert out.plan.create == []
    assert out.plan.requeue_after == pytest.approx(10.0)
    assert out.status["failedIndexes"] == ""
    assert out.removed == []  # kept until its replacement exists
    later = NOW + timedelta(seconds=11)
    out = run(per_index(status=status), [first, *others], later)
    assert len(out.plan.create) == 1
    annotations = out.plan.create[0]["metadata"]["annotations"]
    assert annotations[indexes.INDEX_KEY] == "1"
    assert annotations[indexes.FAILURE_COUNT_KEY] == "1"
    assert indexes.IGNORED_FAILURE_COUNT_KEY not in annotations
    assert out.removed == []
    # Once the replacement shows up, the failed pod is counted and released.
    replacement = pod("Pending", index=1)
    replacement["metadata"]["annotations"][indexes.FAILURE_COUNT_KEY] = "1"
    out = run(per_index(status=out.status), [first, replacement, *others], later)
    assert out.removed == [first["metadata"]["uid"]]
    assert out.status["failed"] == 1
    assert out.status["failedIndexes"] == ""
    assert ctypes(out.status) == []


def test_ignored_failure_of_an_index_counts_as_ignored() -> None:
    policy = {"rules": [on_condition("Ignore")]}
    first = failed(None, index=0, condition="DisruptionTarget", counts=(0, 2))
    out = run(
        per_index(completions=1, parallelism=1, podFailurePolicy=policy, status={"startTime": T}),
        [first],
        NOW + timedelta(seconds=100),
    )
    annotations = out.plan.create[0]["metadata"]["annotations"]
    assert annotations[indexes.FAILURE_COUNT_KEY] == "0"
    assert annotations[indexes.IGNORED_FAILURE_COUNT_KEY] == "3"


@pytest.mark.parametrize(
    ("spec", "pods_", "failed_indexes", "reason"),
    [
        # Index 1 failed past its limit; the others still run.
        ({}, [failed(1, index=1, counts=(1, 0)), pod(index=0), pod(index=2)], "1", None),
        # Every index succeeded or failed: the Job fails with FailedIndexes.
        (
            {},
            [
                pod("Succeeded", index=0),
                failed(1, index=1, counts=(1, 0)),
                pod("Succeeded", index=2),
            ],
            "1",
            "FailedIndexes",
        ),
        # More failed indexes than allowed.
        (
            {"maxFailedIndexes": 0},
            [failed(1, index=1, counts=(1, 0)), pod(index=0)],
            "1",
            "MaxFailedIndexesExceeded",
        ),
        # FailIndex fails the index at its first failure.
        (
            {"podFailurePolicy": {"rules": [on_exit("FailIndex", "In", 3)]}},
            [failed(3, index=0), failed(3, index=2), pod(index=1)],
            "0,2",
            None,
        ),
        # Earlier failed indexes are kept.
        (
            {"status": {"startTime": T, "failedIndexes": "0"}},
            [pod(index=1), pod(index=2)],
            "0",
            None,
        ),
    ],
    ids=["one-failed", "failed-indexes", "max-failed-indexes", "fail-index", "kept"],
)
def test_failed_indexes(
    spec: dict[str, Any], pods_: list[dict[str, Any]], failed_indexes: str, reason: str | None
) -> None:
    spec.setdefault("status", {"startTime": T})
    out = run(per_index(**spec), pods_)
    assert out.status["failedIndexes"] == failed_indexes
    if reason is None:
        assert ctypes(out.status) == []
        # A failed index is never re-created.
        created = {p["metadata"]["annotations"][indexes.INDEX_KEY] for p in out.plan.create}
        assert not created & set(failed_indexes.split(","))
    else:
        assert ctypes(out.status)[0] == ("FailureTarget", "True", reason)


def test_failed_index_message() -> None:
    pods_ = [failed(1, index=0, counts=(1, 0)), pod("Succeeded", index=1)]
    out = run(per_index(completions=2, parallelism=2, status={"startTime": T}), pods_)
    assert [(c["type"], c["reason"], c["message"]) for c in out.status["conditions"]] == [
        ("FailureTarget", "FailedIndexes", "Job has failed indexes"),
        ("Failed", "FailedIndexes", "Job has failed indexes"),
    ]
    assert out.status["failed"] == 1
    assert out.status["succeeded"] == 1
    assert out.status["completedIndexes"] == "1"


def test_per_index_default_backoff_limit_is_unbounded() -> None:
    pods_ = [failed(1, index=ix) for ix in range(3)]
    j = per_index(status={"startTime": T})
    del j["spec"]["backoffLimit"]
    sync = JobSync(j, pods_, NOW)
    assert sync.backoff_limit == 2**31 - 1


# Success policy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "succeeded", "message"),
    [
        ([{"succeededIndexes": "0,2"}], "0,2", "Matched rules at index 0"),
        ([{"succeededIndexes": "0-2"}], "0,2", None),
        ([{"succeededIndexes": "0-2", "succeededCount": 2}], "0,2", "Matched rules at index 0"),
        ([{"succeededIndexes": "0-2", "succeededCount": 3}], "0,1,4", None),
        ([{"succeededCount": 3}], "1,3,4", "Matched rules at index 0"),
        ([{"succeededCount": 4}], "1,3,4", None),
        ([{"succeededIndexes": "9"}, {"succeededCount": 1}], "0", "Matched rules at index 1"),
        ([{"succeededIndexes": "x"}], "0-4", None),
        ([{"succeededCount": 1}], "", None),
        ([{"succeededIndexes": "3-4,1"}], "1,3,4", "Matched rules at index 0"),
    ],
)
def test_success_policy_match(
    rules: list[dict[str, Any]], succeeded: str, message: str | None
) -> None:
    done = indexes.parse_intervals(succeeded, 5)
    assert success_policy.match({"rules": rules}, 5, done) == message


def test_success_policy_completes_and_terminates_the_rest() -> None:
    policy = {"rules": [{"succeededIndexes": "0"}]}
    spec = {"completionMode": "Indexed", "completions": 3, "parallelism": 3}
    rest = [pod("Running", index=1), pod("Running", index=2)]
    out = run(
        job(**spec, successPolicy=policy, status={"startTime": T}),
        [pod("Succeeded", index=0), *rest],
    )
    assert out.plan.delete == rest
    assert out.status["terminating"] == 2
    assert out.status["completedIndexes"] == "0"
    assert out.status.get("failed", 0) == 0  # the pods it terminates are not failures
    assert [(c["type"], c["reason"], c["message"]) for c in out.status["conditions"]] == [
        ("SuccessCriteriaMet", "SuccessPolicy", "Matched rules at index 0")
    ]
    out = run(job(**spec, successPolicy=policy, status=out.status), [])
    assert ctypes(out.status) == [
        ("SuccessCriteriaMet", "True", "SuccessPolicy"),
        ("Complete", "True", "SuccessPolicy"),
    ]
    assert out.status["completionTime"] == T
    assert out.status["succeeded"] == 1


def test_success_policy_unmet_keeps_running() -> None:
    policy = {"rules": [{"succeededCount": 2}]}
    spec = {"completionMode": "Indexed", "completions": 3, "parallelism": 3}
    out = run(
        job(**spec, successPolicy=policy, status={"startTime": T}),
        [pod("Succeeded", index=0), pod(index=1), pod(index=2)],
    )
    assert out.plan.delete == []
    assert ctypes(out.status) == []


# Pod replacement policy ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "created", "failed_count"),
    [("TerminatingOrFailed", 1, 1), ("Failed", 0, 0)],
)
def test_pod_replacement_policy(policy: str, created: int, failed_count: int) -> None:
    going = pod("Running", deleting=True)
    spec = {"completions": 2, "parallelism": 1, "podReplacementPolicy": policy}
    later = NOW + timedelta(seconds=60)  # past the re-creation backoff
    out = run(job(**spec, status={"startTime": T}), [going], later)
    assert len(out.plan.create) == created
    assert out.status["terminating"] == 1
    assert out.status.get("failed", 0) == failed_count
    # Once it is Failed, under either policy, it is replaced (after the backoff).
    gone = dict(going, status={"phase": "Failed"})
    out = run(job(**spec, status={"startTime": T}), [gone], later)
    assert len(out.plan.create) == 1
    assert out.status["terminating"] == 0
    assert out.status["failed"] == 1


def test_pod_replacement_policy_failed_keeps_terminating_index() -> None:
    going = pod("Running", deleting=True, index=0)
    spec = {
        "completionMode": "Indexed",
        "completions": 2,
        "parallelism": 2,
        "podReplacementPolicy": "Failed",
    }
    out = run(job(**spec, status={"startTime": T}), [going])
    assert [p["metadata"]["annotations"][indexes.INDEX_KEY] for p in out.plan.create] == ["1"]


# Elastic Indexed Jobs --------------------------------------------------------------------


def test_elastic_scale_down_removes_high_indexes_and_counts() -> None:
    spec = {"completionMode": "Indexed", "completions": 2, "parallelism": 2}
    status = {"startTime": T, "completedIndexes": "0,3", "succeeded": 2}
    high = [pod("Running", index=2), pod("Running", index=4)]
    low = pod("Running", index=1)
    out = run(job(**spec, status=status), [low, *high])
    assert sorted(p["metadata"]["name"] for p in out.plan.delete) == sorted(
        p["metadata"]["name"] for p in high
    )
    assert out.status["completedIndexes"] == "0"
    assert out.status["succeeded"] == 1
    assert out.status["active"] == 1


def test_elastic_scale_up_creates_new_indexes() -> None:
    spec = {"completionMode": "Indexed", "completions": 4, "parallelism": 4}
    status = {"startTime": T, "completedIndexes": "0,1", "succeeded": 2}
    out = run(job(**spec, status=status), [])
    assert [p["metadata"]["annotations"][indexes.INDEX_KEY] for p in out.plan.create] == ["2", "3"]
    done = [pod("Succeeded", index=2), pod("Succeeded", index=3)]
    out = run(job(**spec, status=out.status), done)
    assert out.status["completedIndexes"] == "0-3"
    assert ctypes(out.status)[-1] == ("Complete", "True", "CompletionsReached")
