"""The quota evaluators (steward.controllers.resourcequota.usage) and the controller's
decisions that need no API server: what each type uses, scopes, formats, the update
filter, and that every evaluator reads only what the controller's projections hold.

Expected values follow upstream's evaluator tests (pkg/quota/v1/evaluator/core/*_test.go)
and component-helpers' PodRequests/PodLimits.
"""

from __future__ import annotations

import datetime
import functools
from fractions import Fraction
from typing import Any

import orjson
import pytest

import steward
from steward.controllers.resourcequota.controller import (
    CLAIMS,
    CONTROLLER,
    PODS,
    READS,
    RESOURCEQUOTAS,
    SERVICES,
    hard_changed,
    replenishes,
)
from steward.controllers.resourcequota.usage import (
    ZERO,
    Amount,
    ClaimEvaluator,
    Evaluator,
    PodEvaluator,
    PodSummary,
    ScopeRequirement,
    ServiceEvaluator,
    UsageMemo,
    calculate_usage,
    evaluator_for,
    parse_count_name,
    scope_requirements,
    tracked_type,
    usage_of_summaries,
    written,
)
from steward.runtime.meta import Meta
from steward.runtime.mirror import MirrorObject
from steward.runtime.subscriptions import readable_tree

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def container(name: str = "c", requests: Any = None, limits: Any = None, **extra: Any) -> Any:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


def pod(*containers: Any, init: Any = (), status: Any = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": list(containers), **spec},
        "status": status or {"phase": "Running"},
    }
    if init:
        body["spec"]["initContainers"] = list(init)
    return body


def pod_usage(obj: Any, now: datetime.datetime = NOW) -> dict[str, str]:
    return written(PodEvaluator().usage(obj, now))


def mirrored(
    rtype: steward.Resource, body: dict[str, Any], uid: str = "uid", version: str = "1"
) -> MirrorObject:
    """``body`` as the controller's mirror holds it: through its projection."""
    projection = READS[rtype].projection()
    assert projection is not None
    view = (projection, readable_tree(projection))
    meta = Meta("ns", body.get("metadata", {}).get("name", "x"), uid, version)
    raw = projection.encode(body)
    return MirrorObject(rtype, meta, raw, view)


def projected(rtype: steward.Resource, body: dict[str, Any]) -> Any:
    """``body`` as the controller's mirror hands it out: through its projection."""
    return mirrored(rtype, body).object


