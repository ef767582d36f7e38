"""Per-type subscriptions without a cluster: how the sources of a type merge, what the
builder's keywords become in the mirror's WatchRequest, how a projected object refuses
reads outside its projection, and when a write that touched nothing the controller reads
counts as seen."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
import orjson
import pytest
import pytest_asyncio

import steward
from steward.projection import Omit, Projection
from steward.runtime.mirror import Mirror, MirrorObject, StaleRead, guard_reads
from steward.runtime.resources import (
    CONFIGMAPS,
    DEPLOYMENTS,
    JOBS,
    PODS,
    REPLICASETS,
    Resource,
)
from steward.runtime.subscriptions import (
    EVERYTHING,
    Projected,
    ProjectionError,
    TypeSubscription,
    guard,
    merge,
    readable_tree,
    subscription,
)
from steward.v1 import informer_pb2 as pb

pytestmark = [pytest.mark.unit, pytest.mark.asyncio]

RS = ("apps", "ReplicaSet")
JOB = ("batch", "Job")
DEPLOYMENT = ("apps", "Deployment")


async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
    return steward.Result()


def nothing(reconciler: Any, obj: Any) -> list[steward.Request]:
    return []


@pytest_asyncio.fixture
async def channel() -> AsyncIterator[grpc.aio.Channel]:
    ch = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled by these tests
    yield ch
    await ch.close()


# Merging the sources of a type ------------------------------------------------------------
async def test_owner_kinds_are_the_union_of_the_sources() -> None:
    merged = merge(PODS, [subscription(owned_by=[REPLICASETS]), subscription(owned_by=[JOBS])])
    assert merged.owner_kinds == frozenset({RS, JOB})
    assert merged.orphans is False
    target = merged.target(PODS)
    assert target.HasField("owner_filter")
    assert [(k.group, k.kind) for k in target.owner_filter.kinds] == sorted([RS, JOB])
    assert target.owner_filter.orphans is False


async def test_orphans_are_kept_when_any_source_wants_them() -> None:
    owner = subscription(owned_by=[REPLICASETS])
    adopter = subscription(owned_by=(), orphans=True)
    for subs in ([owner, adopter], [adopter, owner]):
        merged = merge(PODS, subs)
        assert merged.owner_kinds == frozenset({RS})
        assert merged.orphans is True


async def test_a_source_without_owner_filter_gets_every_object() -> None:
    filtered = subscription(owned_by=[REPLICASETS], orphans=True)
    for subs in ([filtered, subscription()], [subscription(), filtered]):
        merged = merge(PODS, subs)
        assert merged.owner_kinds is None
        assert merged.orphans is False
        assert not merged.target(PODS).HasField("owner_filter")


async def test_fields_are_the_union_of_the_sources() -> None:
    merged = merge(
        PODS,
        [
            subscription(fields=["spec.nodeName", "status.phase"]),
            subscription(fields=["spec.nodeName", "spec.volumes"]),
        ],
    )
    assert merged.fields == ("spec.nodeName", "spec.volumes", "status.phase")
    assert merged.metadata_only is False
    assert not merged.whole


async def test_metadata_is_kept_when_any_source_reads_only_the_metadata() -> None:
    merged = merge(PODS, [subscription(fields=["status.phase"]), subscription(metadata_only=True)])
    assert merged.fields == ("status.phase",)
    assert merged.metadata_only is True


async def test_a_source_reading_whole_objects_wins() -> None:
    projected = [subscription(fields=["status.phase"]), subscription(metadata_only=True)]
    for at in range(3):
        subs = list(projected)
        subs.insert(at, subscription())
        merged = merge(PODS, subs)
        assert merged.whole
        assert merged.fields == ()
        assert merged.metadata_only is False
        assert merged.projection() is None
        target = merged.target(PODS)
        assert list(target.fields) == [] and target.metadata_only is False


async def test_owners_and_paths_merge_apart() -> None:
    """A source that wants every object but few paths, and one that wants the whole of a
    few objects: every object, wholly."""
    merged = merge(
        PODS,
        [subscription(owned_by=[REPLICASETS]), subscription(fields=["status.phase"])],
    )
    assert merged.owner_kinds is None
    assert merged.whole
    merged = merge(
        PODS,
        [
            subscription(owned_by=[REPLICASETS], fields=["spec.nodeName"]),
            subscription(owned_by=[JOBS], metadata_only=True),
        ],
    )
    assert merged.owner_kinds == frozenset({RS, JOB})
    assert merged.fields == ("spec.nodeName",)
    assert merged.metadata_only is True


async def test_equal_selectors_are_kept_and_different_ones_refused() -> None:
    same = [
        subscription(label_selector="app=web", field_selector="metadata.name=a"),
        subscription(label_selector="app=web", field_selector="metadata.name=a", fields=["spec"]),
    ]
    merged = merge(PODS, same)
    assert (merged.label_selector, merged.field_selector) == ("app=web", "metadata.name=a")
    target = merged.target(PODS)
    assert (target.label_selector, target.field_selector) == ("app=web", "metadata.name=a")
    for other in (
        subscription(label_selector="app=db", field_selector="metadata.name=a"),
        subscription(label_selector="app=web"),
        subscription(),
    ):
        with pytest.raises(ValueError, match=r"sources of replicasets\.apps .*different"):
            merge(REPLICASETS, [same[0], other])


async def test_a_join_is_kept_only_when_every_source_makes_it() -> None:
    by_services = (steward.SERVICES, "spec.selector")
    by_deployments = (DEPLOYMENTS, "spec.selector")
    merged = merge(
        PODS,
        [subscription(selected_by=by_services), subscription(selected_by=by_services)],
    )
    assert merged.selected_by == by_services
    target = merged.target(PODS)
    assert target.HasField("selected_by")
    assert (target.selected_by.type.resource, target.selected_by.path) == (
        "services",
        "spec.selector",
    )
    for other in (subscription(selected_by=by_deployments), subscription()):
        for subs in (
            [subscription(selected_by=by_services), other],
            [other, subscription(selected_by=by_services)],
        ):
            merged = merge(PODS, subs)
            assert merged.selected_by is None
            assert not merged.target(PODS).HasField("selected_by")


async def test_no_source_reads_everything() -> None:
    assert merge(PODS, []) == EVERYTHING
    assert EVERYTHING.whole and EVERYTHING.owner_kinds is None


# Declaring a subscription -------------------------------------------------------------------
async def test_subscription_refuses_what_cannot_be_watched() -> None:
    kindless = Resource("example.com", "v1", "widgets")
    with pytest.raises(ValueError, match=r"widgets\.example\.com.*needs its kind"):
        subscription(owned_by=[REPLICASETS, kindless])
    with pytest.raises(ValueError, match="orphans=True needs owned_by"):
        subscription(orphans=True)
    for bad in ("spec..nodeName", "spec.node name", "", ".spec", "status.phase."):
        with pytest.raises(ValueError, match="path"):
            subscription(fields=["status.phase", bad])
    with pytest.raises(ValueError, match="64"):
        subscription(fields=[f"f{i}" for i in range(65)])


async def test_the_builder_refuses_a_malformed_path_at_declaration() -> None:
    builder: steward.ControllerBuilder[Any] = steward.ControllerBuilder("x").for_(REPLICASETS)
    with pytest.raises(ValueError, match=r"malformed path 'spec\.a b'"):
        builder.owns(PODS, fields=["spec.a b"])
    with pytest.raises(ValueError, match="malformed path"):
        steward.ControllerBuilder("y").for_(PODS, fields=["status..phase"])
    with pytest.raises(ValueError, match="malformed path"):
        builder.watches(CONFIGMAPS, nothing, fields=["data.*"])
    with pytest.raises(ValueError, match="needs its kind"):
        builder.watches(CONFIGMAPS, nothing, owned_by=[Resource("example.com", "v1", "widgets")])
    with pytest.raises(ValueError, match="orphans=True needs owned_by"):
        builder.reads(CONFIGMAPS, orphans=True)


async def test_subscription_keeps_what_it_was_given() -> None:
    sub = subscription(
        owned_by=[REPLICASETS, REPLICASETS, JOBS],
        orphans=True,
        label_selector="a=b",
        field_selector="metadata.name=x",
        fields=["status.phase", "spec.nodeName"],
        metadata_only=True,
    )
    assert sub == TypeSubscription(
        label_selector="a=b",
        field_selector="metadata.name=x",
        owner_kinds=frozenset({RS, JOB}),
        orphans=True,
        fields=("status.phase", "spec.nodeName"),
        metadata_only=True,
    )


# The builder's sources → the WatchRequest ---------------------------------------------------
def targets(mirror: Mirror) -> dict[str, pb.WatchTarget]:
    return {t.type.resource: t for t in mirror._request().targets}


def owners(target: pb.WatchTarget) -> tuple[list[tuple[str, str]], bool] | None:
    if not target.HasField("owner_filter"):
        return None
    kinds = [(k.group, k.kind) for k in target.owner_filter.kinds]
    return kinds, target.owner_filter.orphans


async def test_the_primary_type_takes_the_informers_selectors() -> None:
    """A controller of one object declares it by name: the informer is asked for that
    object only, not every object of the type."""
    definition = (
        steward.ControllerBuilder("one-configmap")
        .for_(
            CONFIGMAPS,
            field_selector="metadata.namespace=kube-public,metadata.name=cluster-info",
            label_selector="tier=x",
        )
        .complete(reconcile)
    )
    assert definition.subscriptions() == {
        CONFIGMAPS: TypeSubscription(
            label_selector="tier=x",
            field_selector="metadata.namespace=kube-public,metadata.name=cluster-info",
        )
    }


async def test_the_builders_sources_merge_into_one_target_per_type(
    channel: grpc.aio.Channel,
) -> None:
    definition = (
        steward.ControllerBuilder("subscribed")
        .for_(REPLICASETS, fields=["spec.selector", "spec.replicas"])
        .owns(PODS, fields=["status.phase"])
        .adopts(PODS, metadata_only=True)
        .watches(CONFIGMAPS, nothing, fields=["data.watched"], owned_by=[DEPLOYMENTS])
        .complete(reconcile)
    )
    subs = definition.subscriptions()
    assert subs == {
        REPLICASETS: TypeSubscription(fields=("spec.replicas", "spec.selector")),
        PODS: TypeSubscription(
            owner_kinds=frozenset({RS}),
            orphans=True,
            fields=("status.phase",),
            metadata_only=True,
        ),
        CONFIGMAPS: TypeSubscription(owner_kinds=frozenset({DEPLOYMENT}), fields=("data.watched",)),
    }
    controller = definition.new(
        channel, None, steward.ControllerOptions(namespace="ns", label_selector="tier=x")
    )
    assert controller.subscriptions == subs
    request = controller.mirror._request()
    assert [t.type.resource for t in request.targets] == ["replicasets", "pods", "configmaps"]
    # The request's own selectors are the controller's options, not any source's.
    assert (request.namespace, request.label_selector) == ("ns", "tier=x")
    assert request.subscriber == "subscribed"
    by_type = targets(controller.mirror)
    rs, pods, cms = by_type["replicasets"], by_type["pods"], by_type["configmaps"]
    assert owners(rs) is None
    assert list(rs.fields) == ["spec.replicas", "spec.selector"]
    assert rs.metadata_only is False
    assert owners(pods) == ([RS], True)
    assert list(pods.fields) == ["status.phase"]
    assert pods.metadata_only is True
    assert owners(cms) == ([DEPLOYMENT], False)
    assert list(cms.fields) == ["data.watched"]
    assert cms.metadata_only is False
    for target in (rs, pods, cms):
        assert (target.label_selector, target.field_selector) == ("", "")


async def test_owns_alone_receives_only_the_primarys_children(channel: grpc.aio.Channel) -> None:
    definition = steward.ControllerBuilder("o").for_(JOBS).owns(PODS).complete(reconcile)
    by_type = targets(definition.new(channel).mirror)
    assert owners(by_type["pods"]) == ([JOB], False)
    assert list(by_type["pods"].fields) == [] and not by_type["pods"].metadata_only
    assert owners(by_type["jobs"]) is None  # the primary: every object
    with_orphans: steward.ControllerBuilder[Any] = (
        steward.ControllerBuilder("o").for_(JOBS).owns(PODS, orphans=True)
    )
    by_type = targets(with_orphans.complete(reconcile).new(channel).mirror)
    assert owners(by_type["pods"]) == ([JOB], True)


async def test_adopts_alone_receives_only_orphans(channel: grpc.aio.Channel) -> None:
    definition = steward.ControllerBuilder("a").for_(REPLICASETS).adopts(PODS).complete(reconcile)
    assert owners(targets(definition.new(channel).mirror)["pods"]) == ([], True)


async def test_an_unfiltered_source_opens_the_type_to_every_object(
    channel: grpc.aio.Channel,
) -> None:
    definition = (
        steward.ControllerBuilder("w")
        .for_(REPLICASETS)
        .owns(PODS, fields=["status.phase"])
        .watches(PODS, nothing, metadata_only=True)
        .reads(CONFIGMAPS, owned_by=[REPLICASETS], fields=["data.x"])
        .watches_changes(CONFIGMAPS, lambda r, c: [], owned_by=[JOBS], fields=["data.y"])
        .complete(reconcile)
    )
    by_type = targets(definition.new(channel).mirror)
    pods, cms = by_type["pods"], by_type["configmaps"]
    assert owners(pods) is None
    assert (list(pods.fields), pods.metadata_only) == (["status.phase"], True)
    assert owners(cms) == (sorted([RS, JOB]), False)
    assert (list(cms.fields), cms.metadata_only) == (["data.x", "data.y"], False)


async def test_different_selectors_of_one_type_fail_when_the_controller_is_built(
    channel: grpc.aio.Channel,
) -> None:
    definition = (
        steward.ControllerBuilder("s")
        .for_(REPLICASETS)
        .watches(CONFIGMAPS, nothing, label_selector="a=1")
        .reads(CONFIGMAPS, label_selector="a=2")
        .complete(reconcile)
    )
    with pytest.raises(ValueError, match="configmaps"):
        definition.subscriptions()
    with pytest.raises(ValueError, match="configmaps"):
        definition.new(channel)


async def test_the_resume_point_stays_in_a_projected_target(channel: grpc.aio.Channel) -> None:
    mirror = Mirror(
        channel,
        [CONFIGMAPS],
        subscriptions={CONFIGMAPS: subscription(owned_by=[JOBS], fields=["data.watched"])},
    )
    mirror._apply(
        [
            pb.Event(
                type=pb.EVENT_TYPE_INITIAL_EVENTS_END,
                resource_type=CONFIGMAPS.wire,
                resource_version="42",
            )
        ]
    )
    target = mirror._request().targets[0]
    assert target.resource_version == "42"
    assert owners(target) == ([JOB], False)
    assert list(target.fields) == ["data.watched"]


# Reading a projected object -----------------------------------------------------------------
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "uid-p",
        "resourceVersion": "7",
        "labels": {"app": "web"},
        "annotations": {"note": "x"},
        "managedFields": [{"manager": "kubectl"}],
    },
    "spec": {
        "nodeName": "n1",
        "restartPolicy": "Always",
        "containers": [
            {"name": "a", "image": "img-a", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "img-b"},
        ],
    },
    "status": {"phase": "Running"},
}


def meta_of(obj: dict[str, Any]) -> pb.ObjectMeta:
    m = obj["metadata"]
    meta = pb.ObjectMeta(
        name=m["name"],
        namespace=m.get("namespace", ""),
        uid=m["uid"],
        resource_version=m["resourceVersion"],
    )
    meta.labels.update(m.get("labels") or {})
    return meta


def event(
    kind: pb.EventType.ValueType, rtype: Resource, obj: dict[str, Any], raw: bytes
) -> pb.Event:
    return pb.Event(
        type=kind,
        resource_type=rtype.wire,
        resource_version=obj["metadata"]["resourceVersion"],
        metadata=meta_of(obj),
        object=raw,
    )


def projected_mirror(
    channel: grpc.aio.Channel, fields: Iterable[str] = (), metadata_only: bool = False
) -> Mirror:
    """A mirror of PODS projected so, and of JOBS whole, holding POD as the informer would
    send it (the projected JSON, without the resource version)."""
    mirror = Mirror(
        channel,
        [PODS, JOBS],
        subscriptions={PODS: subscription(fields=list(fields), metadata_only=metadata_only)},
    )
    projection = Projection.parse(fields, metadata_only)
    assert projection is not None
    raw = projection.encode(POD)
    assert b'"resourceVersion"' not in raw  # the informer never sends it
    mirror._apply([event(pb.EVENT_TYPE_ADDED, PODS, POD, raw)])
    return mirror


def held(mirror: Mirror) -> MirrorObject:
    obj = mirror.get(PODS, "ns", "p")
    assert obj is not None
    return obj


async def test_a_read_outside_the_projection_raises_naming_the_path(
    channel: grpc.aio.Channel,
) -> None:
    obj = held(projected_mirror(channel, ["spec.nodeName", "status"]))
    assert obj.view is not None
    pod = obj.object
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["status"] == {"phase": "Running"}
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    spec = pod["spec"]
    assert isinstance(spec, Projected)
    with pytest.raises(
        ProjectionError, match=r"spec\.restartPolicy is not in the projection"
    ) as caught:
        spec["restartPolicy"]
    assert "spec.nodeName" in str(caught.value)  # names the projection too
    with pytest.raises(ProjectionError, match=r"spec\.notProjected"):
        spec["notProjected"]
    with pytest.raises(ProjectionError, match=r"spec\.restartPolicy"):
        spec.get("restartPolicy")
    with pytest.raises(ProjectionError, match=r"spec\.restartPolicy"):
        spec.get("restartPolicy", "default")
    with pytest.raises(ProjectionError, match=r"spec\.containers"):
        "containers" in spec  # noqa: B015 - the membership test is what raises
    with pytest.raises(ProjectionError, match=r"^metadata\.labels "):
        pod["metadata"]["labels"]
    # Whatever sits under a path kept whole reads as a plain dict: missing keys are missing.
    assert not isinstance(pod["status"], Projected)
    assert pod["status"].get("reason") is None
    assert "reason" not in pod["status"]


async def test_a_path_in_the_projection_but_not_in_the_object_is_simply_absent(
    channel: grpc.aio.Channel,
) -> None:
    obj = held(projected_mirror(channel, ["spec.nodeName", "spec.hostname"]))
    spec = obj.object["spec"]
    assert spec.get("hostname") is None
    assert spec.get("hostname", "none") == "none"
    assert "hostname" not in spec
    assert "nodeName" in spec
    with pytest.raises(KeyError) as caught:
        spec["hostname"]
    assert not isinstance(caught.value, ProjectionError)
    assert not issubclass(ProjectionError, KeyError)  # a forgotten path is not "absent"


async def test_the_identity_comes_from_the_parsed_metadata(channel: grpc.aio.Channel) -> None:
    mirror = Mirror(channel, [PODS], subscriptions={PODS: subscription(fields=["status.phase"])})
    # The projected JSON carries no metadata at all; the event's parsed metadata does.
    mirror._apply([event(pb.EVENT_TYPE_ADDED, PODS, POD, b'{"status":{"phase":"Running"}}')])
    metadata = held(mirror).object["metadata"]
    assert metadata["name"] == "p"
    assert metadata["namespace"] == "ns"
    assert metadata["uid"] == "uid-p"
    assert metadata["resourceVersion"] == "7"
    assert metadata.get("resourceVersion") == "7" and "resourceVersion" in metadata
    with pytest.raises(ProjectionError, match=r"metadata\.annotations"):
        metadata.get("annotations")
    # The parsed metadata wins over what the JSON says (the informer's identity is the key).
    stale = {"metadata": {"name": "wrong", "uid": "wrong", "resourceVersion": "1"}}
    obj = MirrorObject(PODS, meta_of(POD), orjson.dumps(stale), held(mirror).view)
    assert obj.object["metadata"]["name"] == "p"
    assert obj.object["metadata"]["uid"] == "uid-p"
    assert obj.object["metadata"]["resourceVersion"] == "7"


async def test_a_cluster_scoped_object_has_no_namespace() -> None:
    projection = Projection.parse(["spec.unschedulable"])
    assert projection is not None
    meta = pb.ObjectMeta(name="n1", uid="uid-n1", resource_version="3")
    nodes = steward.NODES
    obj = MirrorObject(nodes, meta, b'{"spec":{}}', (projection, readable_tree(projection)))
    metadata = obj.object["metadata"]
    assert metadata["name"] == "n1"
    assert "namespace" not in metadata  # in the projection, absent from the object


async def test_lists_in_a_projection_are_guarded_item_by_item(channel: grpc.aio.Channel) -> None:
    obj = held(projected_mirror(channel, ["spec.containers.image", "spec.containers.ports"]))
    containers = obj.object["spec"]["containers"]
    assert isinstance(containers, list) and len(containers) == 2
    assert [c["image"] for c in containers] == ["img-a", "img-b"]
    assert all(isinstance(c, Projected) for c in containers)
    assert containers[0]["ports"] == [{"containerPort": 80}]
    assert containers[1].get("ports") is None  # kept, but absent in this container
    for container in containers:
        with pytest.raises(ProjectionError, match=r"spec\.containers\.name"):
            container["name"]
        with pytest.raises(ProjectionError, match=r"spec\.containers\.env"):
            container.get("env")


async def test_the_metadata_projection_keeps_labels_but_not_managed_fields(
    channel: grpc.aio.Channel,
) -> None:
    for fields, metadata_only in ((["metadata"], False), ([], True), (["status.phase"], True)):
        obj = held(projected_mirror(channel, fields, metadata_only))
        assert b"managedFields" not in obj.raw
        metadata = obj.object["metadata"]
        assert metadata["labels"] == {"app": "web"}
        assert metadata.get("annotations") == {"note": "x"}
        assert "labels" in metadata
        assert metadata["resourceVersion"] == "7"
        with pytest.raises(ProjectionError, match=r"metadata\.managedFields"):
            metadata["managedFields"]
        with pytest.raises(ProjectionError, match=r"metadata\.managedFields"):
            metadata.get("managedFields")
        with pytest.raises(ProjectionError, match=r"metadata\.managedFields"):
            "managedFields" in metadata  # noqa: B015
        with pytest.raises(ProjectionError, match=r"^spec "):
            obj.object["spec"]
    # Named, the managed fields are read like the rest.
    obj = held(projected_mirror(channel, ["metadata", "metadata.managedFields"]))
    assert obj.object["metadata"]["managedFields"] == [{"manager": "kubectl"}]
    # Named in part, they are guarded like any other projected list.
    obj = held(projected_mirror(channel, ["metadata", "metadata.managedFields.manager"]))
    metadata = obj.object["metadata"]
    assert metadata["labels"] == {"app": "web"}
    (entry,) = metadata["managedFields"]
    assert entry["manager"] == "kubectl"
    with pytest.raises(ProjectionError, match=r"metadata\.managedFields\.operation"):
        entry.get("operation")


async def test_a_whole_object_is_a_plain_dict(channel: grpc.aio.Channel) -> None:
    mirror = projected_mirror(channel, ["spec.nodeName"])
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "resourceVersion": "9"}}
    mirror._apply([event(pb.EVENT_TYPE_ADDED, JOBS, job, orjson.dumps(job))])
    obj = mirror.get(JOBS, "ns", "j")
    assert obj is not None and obj.view is None
    assert type(obj.object) is dict
    assert obj.object.get("spec") is None
    with pytest.raises(KeyError):
        obj.object["spec"]


async def test_the_readable_tree_adds_the_resource_version_the_mirror_puts_back() -> None:
    listed = Projection.parse(["spec.nodeName"])
    assert listed is not None
    assert listed.tree["metadata"] == {"name": True, "namespace": True, "uid": True}
    assert readable_tree(listed)["metadata"] == {
        "name": True,
        "namespace": True,
        "uid": True,
        "resourceVersion": True,
    }
    # The projection itself is left alone.
    assert listed.tree["metadata"] == {"name": True, "namespace": True, "uid": True}
    whole = Projection.parse([], metadata_only=True)
    assert whole is not None
    assert whole.tree["metadata"] == Omit(frozenset({"managedFields", "resourceVersion"}))
    assert readable_tree(whole)["metadata"] == Omit(frozenset({"managedFields"}))
    # guard() alone, on a decoded projection.
    decoded = {"metadata": {"name": "p", "resourceVersion": "7"}, "spec": {"nodeName": "n"}}
    guarded = guard(decoded, readable_tree(listed), listed)
    assert guarded["metadata"]["resourceVersion"] == "7"
    with pytest.raises(ProjectionError, match=r"^status "):
        guarded["status"]


# A write that changes nothing the controller reads -----------------------------------------
CM_PATH = "/api/v1/namespaces/ns/configmaps/cm"


def configmap(rv: str, watched: str, other: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "cm",
            "namespace": "ns",
            "uid": "uid-cm",
            "resourceVersion": rv,
            "managedFields": [{"manager": f"m{rv}"}],
            **meta,
        },
        "data": {"watched": watched, "other": other},
    }


WATCHED = Projection.parse(["data.watched"])


def cm_event(kind: pb.EventType.ValueType, obj: dict[str, Any]) -> pb.Event:
    assert WATCHED is not None
    return event(kind, CONFIGMAPS, obj, WATCHED.encode(obj))


def cm_mirror(channel: grpc.aio.Channel, projected: bool = True) -> Mirror:
    subs = {CONFIGMAPS: subscription(fields=["data.watched"])} if projected else {}
    mirror = Mirror(channel, [CONFIGMAPS], subscriptions=subs)
    mirror._apply([cm_event(pb.EVENT_TYPE_ADDED, configmap("10", "a", "x"))])
    return mirror


def cm(mirror: Mirror) -> MirrorObject:
    obj = mirror.get(CONFIGMAPS, "ns", "cm")
    assert obj is not None
    return obj


async def test_a_write_of_unread_paths_counts_as_seen(channel: grpc.aio.Channel) -> None:
    mirror = cm_mirror(channel)
    old = cm(mirror)
    mirror.written("PATCH", CM_PATH, {"data": {"other": "y"}}, configmap("11", "a", "y"))
    assert not mirror.is_stale(old)
    with guard_reads(mirror):
        assert mirror.get(CONFIGMAPS, "ns", "cm") is old
        assert mirror.objects(CONFIGMAPS) == [old]
    woken: list[str] = []
    mirror.when_current(old, lambda: woken.append("now"))
    assert woken == ["now"]


async def test_a_write_of_a_read_path_waits_for_its_event(channel: grpc.aio.Channel) -> None:
    mirror = cm_mirror(channel)
    old = cm(mirror)
    written = configmap("11", "b", "x")
    mirror.written("PATCH", CM_PATH, {"data": {"watched": "b"}}, written)
    assert mirror.is_stale(old)
    with guard_reads(mirror), pytest.raises(StaleRead):
        mirror.get(CONFIGMAPS, "ns", "cm")
    woken: list[str] = []
    mirror.when_current(old, lambda: woken.append("now"))
    assert woken == []
    mirror._apply([cm_event(pb.EVENT_TYPE_MODIFIED, written)])
    assert woken == ["now"]
    with guard_reads(mirror):
        assert cm(mirror).object["data"]["watched"] == "b"


@pytest.mark.parametrize(
    "meta",
    [
        {"labels": {"app": "web"}},
        {"finalizers": ["example.com/hold"]},
        {"deletionTimestamp": "2026-01-01T00:00:00Z"},
        {"generation": 2},
        {
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": "uid-j",
                    "controller": True,
                }
            ]
        },
    ],
    ids=["labels", "finalizers", "deletion", "generation", "owners"],
)
async def test_a_write_of_the_parsed_metadata_is_not_unread(
    channel: grpc.aio.Channel, meta: dict[str, Any]
) -> None:
    """The informer sends a change of labels, owners, finalizers, deletion or generation
    even to a projection without them (the parsed metadata carries them)."""
    mirror = cm_mirror(channel)
    old = cm(mirror)
    mirror.written("PATCH", CM_PATH, {}, configmap("11", "a", "x", **meta))
    assert mirror.is_stale(old)


async def test_a_whole_object_waits_for_every_write(channel: grpc.aio.Channel) -> None:
    mirror = cm_mirror(channel, projected=False)
    old = cm(mirror)
    mirror.written("PATCH", CM_PATH, {"data": {"other": "y"}}, configmap("11", "a", "y"))
    assert mirror.is_stale(old)


class StaleForever(AssertionError):
    """The copy held stays stale though no event will come to make it current."""


async def test_a_write_of_unread_paths_after_an_unseen_one_is_seen_with_it(
    channel: grpc.aio.Channel,
) -> None:
    mirror = cm_mirror(channel)
    first = configmap("11", "b", "x")  # reads change: its event comes
    second = configmap("12", "b", "y")  # nothing read changes: the informer withholds it
    mirror.written("PATCH", CM_PATH, {"data": {"watched": "b"}}, first)
    mirror.written("PATCH", CM_PATH, {"data": {"other": "y"}}, second)
    assert mirror.is_stale(cm(mirror))
    mirror._apply([cm_event(pb.EVENT_TYPE_MODIFIED, first)])
    assert cm(mirror).resource_version == "11"
    # The copy held (version 11) is what the controller would see of version 12.
    if mirror.is_stale(cm(mirror)):
        raise StaleForever("cm@11 stays stale against the write of version 12")
    with guard_reads(mirror):
        assert cm(mirror).object["data"]["watched"] == "b"
