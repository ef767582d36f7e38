"""What a Watch target reads of its type, against the real API server: per-target label
and field selectors, the owner filter, projections and metadata-only targets, their
argument errors, and the per-subscriber counts of events sent and withheld.

Every absence asserted here is made meaningful by a positive control (the change is read
back from the API server or seen by another stream) and a later event that does arrive
on the same stream: a Watch delivers each type's changes in order, so an event missing
before a later one of its type was withheld, not late."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import orjson
import pytest
from kubernetes import client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from steward.informer.store import ResourceTypeName
from steward.v1 import informer_pb2 as pb
from tests.informer.conftest import (
    CONFIGMAPS,
    RunningInformer,
    WatchReader,
    eventually,
    wait_for_cache,
)
from tests.informer.mirror import ADDED, BOOKMARK, DELETED, INITIAL_EVENTS_END, MODIFIED

pytestmark = pytest.mark.integration

SECRETS = pb.ResourceType(group="", version="v1", resource="secrets")
ROOT_CA = "kube-root-ca.crt"
"""Published into every namespace by kube-controller-manager, whenever it gets to it."""

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

Opener = Callable[..., WatchReader]


@pytest.fixture
def open_stream(informer: RunningInformer) -> Iterator[Opener]:
    """Open Watch streams of the given targets (the ``watch`` fixture's targets carry no
    per-target fields); all are cancelled after the test."""
    readers: list[WatchReader] = []

    def open_(*targets: pb.WatchTarget, **fields: Any) -> WatchReader:
        reader = WatchReader(informer.stub, pb.WatchRequest(targets=list(targets), **fields))
        readers.append(reader)
        return reader

    try:
        yield open_
    finally:
        for reader in readers:
            reader.cancel()


def _cm(
    name: str,
    labels: dict[str, str] | None = None,
    data: dict[str, str] | None = None,
    owners: list[client.V1OwnerReference] | None = None,
    annotations: dict[str, str] | None = None,
) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(
            name=name, labels=labels, owner_references=owners, annotations=annotations
        ),
        data=data if data is not None else {"v": "1"},
    )


def _secret(name: str, labels: dict[str, str]) -> client.V1Secret:
    return client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, labels=labels), string_data={"k": "v"}
    )


def _relabel(core: client.CoreV1Api, namespace: str, name: str, labels: dict[str, str]) -> Any:
    return core.patch_namespaced_config_map(
        name, namespace, {"metadata": {"labels": labels}}, _content_type=MERGE
    )


def _set_data(core: client.CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> Any:
    return core.patch_namespaced_config_map(name, namespace, {"data": data}, _content_type=MERGE)


def _cached(informer: RunningInformer, namespace: str, name: str) -> Any:
    """The whole object as the informer's cache holds it (what a projection reduces)."""
    request = pb.GetRequest(type=CONFIGMAPS, namespace=namespace, name=name)
    return orjson.loads(informer.stub.Get(request).object.object)


def _snapshots(reader: WatchReader, *types: pb.ResourceType) -> dict[str, list[pb.Event]]:
    """Each type's snapshot (its ADDED events, kube-root-ca.crt left out), read up to the
    INITIAL_EVENTS_END of every type."""
    pending = {t.resource for t in types}
    got: dict[str, list[pb.Event]] = {t.resource: [] for t in types}
    while pending:
        event = reader.next()
        resource = event.resource_type.resource
        if event.type == INITIAL_EVENTS_END:
            pending.discard(resource)
        elif event.type == ADDED and event.metadata.name != ROOT_CA:
            assert resource in pending, f"{resource} event after its snapshot ended"
            got[resource].append(event)
    return got


def _names(events: list[pb.Event]) -> set[str]:
    return {e.metadata.name for e in events}


