"""Watch, List and Get against the real API server: snapshot then changes, in order,
for a built-in type and a custom resource; server-side filters; pagination."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from kubernetes import client

from steward.v1 import informer_pb2 as pb
from tests.informer.conftest import (
    CONFIGMAPS,
    RunningInformer,
    WatchReader,
    eventually,
    wait_for_cache,
)
from tests.informer.mirror import ADDED, DELETED, INITIAL_EVENTS_END, MODIFIED

pytestmark = pytest.mark.integration


def _cm(name: str, labels: dict[str, str] | None = None, data: str = "1") -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels), data={"v": data}
    )


def test_snapshot_then_changes_in_order(
    core: client.CoreV1Api,
    namespace: str,
    watch: Callable[..., WatchReader],
    informer: RunningInformer,
) -> None:
    for name in ("a", "b", "c"):
        last = core.create_namespaced_config_map(namespace, _cm(name, {"app": "web"}))
    wait_for_cache(informer, CONFIGMAPS, last)
    reader = watch(namespace=namespace, subscriber="test-snapshot")
    # kube-root-ca.crt is published into every namespace by kube-controller-manager.
    snapshot = [e for e in reader.snapshot() if e.metadata.name != "kube-root-ca.crt"]
    assert sorted((e.type, e.metadata.name) for e in snapshot[:-1]) == [
        (ADDED, "a"),
        (ADDED, "b"),
        (ADDED, "c"),
    ]
    end = snapshot[-1]
    assert end.resource_type == CONFIGMAPS and end.resource_version.isdigit()
    first = snapshot[0]
    assert first.metadata.namespace == namespace and first.metadata.uid
    assert first.metadata.labels == {"app": "web"}
    body = orjson.loads(first.object)
    assert body["kind"] == "ConfigMap" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == first.metadata.resource_version

    core.patch_namespaced_config_map("a", namespace, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("b", namespace)
    core.create_namespaced_config_map(namespace, _cm("d"))
    changes = [
        e
        for e in reader.until(lambda e: e.metadata.name == "d")
        if e.metadata.name != "kube-root-ca.crt"
    ]
    assert [(e.type, e.metadata.name) for e in changes] == [
        (MODIFIED, "a"),
        (DELETED, "b"),
        (ADDED, "d"),
    ]
    versions = [int(e.metadata.resource_version) for e in changes]
    assert versions == sorted(versions) and len(set(versions)) == 3
    assert [int(e.resource_version) for e in changes] == versions
    assert orjson.loads(changes[0].object)["data"] == {"v": "2"}
    assert int(changes[0].resource_version) > int(end.resource_version)


def test_filters_are_applied_on_the_server(
    core: client.CoreV1Api,
    namespace: str,
    watch: Callable[..., WatchReader],
    informer: RunningInformer,
) -> None:
    core.create_namespaced_config_map(namespace, _cm("web-1", {"app": "web"}))
    last = core.create_namespaced_config_map(namespace, _cm("db-1", {"app": "db"}))
    wait_for_cache(informer, CONFIGMAPS, last)
    reader = watch(
        namespace=namespace,
        label_selector="app in (web)",
        field_selector="metadata.name!=web-2",
        send_previous_object=True,
    )
    assert [e.metadata.name for e in reader.snapshot()] == ["web-1", ""]
    core.create_namespaced_config_map(namespace, _cm("web-2", {"app": "web"}))  # field-filtered
    core.patch_namespaced_config_map("db-1", namespace, {"metadata": {"labels": {"app": "web"}}})
    core.patch_namespaced_config_map("web-1", namespace, {"data": {"v": "2"}})
    got = reader.take(2)
    assert [(e.type, e.metadata.name) for e in got] == [
        (ADDED, "db-1"),  # it started to match
        (MODIFIED, "web-1"),
    ]
    assert orjson.loads(got[1].previous_object)["data"] == {"v": "1"}
    # Taken before the next change: a filtered subscriber's queue coalesces per object,
    # and a MODIFIED still queued when the object stops matching is delivered as DELETED.
    core.patch_namespaced_config_map("web-1", namespace, {"metadata": {"labels": {"app": "x"}}})
    assert [(e.type, e.metadata.name) for e in reader.take(1)] == [(DELETED, "web-1")]


def test_custom_resources(
    api_client: client.ApiClient,
    namespace: str,
    widget_crd: pb.ResourceType,
    watch: Callable[..., WatchReader],
    informer: RunningInformer,
) -> None:
    objects = client.CustomObjectsApi(api_client)
    group = widget_crd.group

    def widget(name: str, size: int) -> dict[str, object]:
        return {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"size": size},
        }

    objects.create_namespaced_custom_object(group, "v1", namespace, "widgets", widget("w1", 1))
    reader = watch(widget_crd, CONFIGMAPS, namespace=namespace)
    seen = reader.until(lambda e: e.type == INITIAL_EVENTS_END and e.resource_type == widget_crd)
    widgets = [e for e in seen if e.resource_type == widget_crd and e.type == ADDED]
    assert [e.metadata.name for e in widgets] == ["w1"]
    assert orjson.loads(widgets[0].object)["spec"] == {"size": 1}

    objects.patch_namespaced_custom_object(
        group, "v1", namespace, "widgets", "w1", {"spec": {"size": 2}}
    )
    objects.create_namespaced_custom_object(group, "v1", namespace, "widgets", widget("w2", 3))
    objects.delete_namespaced_custom_object(group, "v1", namespace, "widgets", "w1")
    changes = [
        e
        for e in reader.until(lambda e: e.type == DELETED and e.resource_type == widget_crd)
        if e.resource_type == widget_crd and e.type != INITIAL_EVENTS_END
    ]
    assert [(e.type, e.metadata.name) for e in changes] == [
        (MODIFIED, "w1"),
        (ADDED, "w2"),
        (DELETED, "w1"),
    ]

    listed = informer.stub.List(pb.ListRequest(type=widget_crd, namespace=namespace))
    assert [o.metadata.name for o in listed.items] == ["w2"]
    got = informer.stub.Get(pb.GetRequest(type=widget_crd, namespace=namespace, name="w2"))
    assert orjson.loads(got.object.object)["spec"] == {"size": 3}


def test_list_pages_and_get(
    core: client.CoreV1Api, namespace: str, informer: RunningInformer
) -> None:
    names = [f"cm-{i:02d}" for i in range(7)]
    for name in names:
        core.create_namespaced_config_map(namespace, _cm(name, {"set": "paged"}))
    request = pb.ListRequest(type=CONFIGMAPS, namespace=namespace, page_size=3)

    def listed_all() -> list[str]:
        result = informer.stub.List(pb.ListRequest(type=CONFIGMAPS, namespace=namespace))
        return [o.metadata.name for o in result.items if o.metadata.name.startswith("cm-")]

    eventually(lambda: listed_all() == names, what="the cache to hold every ConfigMap")
    pages: list[list[str]] = []
    token = ""
    while True:
        request.page_token = token
        page = informer.stub.List(request)
        pages.append([o.metadata.name for o in page.items])
        assert page.resource_version.isdigit()
        token = page.next_page_token
        if not token:
            break
    flat = [n for page in pages for n in page if n.startswith("cm-")]
    assert flat == names
    assert all(len(page) <= 3 for page in pages)

    by_label = informer.stub.List(pb.ListRequest(type=CONFIGMAPS, label_selector="set=paged"))
    assert sorted(o.metadata.name for o in by_label.items) == names

    got = informer.stub.Get(pb.GetRequest(type=CONFIGMAPS, namespace=namespace, name="cm-03"))
    assert got.object.metadata.name == "cm-03"
    assert orjson.loads(got.object.object)["metadata"]["namespace"] == namespace


def test_idle_types_are_stopped_after_the_grace_period(
    core: client.CoreV1Api, namespace: str, informer: RunningInformer
) -> None:
    secrets = pb.ResourceType(version="v1", resource="secrets")
    informer.stub.List(pb.ListRequest(type=secrets, namespace=namespace))
    reflectors = informer.server.reflectors

    def watched() -> set[str]:
        return informer.inspect(lambda: {r.name.resource for r in reflectors})

    assert "secrets" in watched()
    eventually(lambda: "secrets" not in watched(), what="the idle secrets reflector to stop")


def test_a_namespace_limits_namespaced_types_only(
    core: client.CoreV1Api, namespace: str, watch: Callable[..., WatchReader]
) -> None:
    """One Watch of ConfigMaps and Nodes for one namespace: the namespace's ConfigMaps,
    and every Node (Nodes have no namespace: a controller of one namespace still looks
    them up)."""
    core.create_namespaced_config_map(namespace, _cm("mine"))
    nodes = pb.ResourceType(version="v1", resource="nodes")
    reader = watch(CONFIGMAPS, nodes, namespace=namespace)
    seen = reader.until(lambda e: e.type == INITIAL_EVENTS_END and e.resource_type == nodes)
    added = [e for e in seen if e.type == ADDED]
    cms = {e.metadata.namespace for e in added if e.resource_type == CONFIGMAPS}
    assert cms == {namespace}
    listed = {n.metadata.name for n in core.list_node().items}
    assert listed
    assert {e.metadata.name for e in added if e.resource_type == nodes} == listed