# Pods ------------------------------------------------------------------------------------
def test_pod_requests_and_limits() -> None:
    """Catches: a quota name of a pod's requests or limits missing or miscounted (bare
    cpu/memory as requests, limits.*, ephemeral-storage, pods and count/pods)."""
    p = pod(
        container(
            requests={"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
            limits={"cpu": "200m", "memory": "128Mi", "ephemeral-storage": "2Gi"},
        ),
        container("d", requests={"cpu": "1"}, limits={"cpu": "1"}),
    )
    assert pod_usage(p) == {
        "count/pods": "1",
        "pods": "1",
        "cpu": "1100m",
        "requests.cpu": "1100m",
        "limits.cpu": "1200m",
        "memory": "64Mi",
        "requests.memory": "64Mi",
        "limits.memory": "128Mi",
        "ephemeral-storage": "1Gi",
        "requests.ephemeral-storage": "1Gi",
        "limits.ephemeral-storage": "2Gi",
    }


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pod_counts_only_as_object(phase: str) -> None:
    """Catches: a terminal pod still charged for compute (it would hold quota forever)."""
    p = pod(container(requests={"cpu": "1"}), status={"phase": phase})
    assert pod_usage(p) == {"count/pods": "1"}


def test_pod_stuck_terminating_past_grace() -> None:
    """Catches: a pod past deletionTimestamp + grace charged (upstream's QuotaV1Pod), or
    one within its grace period not charged."""
    p = pod(container(requests={"cpu": "1"}))
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    assert pod_usage(p, NOW + datetime.timedelta(seconds=10))["cpu"] == "1"
    assert pod_usage(p, NOW + datetime.timedelta(seconds=31)) == {"count/pods": "1"}


def test_init_containers_max_rule_and_sidecars() -> None:
    """Catches: init containers summed instead of maxed, or restartable (sidecar) init
    containers not added to the pod and to later init containers."""
    p = pod(
        container(requests={"cpu": "1", "memory": "100Mi"}),
        init=[
            container("i1", requests={"cpu": "2"}),
            container("side", requests={"cpu": "500m", "memory": "50Mi"}, restartPolicy="Always"),
            container("i2", requests={"cpu": "1800m"}),
        ],
    )
    used = pod_usage(p)
    # containers 1 + sidecar 0.5 = 1.5; init max(2, 0.5, 1.8+0.5=2.3) = 2.3
    assert used["requests.cpu"] == "2300m"
    assert used["requests.memory"] == "150Mi"


def test_overhead_added_to_requests_and_set_limits() -> None:
    """Catches: pod overhead left out, or added to a limit the pod does not set."""
    p = pod(
        container(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "2"}),
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    used = pod_usage(p)
    assert used["requests.cpu"] == "1250m"
    assert used["limits.cpu"] == "2250m"
    assert used["requests.memory"] == "1144Mi"
    assert "limits.memory" not in used


def test_hugepages_and_extended_resources() -> None:
    """Catches: hugepages or extended resources (requests.<domain>/<name>) not counted."""
    p = pod(
        container(
            requests={"hugepages-2Mi": "4Mi", "example.com/gpu": "2"},
            limits={"hugepages-2Mi": "4Mi", "example.com/gpu": "2"},
        )
    )
    used = pod_usage(p)
    assert used["hugepages-2Mi"] == "4Mi"
    assert used["requests.hugepages-2Mi"] == "4Mi"
    assert used["requests.example.com/gpu"] == "2"
    ev = PodEvaluator()
    assert ev.matching(["requests.example.com/gpu", "hugepages-1Gi", "foo", "limits.cpu"]) == [
        "requests.example.com/gpu",
        "hugepages-1Gi",
        "limits.cpu",
    ]
    assert ev.matching(["requests.kubernetes.io/x", "example.com/gpu"]) == []


def test_pod_level_resources_replace_containers() -> None:
    """Catches: pod-level spec.resources ignored (PodLevelResources is on in 1.37)."""
    p = pod(
        container(requests={"cpu": "100m", "ephemeral-storage": "1Gi"}),
        resources={"requests": {"cpu": "2"}, "limits": {"cpu": "3", "memory": "1Gi"}},
    )
    used = pod_usage(p)
    assert used["requests.cpu"] == "2"
    assert used["limits.cpu"] == "3"
    assert used["limits.memory"] == "1Gi"
    assert used["requests.ephemeral-storage"] == "1Gi"


def test_in_place_resize_counts_the_larger() -> None:
    """Catches: a resize's allocated resources (larger than the spec) not charged, or an
    infeasible resize charged at the spec."""
    status = {
        "phase": "Running",
        "containerStatuses": [{"name": "c", "allocatedResources": {"cpu": "3"}}],
    }
    p = pod(container(requests={"cpu": "1"}), status=status)
    assert pod_usage(p)["requests.cpu"] == "3"
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    assert pod_usage(p)["requests.cpu"] == "5"
    p["status"]["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
    assert pod_usage(p)["requests.cpu"] == "3"


def test_sum_keeps_the_first_nonzero_format() -> None:
    """Catches: sums printed in the wrong format (Mi sums as bytes, decimal as binary)."""
    ev = PodEvaluator()
    pods = [
        pod(container(requests={"memory": "128Mi"})),
        pod(container(requests={"memory": "100M"})),
    ]
    used = calculate_usage(["requests.memory", "requests.cpu"], [], [(ev, pods)], NOW)
    assert written(used) == {"requests.memory": str(used["requests.memory"]), "requests.cpu": "0"}
    assert used["requests.memory"].fmt == "BinarySI"
    assert used["requests.memory"].value == 128 * 2**20 + 100 * 10**6
    reversed_used = calculate_usage(["requests.memory"], [], [(ev, pods[::-1])], NOW)
    assert written(reversed_used) == {"requests.memory": "234217728"}


# Scopes ----------------------------------------------------------------------------------
def _scoped(reqs: list[ScopeRequirement], pods: list[Any]) -> str:
    used = calculate_usage(["pods"], reqs, [(PodEvaluator(), pods)], NOW)
    return written(used)["pods"]


def test_pod_scopes() -> None:
    """Catches: a scope matching the wrong pods (Terminating by activeDeadlineSeconds,
    BestEffort by status.qosClass or computed, cross-namespace affinity)."""
    best = pod(container())
    burst = pod(container(requests={"cpu": "1"}))
    guaranteed_by_status = pod(container(), status={"phase": "Running", "qosClass": "Guaranteed"})
    deadline = pod(container(), activeDeadlineSeconds=10)
    affinity = pod(
        container(),
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "x", "namespaces": ["a"]}}
                ]
            }
        },
    )
    all_pods = [best, burst, guaranteed_by_status, deadline, affinity]
    assert _scoped([ScopeRequirement("Terminating")], all_pods) == "1"
    assert _scoped([ScopeRequirement("NotTerminating")], all_pods) == "4"
    assert _scoped([ScopeRequirement("BestEffort")], all_pods) == "3"
    assert _scoped([ScopeRequirement("NotBestEffort")], all_pods) == "2"
    assert _scoped([ScopeRequirement("CrossNamespacePodAffinity")], all_pods) == "1"
    both = [ScopeRequirement("BestEffort"), ScopeRequirement("NotTerminating")]
    assert _scoped(both, all_pods) == "2"