def _changes(
    reader: WatchReader, until: set[tuple[str, str]], timeout: float = 60.0
) -> dict[str, list[tuple[int, str]]]:
    """(type, name) of each object event by resource, markers and kube-root-ca.crt left
    out, read until every (resource, name) of ``until`` has had an event."""
    waiting = set(until)
    got: dict[str, list[tuple[int, str]]] = {}
    deadline = time.monotonic() + timeout
    while waiting:
        event = reader.next(max(0.1, deadline - time.monotonic()))
        if event.type not in (ADDED, MODIFIED, DELETED) or event.metadata.name == ROOT_CA:
            continue
        resource = event.resource_type.resource
        got.setdefault(resource, []).append((event.type, event.metadata.name))
        waiting.discard((resource, event.metadata.name))
    return got


def _next_object_event(reader: WatchReader) -> pb.Event:
    """The next event about an object (bookmarks and kube-root-ca.crt skipped)."""
    while True:
        event = reader.next()
        if event.type in (ADDED, MODIFIED, DELETED) and event.metadata.name != ROOT_CA:
            return event


# Per-target selectors --------------------------------------------------------------------


def test_per_target_selectors_narrow_one_type_only(
    core: client.CoreV1Api, namespace: str, informer: RunningInformer, open_stream: Opener
) -> None:
    """One Watch of ConfigMaps (label and field selector) and Secrets (no selector):
    only the ConfigMaps are narrowed. A second Watch adds a request-wide label selector:
    an object must pass both it and its target's."""
    core.create_namespaced_config_map(namespace, _cm("web-1", {"app": "web", "team": "a"}))
    core.create_namespaced_config_map(namespace, _cm("db-1", {"app": "db", "team": "a"}))
    last_cm = core.create_namespaced_config_map(namespace, _cm("web-x", {"app": "web"}))
    core.create_namespaced_secret(namespace, _secret("s-web", {"app": "web", "team": "a"}))
    last_secret = core.create_namespaced_secret(namespace, _secret("s-db", {"app": "db"}))
    wait_for_cache(informer, CONFIGMAPS, last_cm)
    wait_for_cache(informer, SECRETS, last_secret)

    narrowed = pb.WatchTarget(
        type=CONFIGMAPS, label_selector="app=web", field_selector="metadata.name!=web-2"
    )
    one = open_stream(narrowed, pb.WatchTarget(type=SECRETS), namespace=namespace)
    both = open_stream(
        pb.WatchTarget(type=CONFIGMAPS, label_selector="app=web"),
        pb.WatchTarget(type=SECRETS),
        namespace=namespace,
        label_selector="team=a",
    )
    snapshot = _snapshots(one, CONFIGMAPS, SECRETS)
    assert _names(snapshot["configmaps"]) == {"web-1", "web-x"}
    assert _names(snapshot["secrets"]) == {"s-web", "s-db"}
    snapshot = _snapshots(both, CONFIGMAPS, SECRETS)
    assert _names(snapshot["configmaps"]) == {"web-1"}
    assert _names(snapshot["secrets"]) == {"s-web"}

    core.create_namespaced_config_map(namespace, _cm("web-2", {"app": "web", "team": "a"}))
    core.create_namespaced_config_map(namespace, _cm("db-2", {"app": "db", "team": "a"}))
    _relabel(core, namespace, "db-1", {"app": "web", "team": "a"})  # starts to match
    _relabel(core, namespace, "web-1", {"app": "db", "team": "a"})  # stops matching
    core.create_namespaced_secret(namespace, _secret("s-db2", {"app": "db"}))
    core.create_namespaced_config_map(namespace, _cm("web-3", {"app": "web"}))
    core.create_namespaced_config_map(namespace, _cm("end", {"app": "web", "team": "a"}))
    core.create_namespaced_secret(namespace, _secret("s-end", {"app": "web", "team": "a"}))

    until = {("configmaps", "end"), ("secrets", "s-end")}
    assert _changes(one, until) == {
        "configmaps": [(ADDED, "db-1"), (DELETED, "web-1"), (ADDED, "web-3"), (ADDED, "end")],
        "secrets": [(ADDED, "s-db2"), (ADDED, "s-end")],
    }
    assert _changes(both, until) == {
        "configmaps": [(ADDED, "web-2"), (ADDED, "db-1"), (DELETED, "web-1"), (ADDED, "end")],
        "secrets": [(ADDED, "s-end")],
    }


