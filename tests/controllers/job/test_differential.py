"""The same Jobs under upstream's job controller and under Steward's: final statuses
compared field by field, and the pods each made (how many, their labels, annotations,
owner and tracking finalizer)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from steward.controllers.job import indexes
from steward.controllers.job.pods import TRACKING_FINALIZER
from steward.kube import KubeClient
from tests.controllers.job.conftest import (
    Running,
    condition,
    eventually,
    fail_pod,
    get_job,
    job_body,
    job_pods,
)
from tests.controllers.job.test_job_policies import disrupt_pod

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNSCHEDULABLE = {"nodeSelector": {"steward.io/no-such-node": "true"}}
POD_FAILURE_BACKOFF = 10.0
"""Upstream's, like for like (see ``tests/controllers/job/conftest.py``)."""


def comparable(job: dict[str, Any]) -> dict[str, Any]:
    """What must be identical: counts, condition types/statuses/reasons/messages,
    completed and failed indexes, uncounted pods (absent fields as their zero value)."""
    st = job.get("status") or {}
    uncounted = st.get("uncountedTerminatedPods") or {}
    return {
        "active": st.get("active", 0),
        "ready": st.get("ready", 0),
        "terminating": st.get("terminating", 0),
        "succeeded": st.get("succeeded", 0),
        "failed": st.get("failed", 0),
        "completedIndexes": st.get("completedIndexes", ""),
        "failedIndexes": st.get("failedIndexes"),
        "uncounted": (uncounted.get("succeeded") or [], uncounted.get("failed") or []),
        "conditions": [
            (c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in st.get("conditions") or ()
        ],
        "hasStartTime": "startTime" in st,
        "hasCompletionTime": "completionTime" in st,
    }


def owned_pods(kube: KubeClient, ns: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The namespace's pods whose controller reference is the Job (by UID, so a pod
    missing the Job's labels is still found)."""
    uid = job["metadata"]["uid"]
    return [
        p
        for p in kube.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items") or ()
        if any(
            r.get("controller") and r.get("uid") == uid
            for r in p["metadata"].get("ownerReferences") or ()
        )
    ]


TRACE_CONTEXT = frozenset({"traceparent", "tracestate"})
"""Annotations Steward's controllers add to what they create while a reconcile is traced
(``steward.runtime.tracing.stamp_trace_context``), and upstream's do not: whether they
are there depends on whether this process has a tracer provider (another test may have
set one), not on the Job controller's semantics."""


def comparable_pods(job: dict[str, Any], pods: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The Job's pods, sorted, each as phase, labels, annotations (but the trace context),
    generateName, controller reference and whether it keeps the tracking finalizer, with
    the Job's UID and name in values made alike (they differ between the sides)."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]

    def norm(value: Any) -> Any:
        return str(value).replace(uid, "<uid>").replace(name, "<job>")

    def pairs(mapping: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
        return tuple(
            sorted((k, norm(v)) for k, v in (mapping or {}).items() if k not in TRACE_CONTEXT)
        )

    rows = []
    for p in pods:
        meta = p["metadata"]
        rows.append(
            (
                p["status"].get("phase"),
                pairs(meta.get("labels")),
                pairs(meta.get("annotations")),
                norm(meta.get("generateName", "")),
                tuple(
                    (r["kind"], norm(r["name"]), norm(r["uid"]), r.get("blockOwnerDeletion"))
                    for r in meta.get("ownerReferences") or ()
                    if r.get("controller")
                ),
                TRACKING_FINALIZER in (meta.get("finalizers") or ()),
            )
        )
    return sorted(rows)


async def settled_pods(
    kube: KubeClient, ns: str, jobs: tuple[dict[str, Any], dict[str, Any]]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Both finished Jobs' pods once none is being deleted and no finished pod keeps the
    tracking finalizer (every pod is counted in a finished Job's status), as
    :func:`comparable_pods`; fails naming the pods that do not get there."""
    seen: list[list[dict[str, Any]]] = []

    def unsettled(pods: list[dict[str, Any]]) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"].get("deletionTimestamp")
            or (
                p["status"].get("phase") in ("Succeeded", "Failed")
                and TRACKING_FINALIZER in (p["metadata"].get("finalizers") or ())
            )
        ]

    def check() -> bool:
        seen[:] = [owned_pods(kube, ns, job) for job in jobs]
        return not any(unsettled(pods) for pods in seen)

    def failure(_: Any) -> str:
        stuck = [unsettled(pods) for pods in seen]
        return f"pods still deleted or keeping {TRACKING_FINALIZER} (upstream, steward): {stuck}"

    await eventually(check, "the pods to settle", within=30.0, failure=failure)
    return comparable_pods(jobs[0], seen[0]), comparable_pods(jobs[1], seen[1])


async def run_both(
    kube: KubeClient, ns: str, name: str, spec: dict[str, Any], ending: str, fail: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create the Job twice (upstream's, Steward's), failing ``fail`` pods of each as
    they appear, and wait for both to reach the ``ending`` condition."""
    names = {False: f"{name}-upstream", True: f"{name}-steward"}
    for managed, job_name in names.items():
        kube.request(
            "POST",
            f"/apis/batch/v1/namespaces/{ns}/jobs",
            job_body(job_name, managed=managed, **spec),
        )
    results = []
    for job_name in names.values():
        failed: set[str] = set()

        def step(job_name: str = job_name, failed: set[str] = failed) -> dict[str, Any] | None:
            job = get_job(kube, ns, job_name)
            if condition(job, ending):
                return job
            for p in job_pods(kube, ns, job_name):
                pname = p["metadata"]["name"]
                if (
                    len(failed) < fail
                    and p["status"].get("phase") == "Pending"
                    and pname not in failed
                ):
                    fail_pod(kube, p)
                    failed.add(pname)
            return None

        results.append(await eventually(step, f"{job_name} {ending}", within=180.0))
    return results[0], results[1]


@pytest.mark.parametrize(
    ("spec", "ending", "fail"),
    [
        ({"parallelism": 2, "completions": 3}, "Complete", 0),
        ({"parallelism": 3, "completions": 3, "completionMode": "Indexed"}, "Complete", 0),
        ({"parallelism": 2}, "Complete", 0),
        ({"completions": 1, "backoffLimit": 0, "pod_spec": UNSCHEDULABLE}, "Failed", 1),
    ],
    ids=["parallel", "indexed", "work-queue", "backoff-limit-0"],
)
async def test_same_final_status(
    kube: KubeClient,
    namespace: str,
    job_controller: Running,
    spec: dict[str, Any],
    ending: str,
    fail: int,
) -> None:
    upstream, steward = await run_both(kube, namespace, "diff", dict(spec), ending, fail)
    assert comparable(steward) == comparable(upstream)
    upstream_pods, steward_pods = await settled_pods(kube, namespace, (upstream, steward))
    assert upstream_pods
    assert steward_pods == upstream_pods


Act = Callable[[KubeClient, dict[str, Any], list[dict[str, Any]], dict[str, Any]], None]
"""One step of a scenario: given the Job, its Pending pods by index and the scenario's own
state, end some pods or change the Job."""


def _pending(kube: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    found = [
        p
        for p in job_pods(kube, ns, name)
        if p["status"].get("phase") == "Pending" and not p["metadata"].get("deletionTimestamp")
    ]
    return sorted(found, key=indexes.pod_index)


def when_pending(count: int, *endings: tuple[int, int]) -> Act:
    """Once ``count`` pods are Pending, end them: (position by index, exit code); an exit
    code of -1 ends the pod the way an eviction does (DisruptionTarget)."""

    def act(
        kube: KubeClient, job: dict[str, Any], found: list[dict[str, Any]], state: dict[str, Any]
    ) -> None:
        if state.get("done") or len(found) != count:
            return
        for position, code in endings:
            if code == -1:
                disrupt_pod(kube, found[position])
            else:
                fail_pod(kube, found[position], exit_code=code)
        state["ended"] = {found[position]["metadata"]["uid"] for position, _ in endings}
        state["done"] = True

    return act


def in_turn(*acts: Act) -> Act:
    """Each act once, in order, the next only once the pods the previous one ended are
    no longer Pending."""

    def act(
        kube: KubeClient, job: dict[str, Any], found: list[dict[str, Any]], state: dict[str, Any]
    ) -> None:
        step = state.setdefault("step", 0)
        if step >= len(acts):
            return
        inner = state.setdefault(f"state-{step}", {})
        seen = {p["metadata"]["uid"] for p in found}
        if seen & state.get("ended", set()):
            return  # the pods the previous act ended do not show it yet
        acts[step](kube, job, found, inner)
        if inner.get("done"):
            state["step"] = step + 1
            state["ended"] = inner.get("ended", set())

    return act


def scale_indexed(completions: int, after_completed: str) -> Act:
    """Set completions and parallelism once ``status.completedIndexes`` reads so."""

    def act(
        kube: KubeClient, job: dict[str, Any], found: list[dict[str, Any]], state: dict[str, Any]
    ) -> None:
        if (job.get("status") or {}).get("completedIndexes") != after_completed:
            return
        meta = job["metadata"]
        kube.request(
            "PATCH",
            f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}",
            {"spec": {"completions": completions, "parallelism": completions}},
            content_type="application/merge-patch+json",
        )
        state["done"] = True

    return act


def same_pod_names(view: dict[str, Any]) -> dict[str, Any]:
    """``comparable`` with pod names in condition messages made alike (they are random)."""
    view = dict(view)
    view["conditions"] = [
        (t, s, r, re.sub(r"(?i)pod \S+/\S+", "pod <pod>", m or ""))
        for t, s, r, m in view["conditions"]
    ]
    return view


async def run_both_scripted(
    kube: KubeClient, ns: str, name: str, spec: dict[str, Any], ending: str, act: Act
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create the Job twice (upstream's, Steward's), drive both with ``act`` side by side,
    and wait for both to reach the ``ending`` condition."""
    names = {False: f"{name}-upstream", True: f"{name}-steward"}
    for managed, job_name in names.items():
        kube.request(
            "POST",
            f"/apis/batch/v1/namespaces/{ns}/jobs",
            job_body(job_name, managed=managed, **spec),
        )
    states: dict[str, dict[str, Any]] = {n: {} for n in names.values()}
    ended: dict[str, dict[str, Any]] = {}

    def step() -> bool:
        for job_name in names.values():
            if job_name in ended:
                continue
            job = get_job(kube, ns, job_name)
            if condition(job, ending):
                ended[job_name] = job
                continue
            act(kube, job, _pending(kube, ns, job_name), states[job_name])
        return len(ended) == len(names)

    await eventually(step, f"{name} {ending} under both controllers", within=180.0)
    return ended[names[False]], ended[names[True]]


POLICY_FAIL_JOB_42 = {
    "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
}
POLICY_IGNORE_DISRUPTION = {
    "rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
}
POLICY_FAIL_INDEX_3 = {
    "rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]
}
INDEXED = {"completionMode": "Indexed", "pod_spec": UNSCHEDULABLE}


@pytest.mark.parametrize(
    ("spec", "ending", "act"),
    [
        (
            {
                "parallelism": 2,
                "completions": 2,
                "podFailurePolicy": POLICY_FAIL_JOB_42,
                "pod_spec": UNSCHEDULABLE,
            },
            "Failed",
            when_pending(2, (0, 42)),
        ),
        (
            {
                "completions": 1,
                "backoffLimit": 0,
                "podFailurePolicy": POLICY_IGNORE_DISRUPTION,
                "pod_spec": UNSCHEDULABLE,
            },
            "Complete",
            in_turn(when_pending(1, (0, -1)), when_pending(1, (0, 0))),
        ),
        (
            {"completions": 2, "parallelism": 2, "backoffLimitPerIndex": 0, **INDEXED},
            "Failed",
            when_pending(2, (0, 1), (1, 0)),
        ),
        (
            {
                "completions": 3,
                "parallelism": 3,
                "backoffLimitPerIndex": 0,
                "maxFailedIndexes": 0,
                **INDEXED,
            },
            "Failed",
            when_pending(3, (1, 1)),
        ),
        (
            {
                "completions": 2,
                "parallelism": 2,
                "backoffLimitPerIndex": 1,
                "podFailurePolicy": POLICY_FAIL_INDEX_3,
                **INDEXED,
            },
            "Failed",
            when_pending(2, (0, 3), (1, 0)),
        ),
        (
            {
                "completions": 3,
                "parallelism": 3,
                "successPolicy": {"rules": [{"succeededIndexes": "0,2"}]},
                **INDEXED,
            },
            "Complete",
            when_pending(3, (0, 0), (2, 0)),
        ),
        (
            {"completions": 1, "podReplacementPolicy": "Failed", "pod_spec": UNSCHEDULABLE},
            "Complete",
            in_turn(when_pending(1, (0, 1)), when_pending(1, (0, 0))),
        ),
        (
            {"completions": 4, "parallelism": 4, **INDEXED},
            "Complete",
            in_turn(
                when_pending(4, (0, 0), (3, 0)),
                scale_indexed(2, "0,3"),
                when_pending(1, (0, 0)),
            ),
        ),
    ],
    ids=[
        "fail-job",
        "ignore-disruption",
        "failed-indexes",
        "max-failed-indexes",
        "fail-index",
        "success-policy",
        "replacement-failed",
        "elastic-indexed",
    ],
)
async def test_same_final_status_with_policies(
    kube: KubeClient,
    namespace: str,
    job_controller: Running,
    spec: dict[str, Any],
    ending: str,
    act: Act,
) -> None:
    upstream, steward = await run_both_scripted(kube, namespace, "pol", dict(spec), ending, act)
    assert same_pod_names(comparable(steward)) == same_pod_names(comparable(upstream))
    upstream_pods, steward_pods = await settled_pods(kube, namespace, (upstream, steward))
    assert upstream_pods
    assert steward_pods == upstream_pods
