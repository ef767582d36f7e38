"""The DaemonSet controller's decisions, case by case as upstream's unit tests state them:
node fitness (selector, affinity, taints and the daemon tolerations), the pods of the core
loop and of the rolling update (with and without surge), the pods it creates, the status
counts, and the revision history (hash, data, duplicates, clean-up)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.daemonset import history as hist
from steward.controllers.daemonset import nodes as nd
from steward.controllers.daemonset import sync
from steward.runtime.hashing import pod_template_hash

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
OLD = "old-hash"
NEW = "new-hash"


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    name: str,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or []},
    }


def daemonset(**spec: Any) -> dict[str, Any]:
    template_spec = spec.pop("template_spec", {})
    return {
        "metadata": {
            "name": "ds",
            "namespace": "ns",
            "uid": "ds-uid",
            "generation": 2,
            "annotations": {hist.GENERATION_ANNOTATION: "2"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "pause"}], **template_spec},
            },
            **spec,
        },
    }


def pod(
    name: str,
    on: str,
    digest: str = NEW,
    *,
    ready_for: float | None = 100.0,
    phase: str = "Running",
    age: float = 100.0,
    deleting: bool = False,
    bound: bool = True,
) -> dict[str, Any]:
    conditions = []
    if ready_for is not None:
        conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ts(ready_for)}]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "creationTimestamp": ts(age),
        "labels": {"app": "d", hist.HASH_LABEL: digest},
    }
    if deleting:
        meta["deletionTimestamp"] = ts(0)
    spec: dict[str, Any] = {"affinity": nd.pin_to_node(None, on)}
    if bound:
        spec["nodeName"] = on
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": conditions}}


# Nodes ----------------------------------------------------------------------------------
def test_node_selector_and_required_affinity_decide_fitness() -> None:
    ds = daemonset(template_spec={"nodeSelector": {"disk": "ssd"}})
    assert nd.should_run(ds, node("a", {"disk": "ssd"})) == (True, True)
    assert nd.should_run(ds, node("b", {"disk": "hdd"})) == (False, False)
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]},
                ]
            }
        }
    }
    ds = daemonset(template_spec={"affinity": affinity})
    assert nd.should_run(ds, node("a", {"zone": "z1"}))[0]
    assert nd.should_run(ds, node("c"))[0]
    assert not nd.should_run(ds, node("b", {"zone": "z2"}))[0]


def test_malformed_or_empty_terms_match_no_node() -> None:
    bad_terms: list[dict[str, Any]] = [
        {},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["x"]}]},
        {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]},
    ]
    for term in bad_terms:
        spec = {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            }
        }
        assert not nd.should_run(daemonset(template_spec=spec), node("a", {"zone": ""}))[0], term


def test_numeric_operators_compare_integers() -> None:
    term = {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }
    ds = daemonset(template_spec=spec)
    assert nd.should_run(ds, node("a", {"cores": "8"}))[0]
    assert not nd.should_run(ds, node("b", {"cores": "4"}))[0]
    assert not nd.should_run(ds, node("c", {"cores": "many"}))[0]
    assert not nd.should_run(ds, node("d"))[0]


def test_template_node_name_limits_to_that_node() -> None:
    ds = daemonset(template_spec={"nodeName": "a"})
    assert nd.should_run(ds, node("a")) == (True, True)
    assert nd.should_run(ds, node("b")) == (False, False)


def test_taints_no_schedule_keeps_new_pods_off_no_execute_evicts() -> None:
    ds = daemonset()
    no_schedule = node("a", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    no_execute = node("b", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])
    prefer = node("c", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}])
    assert nd.should_run(ds, no_schedule) == (False, True)
    assert nd.should_run(ds, no_execute) == (False, False)
    assert nd.should_run(ds, prefer) == (True, True)
    tolerant = daemonset(
        template_spec={"tolerations": [{"key": "k", "operator": "Equal", "value": "v"}]}
    )
    assert nd.should_run(tolerant, no_execute) == (True, True)
    wrong_value = daemonset(template_spec={"tolerations": [{"key": "k", "value": "w"}]})
    assert nd.should_run(wrong_value, no_schedule) == (False, True)


def test_daemon_tolerations_cover_node_conditions() -> None:
    for key, effect in [
        (nd.NOT_READY, "NoExecute"),
        (nd.UNREACHABLE, "NoExecute"),
        (nd.DISK_PRESSURE, "NoSchedule"),
        (nd.MEMORY_PRESSURE, "NoSchedule"),
        (nd.PID_PRESSURE, "NoSchedule"),
        (nd.UNSCHEDULABLE, "NoSchedule"),
    ]:
        tainted = node("a", taints=[{"key": key, "effect": effect}])
        assert nd.should_run(daemonset(), tainted) == (True, True), key
    network = node("a", taints=[{"key": nd.NETWORK_UNAVAILABLE, "effect": "NoSchedule"}])
    assert nd.should_run(daemonset(), network) == (False, True)
    assert nd.should_run(daemonset(template_spec={"hostNetwork": True}), network)[0]


def test_daemon_tolerations_replace_equal_ones_and_append_the_rest() -> None:
    own = {"key": nd.NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    other = {"key": "x", "operator": "Exists"}
    got = nd.with_daemon_tolerations({"tolerations": [other, own]})
    assert got[0] == other
    assert got[1] == {"key": nd.NOT_READY, "operator": "Exists", "effect": "NoExecute"}
    assert [t["key"] for t in got[2:]] == [
        nd.UNREACHABLE,
        nd.DISK_PRESSURE,
        nd.MEMORY_PRESSURE,
        nd.PID_PRESSURE,
        nd.UNSCHEDULABLE,
    ]


def test_pinned_affinity_replaces_required_terms_and_names_the_target() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
        },
        "podAntiAffinity": {"x": 1},
    }
    pinned = nd.pin_to_node(affinity, "n1")
    assert pinned["podAntiAffinity"] == {"x": 1}
    assert pinned["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 1}
    ]
    terms = pinned["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    ]
    assert nd.target_node({"spec": {"affinity": pinned}}) == "n1"
    assert nd.target_node({"spec": {"nodeName": "n2", "affinity": pinned}}) == "n2"
    assert nd.target_node({"spec": {}}) is None


def test_heartbeats_alone_do_not_matter() -> None:
    old = node("a")
    old["status"] = {
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": ts(10)}]
    }
    old["metadata"]["resourceVersion"] = "1"
    new = {**old, "metadata": {**old["metadata"], "resourceVersion": "2"}}
    new["status"] = {
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": ts(0)}]
    }
    assert not nd.node_change_matters(old, new)
    not_ready = {**new, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert nd.node_change_matters(old, not_ready)
    relabelled = {**new, "metadata": {**new["metadata"], "labels": {"x": "y"}}}
    assert nd.node_change_matters(old, relabelled)


# The core loop --------------------------------------------------------------------------
def test_manage_creates_where_missing_and_prunes_extra_pods_oldest_kept() -> None:
    ds = daemonset()
    nodes = [node("a"), node("b"), node("c")]
    by_node = sync.pods_by_node(
        [pod("b-young", "b", age=10), pod("b-old", "b", age=50), pod("c1", "c")]
    )
    plan = sync.manage(ds, nodes, by_node, NEW, NOW)
    assert plan.create_on == ["a"]
    assert [sync.pod_name(p) for p in plan.delete] == ["b-young"]


def test_a_pod_being_deleted_holds_its_node_until_gone() -> None:
    plan = sync.manage(
        daemonset(), [node("a")], sync.pods_by_node([pod("a1", "a", deleting=True)]), NEW, NOW
    )
    assert plan.create_on == [] and plan.delete == []


def test_finished_pods_are_deleted_and_failed_ones_reported() -> None:
    by_node = sync.pods_by_node([pod("a1", "a", phase="Failed"), pod("b1", "b", phase="Succeeded")])
    plan = sync.manage(daemonset(), [node("a"), node("b")], by_node, NEW, NOW)
    assert [(n, sync.pod_name(p)) for n, p in plan.failed] == [("a", "a1")]
    assert [(n, sync.pod_name(p)) for n, p in plan.succeeded] == [("b", "b1")]
    assert plan.create_on == []


def test_finished_pods_being_deleted_are_not_counted() -> None:
    by_node = sync.pods_by_node([pod("a1", "a", phase="Failed", deleting=True)])
    assert by_node == {}
    full = sync.pods_by_node(
        [pod("a1", "a", phase="Failed", deleting=True)], include_deleted_terminal=True
    )
    assert list(full) == ["a"]


def test_pods_leave_nodes_they_may_not_stay_on_and_unbound_pods_of_gone_nodes() -> None:
    ds = daemonset(template_spec={"nodeSelector": {"run": "yes"}})
    by_node = sync.pods_by_node(
        [pod("a1", "a"), pod("gone1", "gone", bound=False), pod("gone2", "gone2", bound=True)]
    )
    plan = sync.manage(ds, [node("a")], by_node, NEW, NOW)
    assert sorted(sync.pod_name(p) for p in plan.delete) == ["a1", "gone1"]


def test_surge_keeps_old_pod_until_new_one_is_available() -> None:
    ds = daemonset(
        updateStrategy={
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        minReadySeconds=30,
    )
    waiting = sync.pods_by_node(
        [pod("old", "a", OLD, age=100), pod("new", "a", NEW, ready_for=10, age=20)]
    )
    assert sync.manage(ds, [node("a")], waiting, NEW, NOW).delete == []
    ready = sync.pods_by_node(
        [pod("old", "a", OLD, age=100), pod("new", "a", NEW, ready_for=40, age=50)]
    )
    assert [sync.pod_name(p) for p in sync.manage(ds, [node("a")], ready, NEW, NOW).delete] == [
        "old"
    ]
    old_unready = sync.pods_by_node(
        [
            pod("old", "a", OLD, ready_for=None, age=100),
            pod("new", "a", NEW, ready_for=None, age=20),
        ]
    )
    assert [
        sync.pod_name(p) for p in sync.manage(ds, [node("a")], old_unready, NEW, NOW).delete
    ] == ["old"]


# Rolling update -------------------------------------------------------------------------
def rolling(**ru: Any) -> dict[str, Any]:
    return daemonset(updateStrategy={"type": "RollingUpdate", "rollingUpdate": ru})


def test_rolling_update_deletes_up_to_max_unavailable_old_pods() -> None:
    nodes = [node(n) for n in "abcd"]
    by_node = sync.pods_by_node([pod(f"{n}1", n, OLD) for n in "abcd"])
    plan = sync.rolling_update(rolling(maxUnavailable=2), nodes, by_node, NEW, None, NOW)
    assert [sync.pod_name(p) for p in plan.delete] == ["a1", "b1"]
    plan = sync.rolling_update(rolling(maxUnavailable="50%"), nodes, by_node, NEW, None, NOW)
    assert len(plan.delete) == 2
    plan = sync.rolling_update(rolling(maxUnavailable="30%"), nodes, by_node, NEW, None, NOW)
    assert len(plan.delete) == 2  # 30 % of 4 rounds up to 2


def test_rolling_update_counts_unavailable_new_pods_and_replaces_unavailable_old_ones() -> None:
    nodes = [node(n) for n in "abc"]
    pods = [
        pod("a1", "a", NEW, ready_for=None),
        pod("b1", "b", OLD),
        pod("c1", "c", OLD, ready_for=None),
    ]
    plan = sync.rolling_update(
        rolling(maxUnavailable=1), nodes, sync.pods_by_node(pods), NEW, None, NOW
    )
    # a's new pod is unavailable (1 of 1 used); c's old pod is unavailable, so replaced anyway.
    assert [sync.pod_name(p) for p in plan.delete] == ["c1"]


def test_rolling_update_by_template_generation_label() -> None:
    legacy = pod("a1", "a", "other")
    legacy["metadata"]["labels"][hist.GENERATION_LABEL] = "2"
    plan = sync.rolling_update(
        rolling(maxUnavailable=1), [node("a")], sync.pods_by_node([legacy]), NEW, 2, NOW
    )
    assert plan.delete == []


def test_zero_surge_and_unavailability_falls_back_to_one_unavailable() -> None:
    nodes = [node(n) for n in "ab"]
    by_node = sync.pods_by_node([pod(f"{n}1", n, OLD) for n in "ab"])
    plan = sync.rolling_update(
        rolling(maxUnavailable=0, maxSurge=0), nodes, by_node, NEW, None, NOW
    )
    assert [sync.pod_name(p) for p in plan.delete] == ["a1"]


def test_surge_creates_up_to_max_surge_and_deletes_old_once_new_is_available() -> None:
    nodes = [node(n) for n in "abc"]
    pods = [
        pod("a-old", "a", OLD),
        pod("a-new", "a", NEW),
        pod("b-old", "b", OLD),
        pod("c-old", "c", OLD),
    ]
    plan = sync.rolling_update(
        rolling(maxSurge=1, maxUnavailable=0), nodes, sync.pods_by_node(pods), NEW, None, NOW
    )
    assert [sync.pod_name(p) for p in plan.delete] == ["a-old"]
    assert plan.create_on == ["b"]
    waiting = [
        pod("a-old", "a", OLD),
        pod("a-new", "a", NEW, ready_for=None),
        pod("b-old", "b", OLD),
    ]
    plan = sync.rolling_update(
        rolling(maxSurge=1, maxUnavailable=0), nodes[:2], sync.pods_by_node(waiting), NEW, None, NOW
    )
    assert plan.delete == [] and plan.create_on == []


def test_surge_replaces_unavailable_old_pods_beyond_max_surge() -> None:
    nodes = [node(n) for n in "ab"]
    pods = [pod("a-old", "a", OLD, ready_for=None), pod("b-old", "b", OLD, ready_for=None)]
    plan = sync.rolling_update(
        rolling(maxSurge=1, maxUnavailable=0), nodes, sync.pods_by_node(pods), NEW, None, NOW
    )
    assert plan.create_on == ["a", "b"]


def test_on_delete_has_no_rolling_update() -> None:
    assert not sync.is_rolling_update(daemonset(updateStrategy={"type": "OnDelete"}))
    assert sync.is_rolling_update(daemonset())


def test_invalid_max_unavailable_is_an_error() -> None:
    with pytest.raises(ValueError, match="IntOrString"):
        sync.rolling_update(rolling(maxUnavailable="lots"), [node("a")], {}, NEW, None, NOW)


# Pods and status ------------------------------------------------------------------------
def test_pod_for_node_pins_labels_and_tolerates() -> None:
    ds = daemonset()
    body = sync.pod_for_node(ds, "n1", NEW, 2)
    meta = body["metadata"]
    assert meta["generateName"] == "ds-"
    assert meta["labels"] == {"app": "d", hist.GENERATION_LABEL: "2", hist.HASH_LABEL: NEW}
    assert meta["ownerReferences"][0]["kind"] == "DaemonSet"
    assert meta["ownerReferences"][0]["controller"] is True
    assert "nodeName" not in body["spec"]
    assert nd.target_node(body) == "n1"
    assert len(body["spec"]["tolerations"]) == 6
    assert "labels" not in (ds["spec"]["template"]["metadata"].get("x") or {})
    assert ds["spec"]["template"]["metadata"]["labels"] == {"app": "d"}


def test_status_counts_each_nodes_oldest_pod() -> None:
    ds = daemonset(template_spec={"nodeSelector": {"run": "yes"}}, minReadySeconds=30)
    nodes = [
        node("a", {"run": "yes"}),
        node("b", {"run": "yes"}),
        node("c", {"run": "yes"}),
        node("x"),
    ]
    pods = [
        pod("a1", "a", NEW, ready_for=100),
        pod("b1", "b", OLD, ready_for=10),
        pod("x1", "x", NEW),
    ]
    counts = sync.calculate_status(ds, nodes, sync.pods_by_node(pods), NEW, None, NOW)
    assert counts == {
        "desiredNumberScheduled": 3,
        "currentNumberScheduled": 2,
        "numberMisscheduled": 1,
        "numberReady": 2,
        "updatedNumberScheduled": 1,
        "numberAvailable": 1,
        "numberUnavailable": 2,
    }
    assert sync.next_available(ds, sync.pods_by_node(pods), NOW) == pytest.approx(20.0)


def test_status_current_compares_counts_and_observed_generation() -> None:
    ds = daemonset()
    counts = dict.fromkeys(sync._COUNTS, 0)
    ds["status"] = {"observedGeneration": 2}
    assert sync.status_current(ds, counts, observe=True)
    ds["status"] = {"observedGeneration": 1}
    assert not sync.status_current(ds, counts, observe=True)
    assert sync.status_current(ds, counts, observe=False)
    assert not sync.status_current(ds, {**counts, "numberReady": 1}, observe=False)


# History --------------------------------------------------------------------------------
def test_revision_records_the_template_with_upstreams_hash_and_name() -> None:
    ds = daemonset()
    ds["metadata"]["annotations"]["note"] = "n"
    ref = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "ds",
        "uid": "ds-uid",
        "controller": True,
    }
    revision = hist.new_revision(ds, ref, 3)
    digest = pod_template_hash(ds["spec"]["template"], None)
    assert revision["metadata"]["name"] == f"ds-{digest}"
    assert revision["metadata"]["labels"] == {"app": "d", hist.HASH_LABEL: digest}
    assert revision["metadata"]["annotations"]["note"] == "n"
    assert revision["revision"] == 3
    assert revision["data"] == {
        "spec": {"template": {**ds["spec"]["template"], "$patch": "replace"}}
    }
    assert list(revision["data"]["spec"]["template"]) == sorted(
        revision["data"]["spec"]["template"]
    )
    assert hist.matches(ds, revision)
    changed = daemonset(template_spec={"hostNetwork": True})
    assert not hist.matches(changed, revision)
    ds["status"] = {"collisionCount": 1}
    assert hist.template_hash(ds) == pod_template_hash(ds["spec"]["template"], 1) != digest


def test_duplicates_keep_the_highest_revision_and_cleanup_spares_live_hashes() -> None:
    def rev(name: str, number: int, digest: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {hist.HASH_LABEL: digest}}, "revision": number}

    assert (
        hist.keep_of_duplicates([rev("a", 3, "x"), rev("b", 5, "y"), rev("c", 5, "z")])["metadata"][
            "name"
        ]
        == "c"
    )
    old = [rev("r1", 1, "h1"), rev("r2", 2, "h2"), rev("r3", 3, "h3"), rev("r4", 4, "h4")]
    doomed = hist.to_clean_up(old, 1, {"h1"})
    assert [r["metadata"]["name"] for r in doomed] == ["r2", "r3", "r4"][:3]
    assert [r["metadata"]["name"] for r in hist.to_clean_up(old, 2, {"h1"})] == ["r2", "r3"]
    assert hist.to_clean_up(old, 4, ()) == []


def test_template_generation_and_updated_pods() -> None:
    ds = daemonset()
    assert hist.template_generation(ds) == 2
    ds["metadata"]["annotations"][hist.GENERATION_ANNOTATION] = "x"
    assert hist.template_generation(ds) is None
    p = pod("a1", "a", OLD)
    assert not hist.is_updated(p, NEW, None)
    assert hist.is_updated(p, OLD, None)
    p["metadata"]["labels"][hist.GENERATION_LABEL] = "7"
    assert hist.is_updated(p, NEW, 7)