def test_an_object_that_stops_passing_is_deleted_with_its_last_passing_state(
    core: client.CoreV1Api, namespace: str, informer: RunningInformer, open_stream: Opener
) -> None:
    """A handler of the DELETED reads the object as the subscriber knew it (its labels,
    its owner): a controller that maps it to the owner to requeue must find the old one."""
    written = core.create_namespaced_config_map(namespace, _cm("leaves", {"app": "web"}))
    wait_for_cache(informer, CONFIGMAPS, written)
    whole = open_stream(
        pb.WatchTarget(type=CONFIGMAPS, label_selector="app=web"), namespace=namespace
    )
    projected = open_stream(
        pb.WatchTarget(type=CONFIGMAPS, label_selector="app=web", fields=["metadata.labels"]),
        namespace=namespace,
    )
    for reader in (whole, projected):
        assert _names(_snapshots(reader, CONFIGMAPS)["configmaps"]) == {"leaves"}
    _relabel(core, namespace, "leaves", {"app": "db"})
    for reader in (whole, projected):
        event = _next_object_event(reader)
        assert (event.type, event.metadata.name) == (DELETED, "leaves")
        assert event.metadata.labels == {"app": "web"}
        assert orjson.loads(event.object)["metadata"]["labels"] == {"app": "web"}


# Owner filter ----------------------------------------------------------------------------


