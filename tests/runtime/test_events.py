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
