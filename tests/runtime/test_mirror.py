"""The mirror's bookkeeping: snapshot, sync, changes, REPLACED → deletions, indexes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import orjson
import pytest
import pytest_asyncio

from steward.runtime.mirror import Change, ChangeKind, Mirror
from steward.runtime.resources import JOBS, PODS, Resource
from steward.v1 import informer_pb2 as pb

pytestmark = [pytest.mark.unit, pytest.mark.asyncio]


def ev(
    kind: pb.EventType.ValueType,
    rtype: Resource,
    name: str = "",
    rv: str = "",
    *,
    obj_rv: str = "",
    owner: str = "",
    node: str = "",
    ns: str = "default",
) -> pb.Event:
    event = pb.Event(type=kind, resource_type=rtype.wire, resource_version=rv)
    if name:
        meta = pb.ObjectMeta(
            namespace=ns, name=name, uid=f"uid-{name}", resource_version=obj_rv or rv
        )
        if owner:
            meta.owner_references.append(
                pb.OwnerReference(kind="Job", name=owner, uid=f"uid-{owner}", controller=True)
            )
        event.metadata.CopyFrom(meta)
        event.object = orjson.dumps({"metadata": {"name": name}, "spec": {"nodeName": node}})
        event.trace_context.traceparent = f"00-{'a' * 32}-{'b' * 16}-01"
    return event


@pytest_asyncio.fixture
async def mirror() -> AsyncIterator[Mirror]:
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled by these tests
    m = Mirror(channel, [PODS, JOBS], indexers={"node": lambda o: [o.object["spec"]["nodeName"]]})
    yield m
    await channel.close()


def record(m: Mirror) -> list[Change]:
    seen: list[Change] = []
    m.add_handler(seen.append)
    return seen


async def test_snapshot_then_synced_per_all_types(mirror: Mirror) -> None:
    seen = record(mirror)
    mirror._apply(
        [
            ev(pb.EVENT_TYPE_ADDED, PODS, "a", obj_rv="5"),
            ev(pb.EVENT_TYPE_INITIAL_EVENTS_END, PODS, rv="7"),
        ]
    )
    assert not mirror.has_synced()  # jobs have not synced yet
    mirror._apply([ev(pb.EVENT_TYPE_INITIAL_EVENTS_END, JOBS, rv="7")])
    assert mirror.has_synced()
    assert [(c.kind, c.obj.name) for c in seen] == [(ChangeKind.ADDED, "a")]
    assert seen[0].trace is not None
    assert mirror.resource_version(PODS) == "7"


async def test_changes_update_state_and_indexes(mirror: Mirror) -> None:
    seen = record(mirror)
    mirror._apply(
        [
            ev(pb.EVENT_TYPE_ADDED, PODS, "a", "10", owner="j1", node="n1"),
            ev(pb.EVENT_TYPE_ADDED, PODS, "b", "11", owner="j1", node="n1", ns="other"),
            ev(pb.EVENT_TYPE_MODIFIED, PODS, "a", "12", owner="j1", node="n2"),
        ]
    )
    assert [o.name for o in mirror.by_index(PODS, "node", "n1")] == ["b"]
    assert [o.name for o in mirror.by_index(PODS, "node", "n2")] == ["a"]
    assert sorted(o.name for o in mirror.by_index(PODS, "owner", "uid-j1")) == ["a", "b"]
    assert [o.name for o in mirror.objects(PODS, "other")] == ["b"]
    modified = seen[-1]
    assert modified.kind is ChangeKind.MODIFIED
    assert modified.old is not None
    assert modified.old.resource_version == "10"
    mirror._apply([ev(pb.EVENT_TYPE_DELETED, PODS, "a", "13", owner="j1", node="n2")])
    assert mirror.get(PODS, "default", "a") is None
    assert mirror.by_index(PODS, "node", "n2") == []
    assert seen[-1].kind is ChangeKind.DELETED
    assert mirror.resource_version(PODS) == "13"
    with pytest.raises(KeyError, match="no index 'zone'"):
        mirror.by_index(PODS, "zone", "x")


async def test_replaced_snapshot_implies_deletions_and_modifications(mirror: Mirror) -> None:
    mirror._apply(
        [
            ev(pb.EVENT_TYPE_ADDED, PODS, "keep", "1"),
            ev(pb.EVENT_TYPE_ADDED, PODS, "change", "2"),
            ev(pb.EVENT_TYPE_ADDED, PODS, "gone", "3"),
            ev(pb.EVENT_TYPE_INITIAL_EVENTS_END, PODS, rv="3"),
        ]
    )
    seen = record(mirror)
    seen.clear()  # drop the replay of what is held
    mirror._apply(
        [
            ev(pb.EVENT_TYPE_REPLACED, PODS),
            # Snapshot events carry no resume point of their own.
            ev(pb.EVENT_TYPE_ADDED, PODS, "keep", obj_rv="1"),
            ev(pb.EVENT_TYPE_ADDED, PODS, "change", obj_rv="9"),
            ev(pb.EVENT_TYPE_ADDED, PODS, "new", obj_rv="8"),
        ]
    )
    assert mirror.resource_version(PODS) == "3"
    assert mirror.get(PODS, "default", "gone") is not None  # not before the snapshot ends
    mirror._apply([ev(pb.EVENT_TYPE_INITIAL_EVENTS_END, PODS, rv="10")])
    assert sorted((c.kind.value, c.obj.name) for c in seen) == [
        ("added", "new"),
        ("deleted", "gone"),
        ("modified", "change"),
    ]
    assert sorted(o.name for o in mirror.objects(PODS)) == ["change", "keep", "new"]
    assert mirror.resource_version(PODS) == "10"


async def test_a_failing_handler_does_not_stop_the_others(mirror: Mirror) -> None:
    def broken(change: Change) -> None:
        raise RuntimeError("handler bug")

    mirror.add_handler(broken)
    seen = record(mirror)
    mirror._apply([ev(pb.EVENT_TYPE_ADDED, PODS, "a", "1")])
    assert [c.obj.name for c in seen] == ["a"]
    assert mirror.get(PODS, "default", "a") is not None


async def test_a_late_handler_is_replayed_what_is_held(mirror: Mirror) -> None:
    mirror._apply([ev(pb.EVENT_TYPE_ADDED, JOBS, "j", "1")])
    seen = record(mirror)
    assert [(c.kind, c.obj.name) for c in seen] == [(ChangeKind.ADDED, "j")]


async def test_an_object_nested_beyond_orjson_still_decodes() -> None:
    """Custom resources may nest far deeper than orjson decodes (1,024 levels)."""
    from steward.runtime.mirror import MirrorObject

    depth = 5000
    raw = (
        b'{"metadata":{"name":"deep","namespace":"ns"},"spec":'
        + b'{"a":' * depth
        + b"1"
        + b"}" * depth
        + b"}"
    )
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    meta = pb.ObjectMeta(namespace="ns", name="deep")
    obj = MirrorObject(Resource("example.com", "v1", "widgets"), meta, raw)
    spec = obj.object["spec"]
    for _ in range(depth - 1):
        spec = spec["a"]
    assert spec == {"a": 1}
    assert obj.object["metadata"]["name"] == "deep"