def _owner(kind: str, api_version: str, obj: Any, controller: bool = True) -> dict[str, Any]:
    """An owner reference to ``obj`` (a written object), as JSON."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "controller": controller,
    }


def _owned(name: str, *owners: dict[str, Any]) -> client.V1ConfigMap:
    refs = [
        client.V1OwnerReference(
            api_version=o["apiVersion"],
            kind=o["kind"],
            name=o["name"],
            uid=o["uid"],
            controller=o["controller"],
        )
        for o in owners
    ]
    return _cm(name, owners=refs or None)


def _set_owners(core: client.CoreV1Api, namespace: str, name: str, *owners: dict[str, Any]) -> None:
    core.patch_namespaced_config_map(
        name,
        namespace,
        [{"op": "add", "path": "/metadata/ownerReferences", "value": list(owners)}],
        _content_type=JSON_PATCH,
    )


def test_owner_filter(
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    informer: RunningInformer,
    open_stream: Opener,
) -> None:
    """ConfigMaps controlled by a ReplicaSet (group apps), by a ConfigMap (core group),
    owned by a ReplicaSet without being controlled, and orphans. The owners are real:
    kube-controller-manager's garbage collector deletes dependents of missing owners."""
    apps = client.AppsV1Api(api_client)
    replica_set = apps.create_namespaced_replica_set(
        namespace,
        client.V1ReplicaSet(
            metadata=client.V1ObjectMeta(name="owner-rs"),
            spec=client.V1ReplicaSetSpec(
                replicas=0,
                selector=client.V1LabelSelector(match_labels={"app": "owner-rs"}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"app": "owner-rs"}),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="c", image="registry.invalid/x")]
                    ),
                ),
            ),
        ),
    )
    owner_cm = core.create_namespaced_config_map(namespace, _cm("owner-cm"))
    by_rs = _owner("ReplicaSet", "apps/v1", replica_set)
    by_cm = _owner("ConfigMap", "v1", owner_cm)
    core.create_namespaced_config_map(namespace, _owned("by-rs", by_rs))
    core.create_namespaced_config_map(namespace, _owned("by-cm", by_cm))
    core.create_namespaced_config_map(
        namespace, _owned("rs-not-controller", _owner("ReplicaSet", "apps/v1", replica_set, False))
    )
    last = core.create_namespaced_config_map(namespace, _owned("orphan"))
    wait_for_cache(informer, CONFIGMAPS, last)

    def target(*kinds: tuple[str, str], orphans: bool = False) -> pb.WatchTarget:
        return pb.WatchTarget(
            type=CONFIGMAPS,
            owner_filter=pb.OwnerFilter(
                kinds=[pb.GroupKind(group=g, kind=k) for g, k in kinds], orphans=orphans
            ),
        )

    rs_only = open_stream(target(("apps", "ReplicaSet")), namespace=namespace)
    with_orphans = open_stream(target(("apps", "ReplicaSet"), orphans=True), namespace=namespace)
    # The group must match the kind's: a core ReplicaSet or an apps ConfigMap is another
    # kind (orphans, so that this stream gets something to show it is live).
    wrong_groups = open_stream(
        target(("", "ReplicaSet"), ("apps", "ConfigMap"), orphans=True), namespace=namespace
    )
    two_kinds = open_stream(target(("", "ConfigMap"), ("apps", "ReplicaSet")), namespace=namespace)

    rs_snapshot = _snapshots(rs_only, CONFIGMAPS)["configmaps"]
    assert _names(rs_snapshot) == {"by-rs"}
    [controller] = [r for r in rs_snapshot[0].metadata.owner_references if r.controller]
    assert (controller.api_version, controller.kind) == ("apps/v1", "ReplicaSet")
    assert _names(_snapshots(with_orphans, CONFIGMAPS)["configmaps"]) == {
        "by-rs",
        "rs-not-controller",  # owned, but without a controller: an orphan
        "orphan",
        "owner-cm",
    }
    assert _names(_snapshots(wrong_groups, CONFIGMAPS)["configmaps"]) == {
        "rs-not-controller",
        "orphan",
        "owner-cm",
    }
    assert _names(_snapshots(two_kinds, CONFIGMAPS)["configmaps"]) == {"by-rs", "by-cm"}

    _set_data(core, namespace, "orphan", {"v": "2"})
    # Taken before the orphan's adoption: a queue coalesces changes of one object.
    for reader in (with_orphans, wrong_groups):
        event = _next_object_event(reader)
        assert (event.type, event.metadata.name) == (MODIFIED, "orphan")
    _set_owners(core, namespace, "by-cm", by_rs)  # now controlled by the ReplicaSet
    _set_owners(core, namespace, "by-rs", by_cm)  # no longer
    _set_owners(core, namespace, "orphan", by_cm)  # adopted, by a ConfigMap
    core.create_namespaced_config_map(namespace, _owned("end", by_rs))
    core.create_namespaced_config_map(namespace, _owned("new-orphan"))

    assert _changes(rs_only, {("configmaps", "end")})["configmaps"] == [
        (ADDED, "by-cm"),
        (DELETED, "by-rs"),
        (ADDED, "end"),
    ]
    assert _changes(with_orphans, {("configmaps", "new-orphan")})["configmaps"] == [
        (ADDED, "by-cm"),
        (DELETED, "by-rs"),
        (DELETED, "orphan"),
        (ADDED, "end"),
        (ADDED, "new-orphan"),
    ]
    assert _changes(wrong_groups, {("configmaps", "new-orphan")})["configmaps"] == [
        (DELETED, "orphan"),
        (ADDED, "new-orphan"),
    ]
    assert _changes(two_kinds, {("configmaps", "end")})["configmaps"] == [
        (MODIFIED, "by-cm"),
        (MODIFIED, "by-rs"),
        (ADDED, "orphan"),
        (ADDED, "end"),
    ]


# Projections -----------------------------------------------------------------------------