def test_priority_class_selector() -> None:
    """Catches: the PriorityClass operators mis-read (NotIn and DoesNotExist match pods
    without a class; Exists only those with one)."""
    pods = [
        pod(container(), priorityClassName="high"),
        pod(container(), priorityClassName="low"),
        pod(container()),
    ]
    assert _scoped([ScopeRequirement("PriorityClass", "In", ("high",))], pods) == "1"
    assert _scoped([ScopeRequirement("PriorityClass", "NotIn", ("high",))], pods) == "2"
    assert _scoped([ScopeRequirement("PriorityClass", "Exists")], pods) == "2"
    assert _scoped([ScopeRequirement("PriorityClass", "DoesNotExist")], pods) == "1"


def test_scope_requirements_from_spec() -> None:
    """Catches: spec.scopes or scopeSelector expressions dropped."""
    spec = {
        "scopes": ["BestEffort"],
        "scopeSelector": {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["a", "b"]}
            ]
        },
    }
    assert scope_requirements(spec) == [
        ScopeRequirement("BestEffort"),
        ScopeRequirement("PriorityClass", "In", ("a", "b")),
    ]


def test_scoped_quota_counts_no_service_or_object() -> None:
    """Catches: services or plain object counts counted under a scope (upstream's
    MatchesNoScopeFunc makes them zero)."""
    svc = {"metadata": {"name": "s"}, "spec": {"type": "ClusterIP"}}
    used = calculate_usage(
        ["services", "configmaps"],
        [ScopeRequirement("BestEffort")],
        [(ServiceEvaluator(), [svc]), (evaluator_for("", "configmaps"), [{}, {}])],
        NOW,
    )
    assert written(used) == {"services": "0", "configmaps": "0"}


