"""The framework's mechanisms without a cluster: label selectors, timestamps, expectations
(batches of writes, cancellation, expiry), API paths and the read-your-writes ledger's
version comparison, and the builder's refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

import steward
from steward.kube import ApiStatusError, NotFoundError
from steward.runtime.clock import FakeClock
from steward.runtime.expectations import Expectations
from steward.runtime.mirror import _Written, parse_path
from steward.v1 import informer_pb2 as pb

pytestmark = pytest.mark.unit

PODS = steward.PODS
JOBS = steward.JOBS


# Selectors ------------------------------------------------------------------------------
def test_selector_operators() -> None:
    labels = {"app": "web", "tier": "front"}
    match = steward.selector_matches
    assert match({"matchLabels": {"app": "web"}}, labels)
    assert not match({"matchLabels": {"app": "db"}}, labels)
    expr = {"key": "tier", "operator": "In", "values": ["front", "back"]}
    assert match({"matchExpressions": [expr]}, labels)
    assert not match({"matchExpressions": [{**expr, "operator": "NotIn"}]}, labels)
    assert match({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, labels)
    assert not match({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels)
    both = {"matchLabels": {"app": "web"}, "matchExpressions": [{**expr, "values": ["back"]}]}
    assert not match(both, labels)


def test_an_empty_selector_matches_nothing_unless_asked_to_match_all() -> None:
    empties: list[dict[str, list[str]] | None] = [
        None,
        {},
        {"matchLabels": [], "matchExpressions": []},
    ]
    for empty in empties:
        assert not steward.selector_matches(empty, {"app": "web"})
        assert steward.selector_matches(empty, {"app": "web"}, empty_matches_all=True)


def test_an_unknown_operator_matches_nothing() -> None:
    selector = {"matchExpressions": [{"key": "app", "operator": "Like", "values": ["web"]}]}
    assert not steward.selector_matches(selector, {"app": "web"})


def test_selector_text_parses_as_kubernetes_reads_it() -> None:
    parsed = steward.parse_selector("app==web, tier in (front,back),!canary,zone,env!=prod")
    labels = {"app": "web", "tier": "back", "zone": "a"}
    assert steward.selector_matches(parsed, labels)
    assert not steward.selector_matches(parsed, {**labels, "canary": "yes"})
    assert not steward.selector_matches(parsed, {**labels, "env": "prod"})
    assert not steward.selector_matches(parsed, {"app": "web", "tier": "back"})
    assert steward.parse_selector("") == {}
    assert steward.format_selector(parsed) == (
        "app in (web),!canary,env notin (prod),tier in (back,front),zone"
    )
    text = steward.format_selector(parsed)
    assert steward.format_selector(steward.parse_selector(text)) == text
    assert steward.format_selector({"matchLabels": {"b": "2", "a": "1"}}) == "a=1,b=2"


@pytest.mark.parametrize("text", ["a=(b", "a in ()", "=b", "a b", "a=b,", "a)"])
def test_malformed_selector_text_is_refused(text: str) -> None:
    with pytest.raises(steward.SelectorSyntaxError):
        steward.parse_selector(text)


# Times ------------------------------------------------------------------------------------
def test_times_round_trip_as_the_api_server_writes_them() -> None:
    when = datetime(2026, 12, 1, 20, 54, 25, tzinfo=UTC)
    assert steward.format_time(when) == "2026-12-01T20:54:25Z"
    assert steward.parse_time("2026-12-01T20:54:25Z") == when
    assert steward.parse_time("2026-12-01T20:54:25.123456Z") == when.replace(microsecond=123456)
    assert steward.parse_time("yesterday") is None
    assert steward.parse_time(None) is None


# Paths and the ledger ----------------------------------------------------------------------
def test_api_paths_and_their_parsing() -> None:
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    path = JOBS.path("ns", "pi", "status")
    assert path == "/apis/batch/v1/namespaces/ns/jobs/pi/status"
    assert steward.NODES.path(name="n1") == "/api/v1/nodes/n1"
    assert parse_path(path) == (JOBS, "ns", "pi")
    assert parse_path("/api/v1/namespaces/ns/pods") == (PODS, "ns", "")
    assert parse_path("/api/v1/namespaces/ns") == (steward.NAMESPACES, "", "ns")
    assert parse_path("/api/v1/nodes/n1?dryRun=All") == (steward.NODES, "", "n1")
    assert parse_path("/healthz") is None


def test_a_resource_is_one_value_on_the_wire_and_in_the_mirror() -> None:
    wire = JOBS.wire
    assert (wire.group, wire.version, wire.resource) == ("batch", "v1", "jobs")
    back = steward.Resource.from_wire(wire)
    # Equal (and hashed alike) by group, version and plural: the wire's finds the declared.
    assert back == JOBS and {JOBS: 1}[back] == 1 and back.kind == ""
    assert JOBS.api_version == "batch/v1" and PODS.api_version == "v1"
    assert steward.Resource("batch", "v2", "jobs") != JOBS
    assert not steward.NODES.namespaced and PODS.namespaced


def test_owner_of_checks_kind_and_group_of_the_controlling_reference() -> None:
    def pod(*refs: Mapping[str, object]) -> dict[str, object]:
        return {"metadata": {"namespace": "ns", "name": "p", "ownerReferences": list(refs)}}

    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "u1"}
    ref = steward.owner_of(pod({**job, "controller": True}), JOBS)
    assert ref == steward.ObjectRef(JOBS, "ns", "pi", "u1") and ref.key == ("ns", "pi")
    assert steward.owner_of(pod(job), JOBS) is None  # an owner, not the controller
    assert steward.owner_of(pod({**job, "controller": True}), steward.CRONJOBS) is None
    other_group = {**job, "apiVersion": "example.com/v1", "controller": True}
    assert steward.owner_of(pod(other_group), JOBS) is None
    older = {**job, "apiVersion": "batch/v1beta1", "controller": True}
    assert steward.owner_of(pod(older), JOBS) is not None  # any version of the group
    meta = pb.ObjectMeta(namespace="ns", name="p")
    meta.owner_references.append(
        pb.OwnerReference(api_version="batch/v1", kind="Job", name="pi", uid="u1", controller=True)
    )
    mirrored = steward.MirrorObject(PODS, meta, b"{}")
    assert steward.owner_of(mirrored, JOBS) == steward.ObjectRef(JOBS, "ns", "pi", "u1")
    assert steward.owner_of(mirrored, steward.REPLICASETS) is None


def test_the_ledger_compares_versions_as_integers_and_else_by_what_was_replaced() -> None:
    record = _Written("120")
    assert record.older("119")
    assert not record.older("120")
    assert not record.older("121")  # a later write by someone else: current, not stale
    opaque = _Written("b", replaced={"a"})
    assert opaque.older("a")
    assert not opaque.older("b")
    assert not opaque.older("c")


# Expectations -----------------------------------------------------------------------------
def test_expectations_count_creations_and_track_deletions_once() -> None:
    exp = Expectations(clock=FakeClock())
    key = ("ns", "owner")
    assert exp.satisfied(key)
    exp.expect_creations(key, 2)
    exp.expect_deletions(key, ["ns/a"])
    assert exp.pending(key) == (2, 1)
    exp.creation_observed(key)
    exp.deletion_observed(key, "ns/a")
    exp.deletion_observed(key, "ns/a")  # shown twice (deletion timestamp, then gone)
    assert exp.pending(key) == (1, 0)
    assert not exp.satisfied(key)
    exp.creation_observed(key)
    assert exp.satisfied(key)
    exp.forget(key)
    assert exp.pending(key) == (0, 0)


def test_expectations_expire_after_five_minutes() -> None:
    clock = FakeClock()
    exp = Expectations(clock=clock)
    assert exp.ttl == 300.0
    exp.expect_creations("k", 1)
    clock.advance(299.0)
    assert not exp.satisfied("k")
    clock.advance(2.0)
    assert exp.satisfied("k")


def test_more_observed_than_expected_does_not_eat_into_the_next_expectation() -> None:
    exp = Expectations(clock=FakeClock())
    exp.expect_creations("k", 1)
    exp.creation_observed("k")  # lowered at once (failed) ...
    exp.creation_observed("k")  # ... and seen after all
    exp.expect_creations("k", 1)
    assert exp.pending("k") == (1, 0)


def test_removals_are_tracked_by_uid_apart_from_satisfaction() -> None:
    exp = Expectations(clock=FakeClock())
    exp.expect_removals("k", {"u1", "u2"})
    assert exp.satisfied("k")
    assert exp.removals("k") == {"u1", "u2"}
    exp.removal_observed("k", "u1")
    assert exp.removals("k") == {"u2"}


def test_slow_start_batches_double() -> None:
    assert steward.slow_start_batches(10) == [1, 2, 4, 3]
    assert steward.slow_start_batches(0) == []
    assert steward.slow_start_batches(5, initial=2) == [2, 3]


@pytest.mark.asyncio
async def test_a_failed_batch_stops_the_rest_and_every_unwritten_creation_is_lowered() -> None:
    exp = Expectations(clock=FakeClock())
    attempted: list[int] = []

    async def create_one(i: int) -> None:
        attempted.append(i)
        if i == 2:
            raise ApiStatusError(403, "quota exceeded")

    outcome = await exp.create("k", 10, create_one)
    assert sorted(attempted) == [0, 1, 2]  # batches 1, 2: the second fails, no third
    assert outcome.succeeded == 2
    assert [e.status for e in outcome.errors if isinstance(e, ApiStatusError)] == [403]
    assert exp.pending("k") == (2, 0)  # only the two created stay expected


@pytest.mark.asyncio
async def test_creations_cut_off_by_cancellation_are_lowered() -> None:
    exp = Expectations(clock=FakeClock())
    started = asyncio.Event()

    async def create_one(i: int) -> None:
        if i == 0:
            return
        started.set()
        await asyncio.sleep(3600)

    task = asyncio.create_task(exp.create("k", 5, create_one))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert exp.pending("k") == (1, 0)  # the one that completed; the outcome of the rest is unknown


@pytest.mark.asyncio
async def test_deletions_count_a_gone_child_as_done_and_lower_failures() -> None:
    exp = Expectations(clock=FakeClock())
    names = ["ns/a", "ns/b", "ns/c"]

    async def delete_one(i: int) -> None:
        if i == 1:
            raise NotFoundError(404, "gone")
        if i == 2:
            raise ApiStatusError(500, "boom")

    outcome = await exp.delete("k", names, delete_one)
    assert outcome.succeeded == 2
    assert len(outcome.errors) == 1
    assert exp.pending("k") == (0, 1)  # only ns/a, whose event is still to come
    exp.deletion_observed("k", "ns/a")
    assert exp.satisfied("k")


@pytest.mark.asyncio
async def test_deletions_cut_off_by_cancellation_are_all_lowered() -> None:
    exp = Expectations(clock=FakeClock())

    async def delete_one(i: int) -> None:
        await asyncio.sleep(3600)

    task = asyncio.create_task(exp.delete("k", ["ns/a", "ns/b"], delete_one))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert exp.satisfied("k")


# The builder ------------------------------------------------------------------------------
def test_the_builder_refuses_incomplete_declarations() -> None:
    async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
        return steward.Result()

    with pytest.raises(ValueError, match="needs a primary type"):
        steward.ControllerBuilder("x").complete(reconcile)
    with pytest.raises(ValueError, match="already has a primary type"):
        steward.ControllerBuilder("x").for_(PODS).for_(PODS)
    with pytest.raises(ValueError, match="owns\\(\\) needs"):
        steward.ControllerBuilder("x").for_(steward.Resource("batch", "v1", "jobs")).owns(PODS)
    with pytest.raises(ValueError, match="adopts\\(\\) needs"):
        steward.ControllerBuilder("x").for_(steward.Resource("batch", "v1", "jobs")).adopts(PODS)


def test_a_definitions_own_flags_parse_with_their_defaults() -> None:
    async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
        return steward.Result()

    definition = (
        steward.ControllerBuilder("x")
        .for_(PODS)
        .flags(lambda p: p.add_argument("--colour", default="blue"))
        .beside_upstream(None, alone=["--colour=red"])
        .complete(reconcile)
    )
    assert definition.flag_parser().parse_args([]).colour == "blue"
    assert definition.flag_parser().parse_args(["--colour", "green"]).colour == "green"
    assert definition.beside_upstream is None
    assert definition.alone == ("--colour=red",)


# Pod facts --------------------------------------------------------------------------------
def test_pod_facts_as_upstream_defines_them() -> None:
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T20:00:00Z"}
    running = {"status": {"phase": "Running", "conditions": [ready]}, "metadata": {}}
    going = {
        "status": {"phase": "Running"},
        "metadata": {"deletionTimestamp": "2026-12-01T21:00:00Z"},
    }
    done = {"status": {"phase": "Succeeded"}, "metadata": {"deletionTimestamp": "x"}}
    assert steward.pods.is_active(running) and steward.pods.is_ready(running)
    assert steward.pods.ready_condition(running) == ready
    assert not steward.pods.is_active(going) and steward.pods.is_terminating(going)
    assert steward.pods.is_terminal(done) and not steward.pods.is_terminating(done)
    assert steward.pods.ready_condition({}) == {} and not steward.pods.is_ready({})
    assert steward.pods.phase({}) == "" and steward.pods.is_active({})