def test_projection_sends_only_the_paths_asked_for(
    core: client.CoreV1Api, namespace: str, informer: RunningInformer, open_stream: Opener
) -> None:
    a = core.create_namespaced_config_map(
        namespace, _cm("a", {"app": "web"}, {"keep": "1", "other": "1"})
    )
    b = core.create_namespaced_config_map(
        namespace, _cm("b", {"app": "web"}, {"keep": "1", "other": "1"})
    )
    wait_for_cache(informer, CONFIGMAPS, b)
    # The full objects hold what the projection leaves out.
    full = _cached(informer, namespace, "a")
    assert full["metadata"]["managedFields"] and full["metadata"]["resourceVersion"]
    assert full["data"]["other"] == "1" and full["metadata"]["labels"] == {"app": "web"}

    reader = open_stream(
        pb.WatchTarget(type=CONFIGMAPS, fields=["data.keep"]),
        namespace=namespace,
        subscriber=f"projected-{uuid.uuid4().hex[:6]}",
    )

    def projected(name: Any, uid: Any, keep: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "data": {"keep": keep},
        }

    snapshot = {e.metadata.name: e for e in _snapshots(reader, CONFIGMAPS)["configmaps"]}
    assert set(snapshot) == {"a", "b"}
    for written in (a, b):
        event = snapshot[str(written.metadata.name)]
        assert orjson.loads(event.object) == projected(
            written.metadata.name, written.metadata.uid, "1"
        )
        # The parsed metadata is whole: the resource version and labels are there.
        assert event.metadata.resource_version == written.metadata.resource_version
        assert event.metadata.labels == {"app": "web"}
        assert event.metadata.uid == written.metadata.uid

    # A change outside the projection: made (read back) and seen by the informer, not sent.
    hidden = _set_data(core, namespace, "a", {"other": "2"})
    assert core.read_namespaced_config_map("a", namespace).data == {"keep": "1", "other": "2"}
    wait_for_cache(informer, CONFIGMAPS, hidden)
    # A change inside it, of another object: the next event of the stream.
    changed = _set_data(core, namespace, "b", {"keep": "2"})
    event = _next_object_event(reader)
    assert (event.type, event.metadata.name) == (MODIFIED, "b")
    assert orjson.loads(event.object) == projected("b", b.metadata.uid, "2")
    assert event.metadata.resource_version == changed.metadata.resource_version

    # A label change is sent though metadata.labels is not projected: the parsed metadata
    # carries the labels, and the client's copy of them would be wrong otherwise.
    relabelled = _relabel(core, namespace, "a", {"app": "api"})
    event = _next_object_event(reader)
    assert (event.type, event.metadata.name) == (MODIFIED, "a")
    assert event.metadata.labels == {"app": "api"}
    assert event.metadata.resource_version == relabelled.metadata.resource_version
    assert orjson.loads(event.object) == projected("a", a.metadata.uid, "1")

    kept = _set_data(core, namespace, "a", {"keep": "3"})
    event = _next_object_event(reader)
    assert (event.type, event.metadata.name) == (MODIFIED, "a")
    assert orjson.loads(event.object) == projected("a", a.metadata.uid, "3")
    assert event.metadata.resource_version == kept.metadata.resource_version

    core.delete_namespaced_config_map("b", namespace)
    event = _next_object_event(reader)
    assert (event.type, event.metadata.name) == (DELETED, "b")
    assert orjson.loads(event.object) == projected("b", b.metadata.uid, "2")


