"""From mirror changes to keys: own key, controlling owner, mapped keys, predicates."""

from __future__ import annotations

import grpc
import orjson
import pytest

from steward.runtime import resources
from steward.runtime.children import expectation_observer
from steward.runtime.expectations import Expectations
from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorObject
from steward.runtime.reconcile import Request
from steward.runtime.source import (
    EnqueueAdopters,
    EnqueueChanged,
    EnqueueMapped,
    EnqueueObject,
    EnqueueOwner,
    generation_changed,
    labels_changed,
)
from steward.runtime.workqueue import TraceContext
from steward.v1 import informer_pb2 as pb

pytestmark = pytest.mark.unit

PODS = resources.PODS
TRACE = TraceContext(f"00-{'1' * 32}-{'2' * 16}-01")


def pod(
    name: str,
    *,
    owner: tuple[str, str, str] | None = None,
    controller: bool = True,
    generation: int = 1,
    labels: dict[str, str] | None = None,
) -> MirrorObject:
    meta = pb.ObjectMeta(namespace="ns", name=name, generation=generation, labels=labels or {})
    if owner is not None:
        api_version, kind, owner_name = owner
        meta.owner_references.append(
            pb.OwnerReference(
                api_version=api_version,
                kind=kind,
                name=owner_name,
                uid=f"uid-{owner_name}",
                controller=controller,
            )
        )
    return MirrorObject(PODS, meta, b"{}")


def keys(source: object, change: Change) -> list[tuple[Request, TraceContext | None]]:
    seen: list[tuple[Request, TraceContext | None]] = []
    source.handle(change, lambda key, ctx: seen.append((key, ctx)))  # type: ignore[attr-defined]
    return seen


def test_enqueue_object_passes_the_trace_context_along() -> None:
    change = Change(ChangeKind.ADDED, pod("a"), None, TRACE)
    assert keys(EnqueueObject(), change) == [(Request("ns", "a"), TRACE)]


def test_enqueue_owner_only_for_the_controlling_owner_of_the_right_kind() -> None:
    owner = EnqueueOwner(resources.JOBS)
    job_pod = pod("p", owner=("batch/v1", "Job", "j"))
    assert keys(owner, Change(ChangeKind.ADDED, job_pod, None, None)) == [
        (Request("ns", "j"), None)
    ]
    other_group = pod("p", owner=("apps/v1", "Job", "j"))
    not_controller = pod("p", owner=("batch/v1", "Job", "j"), controller=False)
    other_kind = pod("p", owner=("batch/v1", "CronJob", "c"))
    for obj in (other_group, not_controller, other_kind, pod("orphan")):
        assert keys(owner, Change(ChangeKind.ADDED, obj, None, None)) == []


def test_enqueue_owner_tells_the_old_owner_when_the_controller_changes() -> None:
    owner = EnqueueOwner(resources.JOBS)
    before = pod("p", owner=("batch/v1", "Job", "old"))
    after = pod("p", owner=("batch/v1", "Job", "new"))
    got = [k for k, _ in keys(owner, Change(ChangeKind.MODIFIED, after, before, None))]
    assert got == [Request("ns", "new"), Request("ns", "old")]
    released = pod("p")
    got = [k for k, _ in keys(owner, Change(ChangeKind.MODIFIED, released, before, None))]
    assert got == [Request("ns", "old")]


def test_mapped_keys_of_old_and_new_state_and_a_failing_mapper() -> None:
    def by_label(obj: MirrorObject) -> list[Request]:
        return [Request("ns", obj.meta.labels["app"])] if "app" in obj.meta.labels else []

    mapped = EnqueueMapped(by_label)
    change = Change(
        ChangeKind.MODIFIED, pod("p", labels={"app": "b"}), pod("p", labels={"app": "a"}), None
    )
    assert [k for k, _ in keys(mapped, change)] == [Request("ns", "b"), Request("ns", "a")]

    def broken(obj: MirrorObject) -> list[Request]:
        raise RuntimeError("mapper bug")

    assert keys(EnqueueMapped(broken), change) == []


def test_changed_keys_see_old_and_new_together_and_a_failing_mapper() -> None:
    def moved(change: Change) -> list[Request]:
        old = change.old.meta.labels.get("app") if change.old is not None else None
        new = change.obj.meta.labels.get("app")
        return [] if old == new else [Request("ns", f"{old}->{new}")]

    source = EnqueueChanged(moved)
    change = Change(
        ChangeKind.MODIFIED, pod("p", labels={"app": "b"}), pod("p", labels={"app": "a"}), TRACE
    )
    assert keys(source, change) == [(Request("ns", "a->b"), TRACE)]
    same = Change(
        ChangeKind.MODIFIED, pod("p", labels={"app": "a"}), pod("p", labels={"app": "a"}), None
    )
    assert keys(source, same) == []

    def broken(change: Change) -> list[Request]:
        raise RuntimeError("mapper bug")

    assert keys(EnqueueChanged(broken), change) == []


def test_predicates_filter_updates_only() -> None:
    status_only = Change(ChangeKind.MODIFIED, pod("p", generation=1), pod("p", generation=1), None)
    spec_change = Change(ChangeKind.MODIFIED, pod("p", generation=2), pod("p", generation=1), None)
    created = Change(ChangeKind.ADDED, pod("p"), None, None)
    assert keys(EnqueueObject([generation_changed]), status_only) == []
    assert len(keys(EnqueueObject([generation_changed]), spec_change)) == 1
    assert len(keys(EnqueueObject([generation_changed]), created)) == 1
    relabelled = Change(
        ChangeKind.MODIFIED, pod("p", labels={"a": "2"}), pod("p", labels={"a": "1"}), None
    )
    assert len(keys(EnqueueObject([labels_changed]), relabelled)) == 1
    assert keys(EnqueueObject([labels_changed]), status_only) == []