# Services and claims ---------------------------------------------------------------------
def test_services() -> None:
    """Catches: node ports or load balancers miscounted (a LoadBalancer without node port
    allocation counts only its explicit node ports)."""

    def svc(kind: str, ports: int, **spec: Any) -> Any:
        plist = [{"port": 80 + i, "nodePort": 30000 + i if i == 0 else None} for i in range(ports)]
        return {"spec": {"type": kind, "ports": plist, **spec}}

    items = [
        svc("ClusterIP", 2),
        svc("NodePort", 2),
        svc("LoadBalancer", 3),
        svc("LoadBalancer", 2, allocateLoadBalancerNodePorts=False),
    ]
    names = ["services", "services.nodeports", "services.loadbalancers", "count/services"]
    used = calculate_usage(names, [], [(ServiceEvaluator(), items)], NOW)
    assert written(used) == {
        "services": "4",
        "count/services": "4",
        "services.nodeports": "6",
        "services.loadbalancers": "2",
    }


def test_claims() -> None:
    """Catches: storage-class names, the beta annotation's precedence, whole-byte rounding
    or a larger allocated size missed."""
    gold = {"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}}}
    beta = {
        "metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "silver"}},
        "spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1.5"}}},
    }
    grown = {
        "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        "status": {"allocatedResources": {"storage": "2Gi"}},
    }
    names = [
        "persistentvolumeclaims",
        "requests.storage",
        "gold.storageclass.storage.k8s.io/requests.storage",
        "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
        "silver.storageclass.storage.k8s.io/requests.storage",
        "count/persistentvolumeclaims",
    ]
    used = calculate_usage(names, [], [(ClaimEvaluator(), [gold, beta, grown])], NOW)
    assert written(used) == {
        "persistentvolumeclaims": "3",
        "count/persistentvolumeclaims": "3",
        "requests.storage": str(used["requests.storage"]),
        "gold.storageclass.storage.k8s.io/requests.storage": "1Gi",
        "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "1",
        "silver.storageclass.storage.k8s.io/requests.storage": "2",
    }
    assert used["requests.storage"].value == 3 * 2**30 + 2


