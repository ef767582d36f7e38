"""The pure parts of the Deployment controller: surge and unavailability, proportional
scaling, annotations, conditions, the pod-template-hash."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward import format_time, selector_matches
from steward.controllers.deployment import rollout as ro
from steward.controllers.deployment.controller import rs_name
from steward.runtime.hashing import (
    NotExact,
    go_dump,
    pod_template_hash,
    quantity_fields,
    safe_encode,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def dep(
    replicas: int = 10, surge: Any = "25%", unavailable: Any = "25%", **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "namespace": "ns", "generation": 1, "uid": "u"},
        "spec": {
            "replicas": replicas,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
            **spec,
        },
        "status": {},
    }


def rs(
    name: str, replicas: int, created: str = "2026-01-01T00:00:00Z", **ann: str
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": name,
            "creationTimestamp": created,
            "annotations": dict(ann),
        },
        "spec": {"replicas": replicas},
        "status": {},
    }


@pytest.mark.parametrize(
    ("surge", "unavailable", "desired", "expected"),
    [
        ("25%", "25%", 10, (3, 2)),  # surge rounds up, unavailable down
        ("25%", "25%", 1, (1, 0)),
        (0, 0, 5, (0, 1)),  # both zero: one may be unavailable
        ("0%", "0%", 5, (0, 1)),
        (2, "50%", 3, (2, 1)),
        ("10%", 0, 0, (0, 1)),
    ],
)
def test_resolve_fenceposts(
    surge: Any, unavailable: Any, desired: int, expected: tuple[int, int]
) -> None:
    assert ro.resolve_fenceposts(surge, unavailable, desired) == expected


def test_not_a_percentage() -> None:
    with pytest.raises(ValueError, match="not a percentage"):
        ro.scaled_value("5", 10, True)


def test_max_unavailable_capped_and_zero() -> None:
    assert ro.max_unavailable(dep(3, 0, 10)) == 3
    assert ro.max_unavailable(dep(0)) == 0
    recreate = dep(3)
    recreate["spec"]["strategy"] = {"type": "Recreate"}
    assert ro.max_surge(recreate) == 0 and ro.max_unavailable(recreate) == 0


def test_new_rs_new_replicas() -> None:
    d = dep(10, 3, 2)
    old, new = rs("old", 10), rs("new", 0)
    assert ro.new_rs_new_replicas(d, [old, new], new) == 3  # up to 13 in all
    old["spec"]["replicas"] = 8
    new["spec"]["replicas"] = 3
    assert ro.new_rs_new_replicas(d, [old, new], new) == 5
    new["spec"]["replicas"] = 9
    old["spec"]["replicas"] = 0
    assert ro.new_rs_new_replicas(d, [old, new], new) == 10  # never past spec.replicas


def test_proportional_scaling_up() -> None:
    """8 old + 5 new at max-replicas 13, the Deployment scaled from 10 to 20 (+3 surge)."""
    d = dep(20, 3, 2)
    d["status"]["replicas"] = 13
    old = rs("old", 8, "2026-01-01T00:00:00Z", **{ro.MAX_REPLICAS: "13"})
    new = rs("new", 5, "2026-01-01T00:01:00Z", **{ro.MAX_REPLICAS: "13"})
    got = {r["metadata"]["name"]: size for r, size in ro.proportional_sizes(d, [old, new])}
    assert got == {"old": 14, "new": 9}


def test_proportional_scaling_down_leftover_to_largest() -> None:
    d = dep(5, 1, 0)
    old = rs("old", 6, "2026-01-01T00:00:00Z", **{ro.MAX_REPLICAS: "11"})
    new = rs("new", 4, "2026-01-01T00:01:00Z", **{ro.MAX_REPLICAS: "11"})
    sizes = dict((r["metadata"]["name"], s) for r, s in ro.proportional_sizes(d, [old, new]))
    assert sum(sizes.values()) == 6  # 5 + surge 1
    assert sizes == {"old": 3, "new": 3}


def test_proportional_scaling_to_zero() -> None:
    d = dep(0)
    sizes = [s for _, s in ro.proportional_sizes(d, [rs("a", 3), rs("b", 2)])]
    assert sizes == [0, 0]


def test_revision_annotations_and_history() -> None:
    d = dep()
    d["metadata"]["annotations"] = {"team": "x", ro.LAST_APPLIED: "{}"}
    new = rs("new", 0)
    assert ro.set_new_rs_annotations(d, new, 1, exists=False)
    ann = new["metadata"]["annotations"]
    assert ann == {"team": "x", ro.REVISION: "1", ro.DESIRED_REPLICAS: "10", ro.MAX_REPLICAS: "13"}
    # Rolled back to: the next revision, the old one in the history.
    assert ro.set_new_rs_annotations(d, new, 3, exists=True)
    assert (ann[ro.REVISION], ann[ro.REVISION_HISTORY]) == ("3", "1")
    assert ro.set_new_rs_annotations(d, new, 5, exists=True)
    assert ann[ro.REVISION_HISTORY] == "1,3"
    assert not ro.set_new_rs_annotations(d, new, 5, exists=True)


def test_find_new_ignores_the_hash_label_and_empty_fields() -> None:
    d = dep()
    d["spec"]["template"] = {
        "metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    a = rs("a", 1)
    a["spec"]["template"] = copy.deepcopy(d["spec"]["template"])
    a["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] = "abc"
    a["spec"]["template"]["spec"]["volumes"] = []
    b = rs("b", 1)
    b["spec"]["template"] = {"metadata": {"labels": {"app": "b"}}, "spec": {}}
    assert ro.find_new(d, [b, a]) is a
    assert ro.find_old(d, [b, a]) == [b]


def available(obj: dict[str, Any], count: int) -> dict[str, Any]:
    obj["status"]["availableReplicas"] = count
    return obj


def test_unhealthy_cleanup_scales_down_by_the_unavailable_oldest_first() -> None:
    old = [available(rs("a", 3), 1), available(rs("b", 4), 4), available(rs("c", 5), 2)]
    assert ro.unhealthy_cleanup(old, 10) == [(0, 1), (2, 2)]  # b is healthy
    assert ro.unhealthy_cleanup(old, 3) == [(0, 1), (2, 4)]  # at most 3 pods in all
    assert ro.unhealthy_cleanup([rs("z", 0)], 5) == []


def test_unhealthy_cleanup_never_scales_up_on_a_status_behind_its_spec() -> None:
    """The rolling update 4 → 4 (maxSurge 1, maxUnavailable 1) just after the old
    ReplicaSet went 4 → 3: its status still says 4 available. Scaling it 'down' by
    3 - 4 would make it 4 again beside a new ReplicaSet of 2: six pods, past the surge
    (the failure seen in tests/controllers/deployment/test_scenarios.py::test_rolling_update).
    Upstream fails the sync instead; so does this."""
    old = [available(rs("old", 3), 4)]
    with pytest.raises(ro.InvalidScale, match="invalid request to scale down /old 3 -> 4"):
        ro.unhealthy_cleanup(old, 1)


def test_cleanup_order_and_active_or_latest() -> None:
    rss = [
        rs("a", 0, **{ro.REVISION: "3"}),
        rs("b", 0, **{ro.REVISION: "1"}),
        rs("c", 0, **{ro.REVISION: "2"}),
    ]
    assert [r["metadata"]["name"] for r in sorted(rss, key=ro.by_revision)] == ["b", "c", "a"]
    assert ro.find_active_or_latest(None, rss) is not None
    assert ro.find_active_or_latest(rs("n", 1), [rs("o", 1)]) is None


def test_set_condition_keeps_transition_time() -> None:
    status: dict[str, Any] = {}
    ro.set_condition(status, ro.new_condition("Progressing", "True", ro.NEW_RS_CREATED, "m", NOW))
    later = NOW + timedelta(seconds=30)
    ro.set_condition(
        status, ro.new_condition("Progressing", "True", ro.REPLICA_SET_UPDATED, "m2", later)
    )
    cond = ro.get_condition(status, "Progressing")
    assert cond is not None
    assert (cond["reason"], cond["lastTransitionTime"], cond["lastUpdateTime"]) == (
        ro.REPLICA_SET_UPDATED,
        format_time(NOW),
        format_time(later),
    )


def test_progress_deadline() -> None:
    d = dep(2, progressDeadlineSeconds=10)
    d["status"] = {
        "conditions": [ro.new_condition("Progressing", "True", ro.REPLICA_SET_UPDATED, "m", NOW)],
        "observedGeneration": 1,
    }
    new = rs("new", 2)
    status, _ = ro.rollout_status([new], new, d, NOW + timedelta(seconds=5))
    assert ro.get_condition(status, "Progressing")["reason"] == ro.REPLICA_SET_UPDATED  # type: ignore[index]
    status, _ = ro.rollout_status([new], new, d, NOW + timedelta(seconds=11))
    cond = ro.get_condition(status, "Progressing")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", ro.TIMED_OUT)
    assert cond["message"] == 'ReplicaSet "new" has timed out progressing.'


def test_calculate_status() -> None:
    d = dep(3, 1, 0)
    a = rs("a", 2)
    a["status"] = {"replicas": 2, "readyReplicas": 2, "availableReplicas": 1}
    b = rs("b", 1)
    b["status"] = {"replicas": 1, "readyReplicas": 0, "availableReplicas": 0}
    st = ro.calculate_status([a, b], b, d, NOW)
    assert {k: v for k, v in st.items() if k != "conditions"} == {
        "observedGeneration": 1,
        "replicas": 3,
        "updatedReplicas": 1,
        "readyReplicas": 2,
        "availableReplicas": 1,
        "unavailableReplicas": 2,
        "terminatingReplicas": 0,  # no ReplicaSet has reported yet: 0, as upstream
    }
    cond = ro.get_condition(st, "Available")
    assert cond is not None and cond["reason"] == ro.MIN_UNAVAILABLE


def test_selector_and_names() -> None:
    assert selector_matches({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"})
    assert not selector_matches({}, {"a": "1"})
    assert selector_matches(
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {"a": "1"}
    )
    assert rs_name("web", "abc") == "web-abc"
    assert len(rs_name("x" * 260, "5d9f8c7b6")) == 253


# The hash ------------------------------------------------------------------------------------
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "x", "tier": "b"}, "annotations": {"a": "b"}},
    "spec": {
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}],
                "resources": {
                    "limits": {"cpu": "100m", "memory": "128Mi"},
                    "requests": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "500M"},
                },
                "readinessProbe": {
                    "httpGet": {"path": "/", "port": 8080, "scheme": "HTTP"},
                    "periodSeconds": 10,
                },
                "livenessProbe": {"tcpSocket": {"port": "http"}},
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "Always",
                "securityContext": {},
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}],
    },
}
GO_SUM32 = 3901451133
"""fnv32a of k8s.io/utils/dump.ForHash of TEMPLATE decoded into corev1.PodTemplateSpec by
Go (k8s.io/api v0.37.2)."""


def test_hash_of_a_known_template() -> None:
    assert pod_template_hash(TEMPLATE) == safe_encode(str(GO_SUM32))
    dump = go_dump(TEMPLATE)
    assert dump.startswith("(v1.PodTemplateSpec){ObjectMeta:(v1.ObjectMeta){Name:(string) ")
    assert "Labels:(map[string]string)map[app:x tier:b]" in dump
    assert "SizeLimit:(*resource.Quantity){i:(resource.int64Amount){value:(int64)1073741824" in dump


def test_collision_count_changes_the_hash() -> None:
    assert len({pod_template_hash(TEMPLATE, c) for c in (None, 0, 1, 2)}) == 4


@pytest.mark.parametrize(
    ("text", "value", "scale", "kept", "fmt"),
    [
        ("100m", 100, -3, "100m", "DecimalSI"),
        ("2", 2, 0, "2", "DecimalSI"),
        ("1000", 1000, 0, "", "DecimalSI"),
        ("128Mi", 128 << 20, 0, "", "BinarySI"),
        ("1Gi", 1 << 30, 0, "1Gi", "BinarySI"),
        ("0", 0, 0, "0", "DecimalSI"),
    ],
)
def test_quantities(text: str, value: int, scale: int, kept: str, fmt: str) -> None:
    assert quantity_fields(text) == {"value": value, "scale": scale, "s": kept, "format": fmt}


def test_inexact_values_fall_back() -> None:
    with pytest.raises(NotExact):
        quantity_fields("1.5")
    odd = copy.deepcopy(TEMPLATE)
    odd["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(NotExact):
        go_dump(odd)
    assert len(pod_template_hash(odd)) >= 8