def test_metadata_only(
    core: client.CoreV1Api, namespace: str, informer: RunningInformer, open_stream: Opener
) -> None:
    for name in ("m", "n"):
        written = core.create_namespaced_config_map(
            namespace, _cm(name, {"app": "web"}, {"k": "v"}, annotations={"note": "x"})
        )
    wait_for_cache(informer, CONFIGMAPS, written)
    full = _cached(informer, namespace, "n")
    assert full["data"] == {"k": "v"} and full["metadata"]["managedFields"]

    reader = open_stream(pb.WatchTarget(type=CONFIGMAPS, metadata_only=True), namespace=namespace)
    snapshot = {e.metadata.name: e for e in _snapshots(reader, CONFIGMAPS)["configmaps"]}
    assert set(snapshot) == {"m", "n"}
    body = orjson.loads(snapshot["n"].object)
    expected_meta = {
        k: v for k, v in full["metadata"].items() if k not in ("managedFields", "resourceVersion")
    }
    assert body == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": expected_meta}
    assert body["metadata"]["labels"] == {"app": "web"}
    assert body["metadata"]["annotations"] == {"note": "x"}
    assert snapshot["n"].metadata.resource_version == written.metadata.resource_version

    # A data change changes nothing a metadata-only subscriber reads (the resource
    # version comes with the parsed metadata of the next event it gets): made, seen by
    # the informer, and not sent before a later change of another object's metadata.
    hidden = _set_data(core, namespace, "m", {"k": "w"})
    assert core.read_namespaced_config_map("m", namespace).data == {"k": "w"}
    wait_for_cache(informer, CONFIGMAPS, hidden)
    annotated = core.patch_namespaced_config_map(
        "n", namespace, {"metadata": {"annotations": {"note": "y"}}}, _content_type=MERGE
    )
    event = _next_object_event(reader)
    assert (event.type, event.metadata.name) == (MODIFIED, "n")
    assert event.metadata.resource_version == annotated.metadata.resource_version
    body = orjson.loads(event.object)
    assert set(body) == {"apiVersion", "kind", "metadata"}
    assert body["metadata"]["annotations"] == {"note": "y"}
    assert "managedFields" not in body["metadata"]
    assert "resourceVersion" not in body["metadata"]


# Argument errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "bad", "named"),
    [
        (1, pb.WatchTarget(fields=["data.keep", "spec..nodeName"]), "'spec..nodeName'"),
        (0, pb.WatchTarget(fields=["data[0]"]), "'data[0]'"),
        (1, pb.WatchTarget(owner_filter=pb.OwnerFilter()), "owner_filter"),
        (
            1,
            pb.WatchTarget(owner_filter=pb.OwnerFilter(kinds=[pb.GroupKind(group="apps")])),
            "owner_filter",
        ),
        (1, pb.WatchTarget(label_selector="app in (web"), "app in (web"),
        (0, pb.WatchTarget(field_selector="spec.nodeName=n1"), "spec.nodeName"),
    ],
    ids=[
        "empty-segment",
        "bad-characters",
        "owner-filter-matching-nothing",
        "owner-kind-without-kind",
        "label-selector",
        "field-selector",
    ],
)
def test_malformed_targets_are_invalid_arguments_naming_the_target(
    informer: RunningInformer, index: int, bad: pb.WatchTarget, named: str
) -> None:
    targets = [pb.WatchTarget(type=CONFIGMAPS), pb.WatchTarget(type=SECRETS)]
    targets[index].MergeFrom(bad)
    call = informer.stub.Watch(pb.WatchRequest(targets=targets), timeout=30)
    with pytest.raises(grpc.RpcError) as raised:
        next(iter(call))
    err: Any = raised.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert f"targets[{index}]" in err.details()
    assert f"targets[{1 - index}]" not in err.details()
    assert named in err.details()


# Counts per subscriber -------------------------------------------------------------------


COUNTERS = (
    "steward_informer_subscriber_events_total",
    "steward_informer_subscriber_withheld_events_total",
)


