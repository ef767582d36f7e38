"""The TTL controller's decisions (no cluster): upstream's boundaries with their
hysteresis, the annotation read as Go's ``strconv.Atoi`` reads it, the patch, and the
declaration."""

from __future__ import annotations

import pytest

from steward import NODES, Change, ChangeKind, MirrorObject, Request
from steward.controllers.ttl.controller import CONTROLLER, TTLReconciler
from steward.controllers.ttl.sizing import (
    ANNOTATION,
    BOUNDARIES,
    Sizing,
    annotation_patch,
    current_ttl,
)
from steward.v1 import informer_pb2

pytestmark = pytest.mark.unit


def grown(to: int) -> Sizing:
    sizing = Sizing()
    for _ in range(to):
        sizing.added()
    return sizing


def shrink(sizing: Sizing, to: int) -> Sizing:
    while sizing.count > to:
        sizing.deleted()
    return sizing


def test_the_table_is_upstreams() -> None:
    assert [(b.size_min, b.size_max, b.ttl_seconds) for b in BOUNDARIES] == [
        (0, 100, 0),
        (90, 500, 15),
        (450, 1000, 30),
        (900, 2000, 60),
        (1800, 2**31 - 1, 300),
    ]


@pytest.mark.parametrize(
    ("size", "ttl"),
    [(0, 0), (1, 0), (100, 0), (101, 15), (500, 15), (501, 30), (1000, 30), (1001, 60),
     (2000, 60), (2001, 300), (2500, 300)],
)  # fmt: skip
def test_growing_steps_up_past_each_size_max(size: int, ttl: int) -> None:
    assert grown(size).ttl_seconds == ttl


@pytest.mark.parametrize(
    ("size", "ttl"),
    [(1800, 300), (1799, 60), (900, 60), (899, 30), (450, 30), (449, 15), (90, 15),
     (89, 0), (0, 0)],
)  # fmt: skip
def test_shrinking_steps_down_below_each_size_min(size: int, ttl: int) -> None:
    assert shrink(grown(2001), size).ttl_seconds == ttl


def test_hysteresis_around_the_first_boundary() -> None:
    # Upstream's TestDesiredTTL: 101 nodes ask 15 s, which stays down to 90 and up again;
    # under 90 it is 0, which stays up to 100.
    sizing = grown(101)
    assert sizing.ttl_seconds == 15
    shrink(sizing, 91)
    sizing.added()
    assert (sizing.count, sizing.ttl_seconds) == (92, 15)
    shrink(sizing, 90)
    assert sizing.ttl_seconds == 15
    assert sizing.deleted() is True
    assert (sizing.count, sizing.ttl_seconds) == (89, 0)
    for _ in range(11):
        assert sizing.added() is False
    assert (sizing.count, sizing.ttl_seconds) == (100, 0)
    assert sizing.added() is True
    assert sizing.ttl_seconds == 15


def test_only_a_step_change_says_changed() -> None:
    sizing = Sizing()
    changes = [sizing.added() for _ in range(600)]
    assert [i + 1 for i, c in enumerate(changes) if c] == [101, 501]


def node(annotations: dict[str, str] | None) -> dict[str, object]:
    meta: dict[str, object] = {"name": "n1"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("value", "read"),
    [("15", 15), ("0", 0), ("+5", 5), ("-3", -3), ("abc", None), (" 15", None),
     ("1_5", None), ("15s", None), ("", None), ("\u0661\u0665", None)],
)  # fmt: skip
def test_the_annotation_is_read_as_go_atoi(value: str, read: int | None) -> None:
    assert current_ttl(node({ANNOTATION: value})) == read


def test_no_annotation_reads_as_none() -> None:
    assert current_ttl(node(None)) is None
    assert current_ttl(node({"other": "1"})) is None


def test_the_patch_sets_the_annotation_alone() -> None:
    assert annotation_patch(15) == {"metadata": {"annotations": {ANNOTATION: "15"}}}


def test_the_declaration() -> None:
    # KCM's alias and queue name, its five workers, never beside upstream's, node
    # metadata only.
    assert CONTROLLER.name == "ttl"
    assert CONTROLLER.options.queue_name == "ttlcontroller"
    assert CONTROLLER.options.max_concurrent_reconciles == 5
    assert CONTROLLER.beside_upstream is None
    subs = {r.plural: s for r, s in CONTROLLER.subscriptions().items()}
    assert list(subs) == ["nodes"]
    assert subs["nodes"].metadata_only and subs["nodes"].fields == ()
    assert CONTROLLER.observers, "the node count is kept by an observer"


class StubMirror:
    def __init__(self) -> None:
        self.nodes: list[MirrorObject] = []

    def objects(self, rtype: object) -> list[MirrorObject]:
        return list(self.nodes)


class StubContext:
    """What TTLReconciler takes of its context: the mirror, a client, enqueue."""

    def __init__(self) -> None:
        self.mirror = StubMirror()
        self.queued: list[Request] = []

    def client(self, rtype: object) -> None:
        return None

    def enqueue(self, key: Request, after: float = 0.0) -> None:
        self.queued.append(key)


def change(kind: ChangeKind, name: str) -> Change:
    obj = MirrorObject(NODES, informer_pb2.ObjectMeta(name=name), b"{}")
    return Change(kind, obj, None, None)


def test_the_observer_counts_each_node_once_and_queues_all_on_a_step() -> None:
    ctx = StubContext()
    reconciler = TTLReconciler(ctx)  # type: ignore[arg-type]
    for i in range(100):
        obj = change(ChangeKind.ADDED, f"n{i}")
        ctx.mirror.nodes.append(obj.obj)
        reconciler.observe(obj)
    # An update, an ADDED again, a deletion of a node never counted: no count.
    reconciler.observe(change(ChangeKind.MODIFIED, "n1"))
    reconciler.observe(change(ChangeKind.ADDED, "n1"))
    reconciler.observe(change(ChangeKind.DELETED, "stranger"))
    assert (reconciler.sizing.count, reconciler.sizing.ttl_seconds, ctx.queued) == (100, 0, [])
    reconciler.observe(change(ChangeKind.ADDED, "n100"))
    assert reconciler.sizing.ttl_seconds == 15
    assert sorted(ctx.queued) == sorted(Request("", f"n{i}") for i in range(100))
    for i in range(11):
        reconciler.observe(change(ChangeKind.DELETED, f"n{i}"))
    assert (reconciler.sizing.count, reconciler.sizing.ttl_seconds) == (90, 15)
    reconciler.observe(change(ChangeKind.DELETED, "n11"))
    assert (reconciler.sizing.count, reconciler.sizing.ttl_seconds) == (89, 0)
