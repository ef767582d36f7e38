"""The endpoint facts both endpoint controllers share (steward.runtime.endpoints), checked
against the cases upstream's own unit tests of k8s.io/endpointslice/util name."""

from __future__ import annotations

from typing import Any

import grpc
import orjson
import pytest

import steward
from steward.runtime import endpoints
from steward.runtime.mirror import Mirror
from steward.v1 import informer_pb2 as pb

pytestmark = pytest.mark.unit


def pod(
    name: str = "p",
    *,
    ip: str | None = "10.0.0.1",
    phase: str = "Running",
    ready: str | None = "True",
    ready_at: str = "2026-01-01T00:00:00Z",
    deleting: bool = False,
    labels: dict[str, str] | None = None,
    hostname: str = "",
    subdomain: str = "",
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels or {"app": "a"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready, "lastTransitionTime": ready_at}]
    spec: dict[str, Any] = {"containers": containers or [{"name": "c"}]}
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    if init:
        spec["initContainers"] = init
    return {"metadata": meta, "spec": spec, "status": status}


def service(
    name: str = "svc",
    *,
    selector: dict[str, str] | None = None,
    kind: str = "ClusterIP",
    cluster_ip: str = "10.96.0.10",
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": kind, "clusterIP": cluster_ip}
    if selector is not None:
        spec["selector"] = selector
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
        "spec": spec,
    }


def test_which_pods_back_a_service() -> None:
    assert endpoints.pod_in_endpoints(pod(), include_terminating=False)
    assert not endpoints.pod_in_endpoints(pod(ip=None), include_terminating=True)
    assert not endpoints.pod_in_endpoints(pod(phase="Succeeded"), include_terminating=True)
    assert not endpoints.pod_in_endpoints(pod(phase="Failed"), include_terminating=True)
    assert endpoints.pod_in_endpoints(pod(ready="False"), include_terminating=False)
    assert endpoints.pod_in_endpoints(pod(deleting=True), include_terminating=True)
    assert not endpoints.pod_in_endpoints(pod(deleting=True), include_terminating=False)


def test_selectors_and_managed_services() -> None:
    svc = service(selector={"app": "a"})
    assert endpoints.selects(svc, {"app": "a", "x": "y"})
    assert not endpoints.selects(svc, {"app": "b"})
    assert endpoints.selects(service(selector={}), {"any": "thing"})
    assert not endpoints.selects(service(), {"app": "a"})
    assert endpoints.managed(svc)
    assert not endpoints.managed(service())
    assert not endpoints.managed(service(selector={"app": "a"}, kind="ExternalName"))
    assert endpoints.has_cluster_ip(svc)
    assert not endpoints.has_cluster_ip(service(selector={}, cluster_ip="None"))
    assert not endpoints.has_cluster_ip(service(selector={}, cluster_ip=""))


def test_hostname_only_for_the_named_subdomain() -> None:
    svc = service()
    assert endpoints.sets_hostname(pod(hostname="h", subdomain="svc"), svc)
    assert not endpoints.sets_hostname(pod(hostname="h", subdomain="other"), svc)
    assert not endpoints.sets_hostname(pod(subdomain="svc"), svc)