def _subscriber_samples(text: str, subscriber: str) -> dict[str, float]:
    """The per-subscriber counters of ``subscriber`` for configmaps in a scrape."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.labels.get("subscriber") == subscriber
                and sample.labels.get("resource") == "configmaps.v1"
                and sample.name in COUNTERS
            ):
                out[sample.name] = sample.value
    return out


def test_withheld_changes_are_counted_not_sent(
    core: client.CoreV1Api, namespace: str, informer: RunningInformer, open_stream: Opener
) -> None:
    """A burst of changes outside a subscriber's filter costs it nothing on the wire:
    its sent count moves only by what it received, its withheld count by the burst."""
    subscriber = f"narrow-{uuid.uuid4().hex[:6]}"
    control = f"all-{uuid.uuid4().hex[:6]}"
    key = (subscriber, ResourceTypeName("", "v1", "configmaps"))
    control_key = (control, key[1])
    fanout = informer.server.fanout

    narrow = open_stream(
        pb.WatchTarget(type=CONFIGMAPS, label_selector="app=wanted"),
        namespace=namespace,
        subscriber=subscriber,
    )
    everything = open_stream(
        pb.WatchTarget(type=CONFIGMAPS), namespace=namespace, subscriber=control
    )
    received = narrow.snapshot()
    everything.snapshot()

    def settled(events: list[pb.Event], what: str) -> tuple[int, int]:
        """The subscriber's (sent, withheld) once its sent count is what it received
        (the stream's send may run a moment ahead of the client's read)."""
        last: list[tuple[int, int]] = []

        def check() -> bool:
            while not narrow.events.empty():
                events.append(narrow.next())
            last[:] = [informer.inspect(lambda: fanout.counts()[key])]
            return last[0][0] == len(events)

        eventually(check, what=f"{what}: the sent count to equal the events received")
        return last[0]

    sent0, withheld0 = settled(received, "after the snapshot")
    before = len(received)
    control0 = informer.inspect(lambda: fanout.counts()[control_key])[0]

    burst = 12
    for i in range(burst):
        core.create_namespaced_config_map(namespace, _cm(f"noise-{i}", {"app": "other"}))
    for i in range(burst):
        _set_data(core, namespace, f"noise-{i}", {"v": "2"})
    core.create_namespaced_config_map(namespace, _cm("wanted", {"app": "wanted"}))

    # Positive control: an unfiltered subscriber of the namespace got the whole burst.
    seen = everything.until(lambda e: e.metadata.name == "wanted")
    noise = [e for e in seen if e.metadata.name.startswith("noise-")]
    assert len(noise) == 2 * burst
    received.extend(narrow.until(lambda e: e.metadata.name == "wanted"))
    sent1, withheld1 = settled(received, "after the burst")
    window = received[before:]
    # Sent: the sentinel (and any bookmark), none of the noise.
    assert [(e.type, e.metadata.name) for e in window if e.type != BOOKMARK] == [(ADDED, "wanted")]
    assert sent1 - sent0 == len(window)
    assert withheld1 - withheld0 >= 2 * burst
    control1 = informer.inspect(lambda: fanout.counts()[control_key])[0]
    assert control1 - control0 >= 2 * burst + 1

    # The counts are exported by subscriber and resource.
    counts, text = informer.inspect(
        lambda: (fanout.counts()[key], generate_latest(informer.server.metrics.registry))
    )
    assert _subscriber_samples(text.decode(), subscriber) == {
        "steward_informer_subscriber_events_total": counts[0],
        "steward_informer_subscriber_withheld_events_total": counts[1],
    }

    # A counter never goes down: the counts of a closed stream stay.
    narrow.cancel()

    def closed() -> bool:
        return informer.inspect(lambda: all(s.name != subscriber for s in fanout.subscriptions))

    eventually(closed, what="the stream's subscription to be removed")
    after = informer.inspect(lambda: fanout.counts().get(key))
    assert after is not None and after[0] >= counts[0] and after[1] >= counts[1]
    text = informer.inspect(lambda: generate_latest(informer.server.metrics.registry))
    assert _subscriber_samples(text.decode(), subscriber) == {
        "steward_informer_subscriber_events_total": after[0],
        "steward_informer_subscriber_withheld_events_total": after[1],
    }
