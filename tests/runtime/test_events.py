"""The runtime's :class:`EventRecorder` against a real API server: the Event it posts, a
rejection that shows in the log (rate-limited), and a fenced instance that stays quiet."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient, load_access
from steward.runtime.events import EventRecorder

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

NOON = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def admin(cluster: LocalCluster) -> Iterator[KubeClient]:
    api = KubeClient(load_access(str(cluster.kubeconfig)))
    try:
        yield api
    finally:
        api.close()


def recorder(api: KubeClient) -> EventRecorder:
    return EventRecorder(
        api,
        api_version="batch/v1",
        kind="Job",
        component="job-controller",
        reporting_component="steward.io/job-controller",
        clock=lambda: NOON,
    )


def subject(namespace: str) -> dict[str, object]:
    return {"metadata": {"name": "pi", "namespace": namespace, "uid": "u-1"}}


async def test_an_event_is_posted_about_the_object(admin: KubeClient, namespace: str) -> None:
    events = recorder(admin)
    events.event(subject(namespace), "Normal", "SuccessfulCreate", "Created pod: pi-x")
    await events.drain()
    items = admin.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    assert events.dropped == 0
    [event] = items
    assert event["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "pi",
        "namespace": namespace,
        "uid": "u-1",
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "SuccessfulCreate",
        "Created pod: pi-x",
    )
    assert event["source"] == {"component": "job-controller"}
    assert event["reportingComponent"] == "steward.io/job-controller"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-01-02T12:00:00Z"


async def test_a_rejected_event_is_logged_once_per_period(
    cluster: LocalCluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The informer's identity may read everything and create no Event.
    api = KubeClient(load_access(str(cluster.component_kubeconfig("informer"))))
    try:
        events = recorder(api)
        with caplog.at_level(logging.WARNING, logger="steward.runtime.events"):
            for n in range(3):
                events.event(subject(namespace), "Normal", "SuccessfulCreate", f"pod {n}")
                await events.drain()
    finally:
        api.close()
    assert events.dropped == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "event SuccessfulCreate on Job" in warnings[0]
    assert "HTTP 403" in warnings[0]


async def test_a_fenced_instance_posts_nothing_and_warns_of_nothing(
    admin: KubeClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    admin.write_fence = lambda: False
    events = recorder(admin)
    with caplog.at_level(logging.WARNING, logger="steward.runtime.events"):
        events.event(subject(namespace), "Normal", "SuccessfulCreate", "Created pod: pi-x")
        await events.drain()
    items = admin.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    assert admin.fenced_writes == 1
    assert events.dropped == 0
    assert items == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_events_go_one_at_a_time_and_an_object_gets_25_at_once(
    admin: KubeClient, namespace: str
) -> None:
    """As client-go's broadcaster and spam filter: one sender (so Events take no more of
    the rate limit than one worker), and an object's 26th Event of a burst is dropped."""
    sending = {"now": 0, "most": 0}
    send = admin.arequest

    async def counted(*args: object, **kwargs: object) -> dict[str, object]:
        sending["now"] += 1
        sending["most"] = max(sending["most"], sending["now"])
        try:
            return await send(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            sending["now"] -= 1

    admin.arequest = counted  # type: ignore[method-assign]
    events = recorder(admin)
    for n in range(30):
        events.event(subject(namespace), "Normal", "SuccessfulCreate", f"Created pod: {n}")
    events.event(
        {"metadata": {"name": "other", "namespace": namespace, "uid": "u-2"}},
        "Normal",
        "SuccessfulCreate",
        "Created pod: other-0",
    )
    await events.drain()
    items = admin.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    names = sorted(i["involvedObject"]["name"] for i in items)
    assert names == ["other"] + ["pi"] * 25
    assert events.discarded == 5 and events.dropped == 0
    assert sending["most"] == 1


async def test_events_past_the_queue_are_dropped_not_queued_forever(
    admin: KubeClient, namespace: str
) -> None:
    events = EventRecorder(
        admin,
        api_version="v1",
        kind="ConfigMap",
        component="test",
        reporting_component="test",
        max_queued=3,
    )
    for n in range(5):  # queued before the sender has run once
        events.event(
            {"metadata": {"name": f"c{n}", "namespace": namespace, "uid": f"u{n}"}},
            "Normal",
            "Seen",
            "seen",
        )
    await events.drain()
    items = admin.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    assert sorted(i["involvedObject"]["name"] for i in items) == ["c0", "c1", "c2"]
    assert events.discarded == 2


async def test_close_sends_what_is_queued_then_stops_the_sender(
    admin: KubeClient, namespace: str
) -> None:
    events = recorder(admin)
    events.event(subject(namespace), "Normal", "SuccessfulCreate", "Created pod: pi-x")
    sender = events._sender
    assert sender is not None and not sender.done()
    await events.close()
    assert sender.cancelled()
    items = admin.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    assert [i["message"] for i in items] == ["Created pod: pi-x"]
    # A later Event starts a sender again.
    events.event(subject(namespace), "Normal", "SuccessfulDelete", "Deleted pod: pi-x")
    await events.close()
    items = admin.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    assert sorted(i["message"] for i in items) == ["Created pod: pi-x", "Deleted pod: pi-x"]