def test_ports_resolve_by_number_and_by_name_and_protocol() -> None:
    named = [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]
    udp = [{"name": "c", "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]
    metrics = [{"name": "m", "containerPort": 9}]
    sidecar = [{"name": "s", "restartPolicy": "Always", "ports": metrics}]
    plain_init = [{"name": "i", "ports": [{"name": "m", "containerPort": 9}]}]
    assert endpoints.find_port(pod(), {"port": 80, "targetPort": 8000}) == 8000
    assert endpoints.find_port(pod(), {"port": 80}) == 80
    assert endpoints.find_port(pod(containers=named), {"port": 80, "targetPort": "http"}) == 8080
    assert endpoints.find_port(pod(containers=named), {"port": 80, "targetPort": "nope"}) is None
    port = {"port": 53, "targetPort": "dns", "protocol": "UDP"}
    assert endpoints.find_port(pod(containers=udp), port) == 53
    assert endpoints.find_port(pod(containers=udp), {**port, "protocol": "TCP"}) is None
    assert endpoints.find_port(pod(init=sidecar), {"port": 1, "targetPort": "m"}) == 9
    assert endpoints.find_port(pod(init=plain_init), {"port": 1, "targetPort": "m"}) is None


def test_which_pod_changes_matter() -> None:
    base = pod()
    assert endpoints.endpoints_changed(base, pod()) == (False, False)
    assert endpoints.endpoints_changed(base, pod(ready="False")) == (True, False)
    assert endpoints.endpoints_changed(base, pod(ip="10.0.0.2")) == (True, False)
    assert endpoints.endpoints_changed(base, pod(deleting=True)) == (True, False)
    assert endpoints.endpoints_changed(base, pod(labels={"app": "b"})) == (False, True)
    assert endpoints.endpoints_changed(base, pod(hostname="h")) == (False, True)


def test_trigger_time_is_creation_first_then_earliest_change() -> None:
    times = endpoints.TriggerTimes()
    svc = service(created="2026-01-01T00:00:00Z")
    first = times.compute(svc, [pod("a", ready_at="2026-01-01T00:00:10Z")])
    assert first is not None and first.isoformat() == "2026-01-01T00:00:00+00:00"
    assert times.compute(svc, [pod("a", ready_at="2026-01-01T00:00:10Z")]) is None
    moved = [
        pod("a", ready_at="2026-01-01T00:00:30Z"),
        pod("b", ready_at="2026-01-01T00:00:20Z"),
    ]
    at = times.compute(svc, moved)
    assert at is not None and at.isoformat() == "2026-01-01T00:00:20+00:00"
    times.forget("ns", "svc")
    again = times.compute(svc, moved)
    assert again is not None and again.isoformat() == "2026-01-01T00:00:00+00:00"


def test_pod_ips_are_read_as_go_reads_them_sloppily() -> None:
    assert str(endpoints.parse_ip("10.0.0.1")) == "10.0.0.1"
    assert str(endpoints.parse_ip("010.000.000.001")) == "10.0.0.1"
    assert str(endpoints.parse_ip("::ffff:10.0.0.1")) == "10.0.0.1"
    assert str(endpoints.parse_ip("2001:DB8::0001")) == "2001:db8::1"
    assert endpoints.parse_ip("not-an-ip") is None
    assert endpoints.parse_ip("") is None


def _pod_event(ns: str, name: str, labels: dict[str, str]) -> pb.Event:
    event = pb.Event(
        type=pb.EVENT_TYPE_ADDED, resource_type=steward.PODS.wire, resource_version="1"
    )
    event.metadata.CopyFrom(pb.ObjectMeta(namespace=ns, name=name, uid=name, resource_version="1"))
    event.metadata.labels.update(labels)
    event.object = orjson.dumps({"metadata": {"namespace": ns, "name": name, "labels": labels}})
    return event


@pytest.mark.asyncio
async def test_selected_pods_come_from_the_label_index() -> None:
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled
    mirror = Mirror(
        channel, [steward.PODS], indexers={endpoints.LABEL_INDEX: endpoints.index_pod_labels}
    )
    mirror._apply(
        [
            _pod_event("ns", "web-1", {"app": "web", "tier": "front"}),
            _pod_event("ns", "web-2", {"app": "web"}),
            _pod_event("ns", "db-1", {"app": "db", "tier": "front"}),
            _pod_event("other", "web-3", {"app": "web", "tier": "front"}),
        ]
    )

    def names(selector: dict[str, str] | None) -> list[str]:
        svc = {"metadata": {"namespace": "ns", "name": "s"}, "spec": {"selector": selector}}
        return sorted(p["metadata"]["name"] for p in endpoints.selected_pods(mirror, svc))

    assert names({"app": "web"}) == ["web-1", "web-2"]
    assert names({"app": "web", "tier": "front"}) == ["web-1"]
    assert names({"app": "none"}) == []
    assert names({}) == ["db-1", "web-1", "web-2"]  # empty: every pod of the namespace
    assert names(None) == []  # no selector: none
    await channel.close()


def test_the_trigger_time_is_written_as_upstream_writes_it() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    whole = datetime(2026, 12, 6, 7, 0, 1, tzinfo=timezone(timedelta(hours=2)))
    assert endpoints.format_trigger_time(whole) == "2026-12-06T05:00:01Z"
    fraction = datetime(2026, 12, 6, 5, 0, 1, 120000, tzinfo=UTC)
    assert endpoints.format_trigger_time(fraction) == "2026-12-06T05:00:01.12Z"
    annotations = {"other": "kept"}
    endpoints.set_trigger_time(annotations, fraction)
    assert annotations == {
        "other": "kept",
        endpoints.TRIGGER_TIME_ANNOTATION: "2026-12-06T05:00:01.12Z",
    }
    endpoints.set_trigger_time(annotations, None)
    assert annotations == {"other": "kept"}