def test_indexes_by_controller_and_of_orphans() -> None:
    from steward.runtime.ownership import index_by_controller, orphan_index

    owned = pod("a", owner=("apps/v1", "ReplicaSet", "rs"))
    merely_owned = pod("b", owner=("apps/v1", "ReplicaSet", "rs"), controller=False)
    orphan = pod("c")
    assert list(index_by_controller(owned)) == ["uid-rs"]
    assert list(index_by_controller(merely_owned)) == []
    pods_only = orphan_index(PODS)
    assert list(pods_only(orphan)) == ["ns"]
    assert list(pods_only(merely_owned)) == ["ns"]  # no controlling owner: adoptable
    assert list(pods_only(owned)) == []
    others = orphan_index(resources.REPLICASETS)
    assert list(others(orphan)) == []


def _mirror_of(channel: grpc.aio.Channel, *objects: MirrorObject) -> Mirror:
    """A mirror of pods and ReplicaSets holding ``objects`` (its channel never dialled)."""
    mirror = Mirror(channel, [PODS, resources.REPLICASETS])
    events = []
    for obj in objects:
        event = pb.Event(type=pb.EVENT_TYPE_ADDED, resource_type=obj.type.wire)
        event.metadata.CopyFrom(obj.meta.to_message())
        event.object = obj.raw
        events.append(event)
    mirror._apply(events)
    return mirror


def replicaset(name: str, selector: dict[str, object] | None, ns: str = "ns") -> MirrorObject:
    meta = pb.ObjectMeta(namespace=ns, name=name, uid=f"uid-{name}")
    spec = {"selector": selector} if selector is not None else {}
    return MirrorObject(resources.REPLICASETS, meta, orjson.dumps({"spec": spec}))


@pytest.mark.asyncio
async def test_enqueue_adopters_queues_owners_whose_selector_matches_an_orphan() -> None:
    web = replicaset("web", {"matchLabels": {"app": "web"}})
    other = replicaset("db", {"matchLabels": {"app": "db"}})
    elsewhere = replicaset("web2", {"matchLabels": {"app": "web"}}, ns="other")
    empty = replicaset("empty", {})
    async with grpc.aio.insecure_channel("127.0.0.1:9") as channel:
        mirror = _mirror_of(channel, web, other, elsewhere, empty)
    adopters = EnqueueAdopters(mirror, resources.REPLICASETS)
    orphan = pod("p", labels={"app": "web"})
    assert keys(adopters, Change(ChangeKind.ADDED, orphan, None, TRACE)) == [
        (Request("ns", "web"), TRACE)
    ]
    # Controlled pods, and orphans without labels, queue no adopter (upstream's rule).
    owned = pod("p", owner=("apps/v1", "ReplicaSet", "db"), labels={"app": "web"})
    assert keys(adopters, Change(ChangeKind.ADDED, owned, None, None)) == []
    assert keys(adopters, Change(ChangeKind.ADDED, pod("bare"), None, None)) == []
    # A relabelled orphan: the owners of the old labels hear of it too.
    moved = pod("p", labels={"app": "db"})
    got = [k for k, _ in keys(adopters, Change(ChangeKind.MODIFIED, moved, orphan, None))]
    assert got == [Request("ns", "db"), Request("ns", "web")]


@pytest.mark.asyncio
async def test_the_expectation_observer_lowers_only_for_the_resolved_owner() -> None:
    rs = replicaset("web", {"matchLabels": {"app": "web"}})
    async with grpc.aio.insecure_channel("127.0.0.1:9") as channel:
        mirror = _mirror_of(channel, rs)
    expectations = Expectations()
    key = ("ns", "web")
    expectations.expect_creations(key, 2)
    expectations.expect_deletions(key, ["ns/old"])
    observe = expectation_observer(mirror, resources.REPLICASETS, PODS, expectations)

    def owned(name: str, uid: str = "uid-web", deleting: bool = False) -> MirrorObject:
        meta = pod(name, owner=("apps/v1", "ReplicaSet", "web")).meta.to_message()
        meta.owner_references[0].uid = uid
        if deleting:
            meta.deletion_timestamp.GetCurrentTime()
        return MirrorObject(PODS, meta, b"{}")

    observe(Change(ChangeKind.ADDED, owned("a", uid="uid-of-a-predecessor"), None, None))
    observe(Change(ChangeKind.ADDED, pod("b", owner=("batch/v1", "Job", "web")), None, None))
    assert expectations.pending(key) == (2, 1)  # neither names this owner
    observe(Change(ChangeKind.ADDED, owned("a"), None, None))
    observe(Change(ChangeKind.MODIFIED, owned("old", deleting=True), owned("old"), None))
    assert expectations.pending(key) == (1, 0)
    observe(Change(ChangeKind.ADDED, owned("c"), None, None))
    assert expectations.satisfied(key)
    expectations.expect_creations(key, 1)
    observe(Change(ChangeKind.DELETED, rs, None, None))  # the owner gone: forgotten
    assert expectations.satisfied(key)