# The memo of summaries ----------------------------------------------------------------------
class CountingPods(PodEvaluator):
    """The pod evaluator, counting the pods it reads."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def summary(self, obj: Any) -> PodSummary:
        self.read.append(obj["metadata"]["name"])
        return super().summary(obj)


def _memo_usage(
    memo: UsageMemo,
    ev: Evaluator,
    objects: list[MirrorObject],
    names: list[str],
    reqs: list[ScopeRequirement] | None = None,
    now: datetime.datetime = NOW,
) -> dict[str, str]:
    summaries = memo.summaries(ev, "ns", objects)
    return written(usage_of_summaries(names, reqs or [], [(ev, summaries)], now))


def _named(name: str, body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["name"] = name
    return body


def test_memo_reads_a_pod_again_only_when_it_changes() -> None:
    """Catches: a stale usage after an update (a summary kept by UID alone, or a new
    resource version not read again), a deleted pod still held by the memo (it grows
    with every pod ever seen, or a pod recreated under its UID comes back stale), and a
    memo that does not keep anything (every sync reads every pod again)."""
    ev, memo = CountingPods(), UsageMemo()
    a = mirrored(PODS, _named("a", pod(container(requests={"cpu": "1"}))), "uid-a", "1")
    b = mirrored(PODS, _named("b", pod(container(requests={"cpu": "2"}))), "uid-b", "1")
    assert _memo_usage(memo, ev, [a, b], ["requests.cpu"]) == {"requests.cpu": "3"}
    assert _memo_usage(memo, ev, [a, b], ["requests.cpu"]) == {"requests.cpu": "3"}
    assert ev.read == ["a", "b"]
    a2 = mirrored(PODS, _named("a", pod(container(requests={"cpu": "5"}))), "uid-a", "2")
    assert _memo_usage(memo, ev, [a2, b], ["requests.cpu"]) == {"requests.cpu": "7"}
    assert ev.read == ["a", "b", "a"]
    assert _memo_usage(memo, ev, [a2], ["requests.cpu"]) == {"requests.cpu": "5"}
    assert len(memo) == 1
    assert _memo_usage(memo, ev, [a2, b], ["requests.cpu"]) == {"requests.cpu": "7"}
    assert ev.read == ["a", "b", "a", "b"]
    assert _memo_usage(memo, ev, [], ["requests.cpu"]) == {"requests.cpu": "0"}
    assert len(memo) == 0


def test_memo_judges_the_clock_and_the_scopes_at_each_sync() -> None:
    """Catches: a memoized pod frozen in time (still charged after its deletion's grace
    period, as it was when first read), or a summary holding one quota's scope verdict
    that another quota of the namespace then reuses."""
    ev, memo = CountingPods(), UsageMemo()
    leaving = _named("leaving", pod(container(requests={"cpu": "1"})))
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    leaving["metadata"]["deletionGracePeriodSeconds"] = 30
    best = _named("best", pod(container(), status={"phase": "Running", "qosClass": "BestEffort"}))
    pods = [mirrored(PODS, leaving, "uid-l"), mirrored(PODS, best, "uid-b")]
    names = ["requests.cpu", "pods", "count/pods"]
    soon, late = NOW + datetime.timedelta(seconds=10), NOW + datetime.timedelta(seconds=31)
    assert _memo_usage(memo, ev, pods, names, now=soon) == {
        "requests.cpu": "1",
        "pods": "2",
        "count/pods": "2",
    }
    assert _memo_usage(memo, ev, pods, names, now=late) == {
        "requests.cpu": "0",
        "pods": "1",
        "count/pods": "2",
    }
    best_effort = [ScopeRequirement("BestEffort")]
    not_best_effort = [ScopeRequirement("NotBestEffort")]
    assert _memo_usage(memo, ev, pods, ["pods"], best_effort, soon) == {"pods": "1"}
    assert _memo_usage(memo, ev, pods, ["pods"], not_best_effort, soon) == {"pods": "1"}
    assert _memo_usage(memo, ev, pods, ["count/pods"], not_best_effort, late) == {"count/pods": "1"}
    assert ev.read == ["leaving", "best"]


def test_memo_forgets_namespaces_and_types_no_quota_needs() -> None:
    """Catches: the summaries of a namespace whose quotas are gone (or of a type no quota
    counts any more) kept for ever."""
    memo = UsageMemo()
    pods, services = evaluator_for("", "pods"), evaluator_for("", "services")
    p = mirrored(PODS, pod(container()))
    svc = mirrored(SERVICES, {"metadata": {"name": "s"}, "spec": {"type": "ClusterIP"}}, "s")
    memo.summaries(pods, "a", [p])
    memo.summaries(pods, "b", [p])
    memo.summaries(services, "a", [svc])
    assert len(memo) == 3
    memo.retain({"a"}, {pods, services})
    assert len(memo) == 2
    memo.retain({"a"}, {pods})
    assert len(memo) == 1


def test_equal_usages_are_shared() -> None:
    """Catches: every memoized pod holding a usage of its own (the memo of a namespace of
    one workload's pods then costs as much memory per pod as the mirror's copy)."""
    ev, memo = PodEvaluator(), UsageMemo()
    same = [mirrored(PODS, pod(container(requests={"cpu": "1"})), f"u{i}") for i in range(3)]
    other = mirrored(PODS, pod(container(requests={"cpu": "2"})), "u9")
    summaries = memo.summaries(ev, "ns", [*same, other])
    assert len({id(s.compute) for s in summaries}) == 2


@pytest.mark.parametrize(
    "quantities",
    [
        ["0", "128Mi", "100M", "1.5", "1n"],
        ["0Mi", "0", "250m", "1Gi", "1e3", "3u"],
        ["100M", "0", "128Mi", "1k", "7m", "1Ki"],
        ["0", "0Ki"],
        ["0.25", "0.1", "3m", "1.5Ki", "0.04"],
    ],
)
def test_sums_are_quantity_add_term_by_term(quantities: list[str]) -> None:
    """Catches: a sum that is not apimachinery's Quantity.Add over the objects in order,
    in value (mixed denominators: milli, nano, quarters and tenths, binary) or in format
    (the first non-zero term's; a zero term's while the sum is still zero)."""
    pods = [pod(container(requests={"memory": q})) for q in quantities]
    expected = functools.reduce(Amount.plus, [Amount.parse(q) for q in quantities], ZERO)
    used = calculate_usage(["requests.memory"], [], [(PodEvaluator(), pods)], NOW)
    assert used["requests.memory"] == expected
    assert written(used) == {"requests.memory": str(expected)}


# Names, types and the registry --------------------------------------------------------------
def test_names_to_types() -> None:
    """Catches: a quota name sent to the wrong type's evaluator (so never computed), or an
    ignored type counted."""
    assert tracked_type("requests.cpu") == ("", "pods")
    assert tracked_type("count/pods") == ("", "pods")
    assert tracked_type("services.nodeports") == ("", "services")
    assert tracked_type("gold.storageclass.storage.k8s.io/requests.storage") == (
        "",
        "persistentvolumeclaims",
    )
    assert tracked_type("secrets") == ("", "secrets")
    assert tracked_type("count/deployments.apps") == ("apps", "deployments")
    assert tracked_type("count/widgets.example.com") == ("example.com", "widgets")
    assert tracked_type("count/events") is None
    assert tracked_type("nonsense") is None
    assert parse_count_name("count/") is None
    assert evaluator_for("apps", "deployments").names == frozenset({"count/deployments.apps"})
    assert evaluator_for("", "secrets").matching(["secrets", "count/secrets", "x"]) == [
        "secrets",
        "count/secrets",
    ]
    assert isinstance(evaluator_for("", "serviceaccounts"), Evaluator)


def test_only_hard_names_computed_zero_as_0() -> None:
    """Catches: used keys beyond hard, or a zero written otherwise than "0"."""
    used = calculate_usage(["pods", "foo"], [], [(PodEvaluator(), [])], NOW)
    assert written(used) == {"pods": "0"}
    assert used["pods"].value == Fraction(0)


# Projections ------------------------------------------------------------------------------
def test_evaluators_read_only_what_is_projected() -> None:
    """Catches: an evaluator or scope reading a path the controller does not subscribe to
    (the projected mirror would raise ProjectionError at every sync)."""
    full_pod = pod(
        container(requests={"cpu": "1"}, limits={"cpu": "1"}),
        init=[container("i", requests={"cpu": "2"}, restartPolicy="Always")],
        status={
            "phase": "Running",
            "qosClass": "Guaranteed",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        overhead={"cpu": "1m"},
        priorityClassName="high",
        activeDeadlineSeconds=5,
        affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
        nodeName="n1",
    )
    seen = projected(PODS, full_pod)
    ev = PodEvaluator()
    for scope in ("Terminating", "BestEffort", "CrossNamespacePodAffinity"):
        ev.matches_scope(ScopeRequirement(scope), seen, NOW)
    ev.matches_scope(ScopeRequirement("PriorityClass", "In", ("high",)), seen, NOW)
    assert written(ev.usage(seen, NOW)) == written(ev.usage(full_pod, NOW))
    svc = {"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [{"port": 1}]}}
    assert ServiceEvaluator().usage(projected(SERVICES, svc), NOW)
    claim = {
        "metadata": {"name": "c", "annotations": {"a": "b"}},
        "spec": {"storageClassName": "x", "resources": {"requests": {"storage": "1"}}},
        "status": {"phase": "Bound"},
    }
    seen_claim = projected(CLAIMS, claim)
    ClaimEvaluator().matches_scope(ScopeRequirement("VolumeAttributesClass"), seen_claim, NOW)
    assert written(ClaimEvaluator().usage(seen_claim, NOW)) == written(
        ClaimEvaluator().usage(claim, NOW)
    )


# The controller's filters -------------------------------------------------------------------
def _change(
    kind: steward.ChangeKind, rtype: steward.Resource, new: Any, old: Any = None
) -> steward.Change:
    def obj(body: Any) -> MirrorObject:
        return MirrorObject(rtype, Meta("ns", "x", "uid", "1"), orjson.dumps(body))

    return steward.Change(kind, obj(new), obj(old) if old is not None else None, None)


MOD = steward.ChangeKind.MODIFIED


def test_update_filter() -> None:
    """Catches: replenishment missing a pod turning terminal, a deadline set, a resized
    container status, a service's type change, a claim update or a deletion; or firing on
    updates that change no usage."""
    running = pod(container(requests={"cpu": "1"}))
    done = pod(container(requests={"cpu": "1"}), status={"phase": "Succeeded"})
    assert replenishes(_change(MOD, PODS, done, running), NOW)
    assert not replenishes(_change(MOD, PODS, running, running), NOW)
    assert not replenishes(_change(MOD, PODS, running, done), NOW)
    with_deadline = pod(container(), activeDeadlineSeconds=3)
    assert replenishes(_change(MOD, PODS, with_deadline, pod(container())), NOW)
    resized_old = pod(container(), status={"containerStatuses": [{"name": "c", "resources": {}}]})
    resized = pod(
        container(),
        status={"containerStatuses": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
    )
    assert replenishes(_change(MOD, PODS, resized, resized_old), NOW)
    assert replenishes(_change(steward.ChangeKind.DELETED, PODS, running), NOW)
    assert not replenishes(_change(steward.ChangeKind.ADDED, PODS, running), NOW)
    lb = {"spec": {"type": "LoadBalancer"}}
    cip = {"spec": {"type": "ClusterIP"}}
    headless = {"spec": {"type": "ClusterIP", "clusterIP": "None"}}
    assert replenishes(_change(MOD, SERVICES, cip, lb), NOW)
    assert not replenishes(_change(MOD, SERVICES, headless, cip), NOW)
    assert replenishes(_change(MOD, CLAIMS, {}, {}), NOW)
    cm = steward.CONFIGMAPS
    assert not replenishes(_change(MOD, cm, {}, {}), NOW)
    assert replenishes(_change(steward.ChangeKind.DELETED, cm, {}), NOW)


def test_quota_changes_that_queue() -> None:
    """Catches: a status write queueing its own quota again, or a change of spec.hard (by
    value) not queueing it."""
    q = {"spec": {"hard": {"pods": "1"}}, "status": {"used": {"pods": "0"}}}
    written_status = {"spec": {"hard": {"pods": "1"}}, "status": {"used": {"pods": "1"}}}
    same_value = {"spec": {"hard": {"pods": "1000m"}}}
    raised = {"spec": {"hard": {"pods": "2"}}}
    assert not hard_changed(_change(MOD, RESOURCEQUOTAS, written_status, q))
    assert not hard_changed(_change(MOD, RESOURCEQUOTAS, same_value, q))
    assert hard_changed(_change(MOD, RESOURCEQUOTAS, raised, q))
    assert hard_changed(_change(steward.ChangeKind.ADDED, RESOURCEQUOTAS, q))


def test_declaration() -> None:
    """Catches: upstream's flag names, defaults or queue name lost."""
    assert CONTROLLER.name == "resourcequota"
    assert CONTROLLER.options.queue_name == "resourcequota_primary"
    assert CONTROLLER.options.max_concurrent_reconciles == 5
    assert CONTROLLER.options.resync_period == 300.0
    assert CONTROLLER.beside_upstream is None
    flags = CONTROLLER.flag_parser().parse_args(
        ["--resource-quota-sync-period=1m30s", "--concurrent-resource-quota-syncs=3"]
    )
    assert (flags.resync_period, flags.workers) == (90.0, 3)
