"""``steward trace``'s choice of trace: the object's cause, its earlier and later traces,
their one-line summaries (on traces in the shape of Jaeger's query API; the command itself
runs against a real Jaeger in test_steward_trace.py)."""

from __future__ import annotations

from typing import Any

import pytest

from steward.traces import (
    ObjectRef,
    listing,
    render_story,
    select_story,
    summarize,
    timestamp,
)

pytestmark = pytest.mark.unit

T0 = 1_796_400_000_000_000  # 2026-12-04T16:00:00Z, in µs
JOB = ObjectRef("job", "default", "pi")


class Recorder:
    """Builds traces in the shape Jaeger's query API returns them, with the tags Steward's
    services put on their spans."""

    def __init__(self) -> None:
        self._next = 0

    def _id(self) -> str:
        self._next += 1
        return f"{self._next:016x}"

    def event(
        self,
        type_: str,
        resource: str = "jobs.v1.batch",
        name: str = "pi",
        uid: str = "uid-1",
        namespace: str = "default",
    ) -> dict[str, Any]:
        """The informer's span of one event."""
        return self.span(
            "steward-informer",
            f"informer {type_} {resource}",
            tags={
                "steward.resource": resource,
                "steward.event.type": type_,
                "k8s.namespace.name": namespace,
                "steward.object.name": name,
                "steward.object.uid": uid,
                "span.kind": "consumer",
            },
        )

    def reconcile(self, result: str = "success", *, error: bool = False) -> dict[str, Any]:
        tags: dict[str, Any] = {"steward.controller": "job", "steward.result": result}
        if error:
            tags["otel.status_code"] = "ERROR"
        return self.span("steward-controller-job", "reconcile job", tags=tags)

    def span(self, service: str, name: str, *, tags: dict[str, Any]) -> dict[str, Any]:
        return {
            "spanID": self._id(),
            "operationName": name,
            "service": service,
            "tags": [{"key": k, "type": "string", "value": v} for k, v in tags.items()],
        }

    def trace(self, start_s: float, *spans: dict[str, Any]) -> dict[str, Any]:
        """A trace of ``spans``, each the child of the one before, 1 ms apart, starting
        ``start_s`` seconds after :data:`T0`."""
        trace_id = self._id() + self._id()
        services = sorted({s["service"] for s in spans})
        pids = {name: f"p{i + 1}" for i, name in enumerate(services)}
        out = []
        for i, span in enumerate(spans):
            refs = []
            if i:
                parent = spans[i - 1]["spanID"]
                refs = [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": parent}]
            out.append(
                {
                    "traceID": trace_id,
                    "spanID": span["spanID"],
                    "operationName": span["operationName"],
                    "references": refs,
                    "startTime": T0 + int(start_s * 1_000_000) + i * 1000,
                    "duration": 500,
                    "tags": span["tags"],
                    "processID": pids[span["service"]],
                }
            )
        return {
            "traceID": trace_id,
            "spans": out,
            "processes": {pid: {"serviceName": name} for name, pid in pids.items()},
        }


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def _job_history(rec: Recorder) -> dict[str, dict[str, Any]]:
    """A Job's life in traces: its creation (with its pod's), two resyncs, one failing."""
    return {
        "created": rec.trace(
            0,
            rec.event("ADDED"),
            rec.reconcile(),
            rec.span("apiserver", "POST /api/v1/namespaces/{:namespace}/pods", tags={}),
            rec.event("ADDED", "pods.v1", "pi-x7k2p", "uid-p"),
            rec.event("MODIFIED", "pods.v1", "pi-x7k2p", "uid-p"),
        ),
        "resync": rec.trace(30, rec.reconcile(), rec.event("MODIFIED")),
        "failed": rec.trace(
            60,
            rec.event("MODIFIED"),
            rec.reconcile("error", error=True),
            rec.span("apiserver", "PUT status", tags={"otel.status_code": "ERROR"}),
        ),
    }


def test_the_cause_is_the_trace_of_the_objects_added_event(rec: Recorder) -> None:
    t = _job_history(rec)
    newest_first = [t["failed"], t["resync"], t["created"]]
    story = select_story(newest_first, JOB)
    assert story is not None
    assert story.cause is t["created"]
    assert story.note == ""
    assert story.earlier == []
    assert story.later == [t["resync"], t["failed"]]


def test_a_pods_cause_is_the_trace_its_controller_created_it_in(rec: Recorder) -> None:
    t = _job_history(rec)
    story = select_story(list(t.values()), ObjectRef("pod", "default", "pi-x7k2p"))
    assert story is not None
    assert story.cause is t["created"]
    assert story.later == []


def test_a_relisted_added_event_is_a_cause_too(rec: Recorder) -> None:
    relisted = rec.trace(5, rec.event("ADDED (relist)"), rec.reconcile())
    later = rec.trace(9, rec.event("MODIFIED"))
    story = select_story([later, relisted], JOB)
    assert story is not None
    assert story.cause is relisted
    assert story.later == [later]


def test_the_newest_object_of_a_name_is_the_story_and_older_ones_are_earlier(
    rec: Recorder,
) -> None:
    first = rec.trace(0, rec.event("ADDED", uid="uid-1"))
    deleted = rec.trace(10, rec.event("DELETED", uid="uid-1"))
    again = rec.trace(20, rec.event("ADDED", uid="uid-2"), rec.reconcile())
    resync = rec.trace(30, rec.reconcile(), rec.event("MODIFIED", uid="uid-2"))
    story = select_story([resync, again, deleted, first], JOB)
    assert story is not None
    assert story.cause is again
    assert story.earlier == [first, deleted]
    assert story.later == [resync]


def test_without_an_added_event_the_earliest_trace_stands_in_with_a_note(
    rec: Recorder,
) -> None:
    older = rec.trace(0, rec.event("MODIFIED"), rec.reconcile())
    newer = rec.trace(10, rec.event("MODIFIED"))
    story = select_story([newer, older], JOB)
    assert story is not None
    assert story.cause is older
    assert story.later == [newer]
    assert "no trace holds the ADDED event of job/pi" in story.note
    assert "earliest of its 2 traces" in story.note


def test_traces_of_other_objects_are_left_out(rec: Recorder) -> None:
    other_namespace = rec.trace(0, rec.event("ADDED", namespace="prod"))
    other_kind = rec.trace(1, rec.event("ADDED", "configmaps.v1"))
    other_name = rec.trace(2, rec.event("ADDED", name="pi2"))
    unrelated = [other_namespace, other_kind, other_name]
    assert select_story(unrelated, JOB) is None
    mine = rec.trace(3, rec.event("MODIFIED"))
    story = select_story([*unrelated, mine], JOB)
    assert story is not None
    assert story.cause is mine
    assert story.earlier == story.later == []


def test_a_trace_found_twice_is_listed_once(rec: Recorder) -> None:
    t = _job_history(rec)
    story = select_story([t["resync"], t["created"], t["resync"]], JOB)
    assert story is not None
    assert story.later == [t["resync"]]


def test_summaries_say_when_what_and_how_it_ended(rec: Recorder) -> None:
    t = _job_history(rec)
    requeued = rec.trace(90, rec.event("MODIFIED"), rec.reconcile("requeue_after"))
    assert summarize(t["created"]).outcome == "ok"
    assert summarize(requeued).outcome == "ok (requeue_after)"
    failed = summarize(t["failed"])
    assert failed.outcome == "error: steward-controller-job: reconcile job (+1 more)"
    assert failed.spans == 3
    assert failed.services == ("apiserver", "steward-controller-job", "steward-informer")
    assert failed.start_us == T0 + 60_000_000
    assert timestamp(T0 + 60_123_456) == "2026-12-04T16:01:00.123Z"

    lines = listing([t["resync"], t["failed"]])
    resync_id, failed_id = t["resync"]["traceID"], t["failed"]["traceID"]
    assert lines == [
        f"2026-12-04T16:00:30.000Z  {resync_id}  2 spans  "
        "steward-controller-job, steward-informer             ok",
        f"2026-12-04T16:01:00.000Z  {failed_id}  3 spans  "
        "apiserver, steward-controller-job, steward-informer  "
        "error: steward-controller-job: reconcile job (+1 more)",
    ]
    single = rec.trace(120, rec.event("MODIFIED"))
    one, five = listing([single, t["created"]])
    assert " 1 span   steward-informer  " in one
    assert " 5 spans  apiserver, " in five


def test_the_story_prints_the_cause_then_a_line_per_later_trace(rec: Recorder) -> None:
    t = _job_history(rec)
    story = select_story(list(t.values()), JOB)
    assert story is not None
    out = render_story("http://jaeger:16686/", story, more="print one with --trace ID")
    cause, later = out.split("\n\n")
    assert cause.startswith(f"trace {t['created']['traceID']}: 5 spans from 3 services")
    assert "steward-informer: informer ADDED jobs.v1.batch" in cause
    assert cause.endswith(f"Jaeger: http://jaeger:16686/trace/{t['created']['traceID']}")
    heading, *rows = later.splitlines()
    assert heading == "later traces (2; print one with --trace ID):"
    assert [row.split()[1] for row in rows] == [t["resync"]["traceID"], t["failed"]["traceID"]]

    alone = select_story([t["created"]], JOB)
    assert alone is not None
    assert render_story("http://jaeger:16686", alone).endswith("\n\nlater traces: none")
    # Jaeger's answer was full but held none of the later traces: say so, not just "none".
    cut = render_story("http://jaeger:16686", alone, truncated="only the newest 1 were asked for")
    assert cut.endswith("\n\nlater traces: none (only the newest 1 were asked for)")
    cut = render_story("http://jaeger:16686", story, more="print one", truncated="see --limit")
    assert "\n\nlater traces (2; print one; see --limit):\n" in cut
