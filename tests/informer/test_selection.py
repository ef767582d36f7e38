"""Selected-by targets at the fanout: objects that objects of another type select."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from steward.informer import wire
from steward.informer.fanout import Fanout, Subscription, TypeFeed
from steward.informer.selection import Selection, parse_path, selector_at
from steward.informer.selectors import parse_filter
from steward.informer.store import EventKind, ResourceTypeName, Store, StoredObject
from steward.v1 import informer_pb2 as pb

pytestmark = pytest.mark.unit

PODS = ResourceTypeName("", "v1", "pods")
SERVICES = ResourceTypeName("", "v1", "services")


def _stored(kind: str, name: str, rv: int, **fields: Any) -> StoredObject:
    body = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": fields.pop("namespace", "default"),
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "labels": fields.pop("labels", None) or {},
        },
        **fields,
    }
    return StoredObject(orjson.dumps(body), body)


class World:
    """A pod store and a service store, one subscriber of the pods the services select."""

    def __init__(self) -> None:
        self.pods, self.services = Store(1000), Store(1000)
        self.pods.replace([], 1)
        self.services.replace([], 1)
        self.rv = 1
        self.fanout = Fanout()

    def subscribe(self) -> TypeFeed:
        selection = Selection(parse_path("spec.selector"))
        selection.load(self.services)
        feed = TypeFeed(
            PODS, self.pods, parse_filter("", "", ""), 100, False, selection=(SERVICES, selection)
        )
        feed.start_with_snapshot(replaced=False)
        self.fanout.add(Subscription("endpoints", [feed], 100))
        return feed

    def pod(self, kind: EventKind, name: str, labels: dict[str, str]) -> None:
        self.rv += 1
        event = self.pods.apply(kind, _stored("Pod", name, self.rv, labels=labels), self.rv)
        self.fanout.publish(PODS, [event])

    def service(self, kind: EventKind, name: str, selector: dict[str, str] | None) -> None:
        self.rv += 1
        spec = {"selector": selector} if selector is not None else {}
        event = self.services.apply(kind, _stored("Service", name, self.rv, spec=spec), self.rv)
        self.fanout.publish(SERVICES, [event])


def _drain(feed: TypeFeed) -> list[tuple[int, str]]:
    out: list[bytes] = []
    while feed.ready():
        if not feed.take(100, out):
            break
    return [(e.type, e.metadata.name) for e in wire.decode_batch(out) if e.metadata.name]


def test_only_selected_objects_arrive_and_selector_changes_add_and_delete() -> None:
    world = World()
    world.service(EventKind.ADDED, "web", {"app": "web"})
    world.pod(EventKind.ADDED, "web-1", {"app": "web"})
    world.pod(EventKind.ADDED, "job-1", {"job-name": "pi"})
    feed = world.subscribe()
    assert _drain(feed) == [(pb.EVENT_TYPE_ADDED, "web-1")]  # the snapshot
    # Changes of pods nobody selects are withheld; a selected pod's arrive.
    world.pod(EventKind.MODIFIED, "job-1", {"job-name": "pi", "x": "1"})
    world.pod(EventKind.ADDED, "job-2", {"job-name": "pi"})
    world.pod(EventKind.MODIFIED, "web-1", {"app": "web", "x": "1"})
    assert _drain(feed) == [(pb.EVENT_TYPE_MODIFIED, "web-1")]
    assert feed.withheld == 2
    # A pod whose labels make it selected arrives as ADDED, one that leaves as DELETED.
    world.pod(EventKind.MODIFIED, "job-2", {"job-name": "pi", "app": "web"})
    world.pod(EventKind.MODIFIED, "web-1", {"app": "other"})
    assert _drain(feed) == [(pb.EVENT_TYPE_ADDED, "job-2"), (pb.EVENT_TYPE_DELETED, "web-1")]
    # A new Service selecting the Job's pods: they arrive; its selector narrowed, the one
    # it no longer selects (and no other Service does) leaves.
    world.service(EventKind.ADDED, "pi", {"job-name": "pi"})
    assert sorted(_drain(feed)) == [(pb.EVENT_TYPE_ADDED, "job-1")]  # job-2 was selected
    world.service(EventKind.MODIFIED, "pi", {"job-name": "pi", "x": "1"})
    assert _drain(feed) == []  # job-1 has x=1; job-2 is still selected by "web"
    world.service(EventKind.DELETED, "web", {"app": "web"})
    assert sorted(_drain(feed)) == [(pb.EVENT_TYPE_DELETED, "job-2")]
    # job-1 (x=1) is still selected by "pi"; a Service without a selector selects nothing.
    world.service(EventKind.MODIFIED, "pi", None)
    assert _drain(feed) == [(pb.EVENT_TYPE_DELETED, "job-1")]


def test_other_namespaces_are_not_selected() -> None:
    world = World()
    world.service(EventKind.ADDED, "web", {"app": "web"})
    feed = world.subscribe()
    _drain(feed)
    world.rv += 1
    other = _stored("Pod", "web-9", world.rv, namespace="other", labels={"app": "web"})
    world.fanout.publish(PODS, [world.pods.apply(EventKind.ADDED, other, world.rv)])
    assert _drain(feed) == []


def test_selector_forms() -> None:
    path = parse_path("spec.selector")
    assert selector_at({"spec": {}}, path) is None
    assert selector_at({"spec": {"selector": {}}}, path) is None
    plain = selector_at({"spec": {"selector": {"a": "1"}}}, path)
    assert plain is not None and plain.matches({"a": "1", "b": "2"}) and not plain.matches({})
    full = selector_at(
        {
            "spec": {
                "selector": {
                    "matchLabels": {"a": "1"},
                    "matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x"]}],
                }
            }
        },
        path,
    )
    assert full is not None and full.matches({"a": "1"}) and not full.matches({"a": "1", "t": "x"})
    with pytest.raises(ValueError, match="not a map"):
        selector_at({"spec": {"selector": "a=1"}}, path)
    with pytest.raises(ValueError, match="dot-separated"):
        parse_path("spec..selector")


def test_an_object_that_leaves_is_deleted_with_its_last_state_that_passed() -> None:
    # The Endpoints controller finds the Services to update from the pod it is told of:
    # a pod relabelled away from every Service must come with the labels they selected.
    world = World()
    world.service(EventKind.ADDED, "web", {"app": "web"})
    world.pod(EventKind.ADDED, "web-1", {"app": "web"})
    feed = world.subscribe()
    _drain(feed)
    world.pod(EventKind.MODIFIED, "web-1", {"app": "other"})
    out: list[bytes] = []
    feed.take(10, out)
    (gone,) = wire.decode_batch(out)
    assert gone.type == pb.EVENT_TYPE_DELETED
    assert dict(gone.metadata.labels) == {"app": "web"}
    assert orjson.loads(gone.object)["metadata"]["labels"] == {"app": "web"}
