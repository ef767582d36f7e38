"""The disruption controller against upstream's: each scenario runs at once on Steward's
plane (upstream's disruption controller off, Steward's on) and on the session's cluster
(upstream's on), and what each controller wrote is compared field by field: the budgets'
statuses (masked: the condition's ``lastTransitionTime``; ``disruptedPods`` reduced to its
size, since a workload's pod names are random), the outcomes of evictions, the pods'
conditions (masked: ``lastTransitionTime``) and the Events the controller records (masked:
the message of an Event on a pod, which names random pods, and which for ``NotDeleted``
upstream writes ``namespace/namespace``). Each scenario also checks its own expected
values, so that both sides being wrong the same way fails too.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.controllers.disruption.scenarios import (
    NOBODY,
    Side,
    ago,
    both,
    drain_blocked_then_allowed,
    masked,
    masked_events,
    wait,
)

pytestmark = pytest.mark.integration

Obj = dict[str, Any]

OURS = {
    "NoPods",
    "CalculateExpectedPodCountFailed",
    "UnmanagedPods",
    "MultiplePodDisruptionBudgets",
    "NotDeleted",
}
"""The reasons of the disruption controller's Events."""


def _select(app: str) -> Obj:
    return {"matchLabels": {"app": app}}


def _own_events(side: Side) -> set[tuple[str, str, str, str]]:
    """The controller's Events, but those of a kind its REST mapping did not know yet
    (upstream's until its mapper's next reset; see the module docs)."""
    return masked_events(
        [
            e
            for e in side.events()
            if e.get("reason") in OURS and "no matches for kind" not in e.get("message", "")
        ]
    )


# Evictions ---------------------------------------------------------------------------------
def _evictions(side: Side) -> Obj:
    """Three pods of no controller (none replaces an evicted one, so what follows an
    eviction does not race a replacement) and a budget ``minAvailable: 2``: the first
    eviction is let through (one disruption allowed), the second refused (the eviction
    API has counted the first in ``disruptedPods``; how long that entry lasts before the
    controller sees the pod deleted is a race, not compared); a new pod Ready brings the
    budget back to one allowed, the evicted pod gone from ``disruptedPods``. Then
    ``disruptedPods`` is written by hand: an entry of a live pod older than the deletion
    timeout is dropped (``NotDeleted``), a fresh one holds its pod back from the healthy
    count, and an eviction is refused."""
    for i in range(3):
        side.pod(f"web-{i}", {"app": "web"})
    wait(lambda: side.ready({"app": "web"}, 3), f"{side.name}: web Ready")
    side.budget("web", _select("web"), minAvailable=2)
    wait(
        lambda: side.synced("web", currentHealthy=3, disruptionsAllowed=1),
        f"{side.name}: budget web",
    )
    first = side.evict("web-0")
    second = side.evict("web-1")
    side.pod("web-3", {"app": "web"})
    recovered = wait(
        lambda: (
            side.ready({"app": "web"}, 3)
            and side.synced("web", currentHealthy=3, disruptionsAllowed=1, disruptedPods={})
        ),
        f"{side.name}: budget web recovered",
    )
    live = [p["metadata"]["name"] for p in side.pods({"app": "web"})]

    def stale_and_fresh(status: Obj) -> None:
        status["disruptedPods"] = {live[0]: ago(180), live[1]: ago(0)}

    side.write_status("web", stale_and_fresh)
    held = wait(
        lambda: side.synced("web", currentHealthy=2, disruptionsAllowed=0),
        f"{side.name}: budget web holding a pod back",
    )
    refused = side.evict(live[2])
    wait(lambda: "NotDeleted" in side.reasons("Pod", live[0]), f"{side.name}: NotDeleted")
    return {
        "outcomes": (first, second, refused),
        "recovered": masked(recovered),
        "held": masked(held),
        "held back": sorted(held.get("disruptedPods") or {}) == [live[1]],
        "events": _own_events(side),
    }


def test_evictions_recorded_refused_and_pruned(steward: Side, upstream: Side) -> None:
    """Breaks when a budget allows a disruption it should not (or none it should), a
    deleted pod's ``disruptedPods`` entry is not pruned, an expired entry of a live pod is
    kept (or gives no ``NotDeleted``), or a fresh entry does not hold its pod back."""
    ours, theirs = both(_evictions, steward, upstream)
    assert ours == theirs
    assert ours["outcomes"] == ("evicted", "blocked", "blocked")
    assert ours["held back"]
    assert ("Pod", "Warning", "NotDeleted", "*") in ours["events"]


# Stale DisruptionTarget conditions ---------------------------------------------------------
def _stale(side: Side) -> dict[str, Obj]:
    """Three pods no scheduler binds, each with a True ``DisruptionTarget`` condition: ten
    minutes old (stale: set False), ten minutes old but the kubelet's own
    (``TerminationByKubelet``: kept), and new (not stale yet: kept)."""
    conditions = {
        "stale": ("EvictionByEvictionAPI", ago(600)),
        "kubelet": ("TerminationByKubelet", ago(600)),
        "fresh": ("EvictionByEvictionAPI", ago(0)),
    }
    for name, (reason, since) in conditions.items():
        side.pod(name, {"app": "stale"}, scheduler=NOBODY)
        side.set_pod_conditions(
            name,
            [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": "evicting",
                    "lastTransitionTime": since,
                }
            ],
        )
    wait(
        lambda: side.pod_condition("stale", "DisruptionTarget").get("status") == "False",
        f"{side.name}: the stale condition cleared",
    )
    return {
        name: {
            k: v
            for k, v in side.pod_condition(name, "DisruptionTarget").items()
            if k != "lastTransitionTime"
        }
        for name in conditions
    }


def test_stale_disruption_condition_cleared(steward: Side, upstream: Side) -> None:
    """Breaks when a stale condition is not set False (or is written otherwise than
    upstream writes it: reason, message, observed generation), or when the kubelet's
    condition or a new one is touched."""
    ours, theirs = both(_stale, steward, upstream)
    assert ours == theirs
    assert ours["stale"]["status"] == "False"
    assert ours["kubelet"]["status"] == ours["fresh"]["status"] == "True"


# A drain ------------------------------------------------------------------------------------
def _drain(side: Side) -> Obj:
    done, final = drain_blocked_then_allowed(side.kube, side.ns, "kwok-node-0")
    return {
        "emptied": done.emptied,
        "blocked": done.blocked > 0,
        "evicted": len(done.evicted),
        "final": masked(final),
    }


def test_drain_blocked_then_allowed(steward: Side, upstream: Side) -> None:
    """Breaks when a budget lets a drain evict its only pod, or keeps blocking it once
    another replica is Ready."""
    ours, theirs = both(_drain, steward, upstream)
    assert ours == theirs
    assert ours["emptied"] and ours["blocked"] and ours["evicted"] == 1


# Budgets over every kind of owner ----------------------------------------------------------
KINDS: dict[str, tuple[Obj, Obj]] = {
    # budget: (its spec, the status it must reach)
    "web": (
        {"maxUnavailable": "34%"},
        {"expectedPods": 3, "desiredHealthy": 1, "currentHealthy": 3, "disruptionsAllowed": 2},
    ),
    "rs": (
        {"maxUnavailable": 1},
        {"expectedPods": 2, "desiredHealthy": 1, "currentHealthy": 2, "disruptionsAllowed": 1},
    ),
    "ss": (
        {"minAvailable": 1},
        {"expectedPods": 2, "desiredHealthy": 1, "currentHealthy": 2, "disruptionsAllowed": 1},
    ),
    "rc": (
        {"minAvailable": "50%"},
        {"expectedPods": 2, "desiredHealthy": 1, "currentHealthy": 2, "disruptionsAllowed": 1},
    ),
    "scalable": (
        {"minAvailable": "60%"},
        {"expectedPods": 3, "desiredHealthy": 2, "currentHealthy": 2, "disruptionsAllowed": 0},
    ),
    "bare": (
        {"maxUnavailable": 1},
        {"expectedPods": 0, "desiredHealthy": 0, "currentHealthy": 1, "disruptionsAllowed": 0},
    ),
    "none": (
        {"maxUnavailable": 1},
        {"expectedPods": 0, "desiredHealthy": 0, "currentHealthy": 0, "disruptionsAllowed": 0},
    ),
}
PODS = {"web": 3, "rs": 2, "ss": 2, "rc": 2, "scalable": 2, "bare": 1, "cm": 1}


def _kinds(side: Side) -> tuple[dict[str, Obj], set[tuple[str, str, str, str]]]:
    """A budget over the pods of each owner kind (a Deployment, a ReplicaSet, a
    StatefulSet, a ReplicationController, a custom resource through its ``scale``), over
    an unmanaged pod, over a pod whose owner has no ``scale`` (the fail-safe), over no
    pod, and one over every pod of the namespace (empty selector); all made once the pods
    are Ready. Then a pod two budgets select changes."""
    side.workload("Deployment", "web", 3)
    side.workload("ReplicaSet", "rs", 2)
    side.workload("StatefulSet", "ss", 2)
    side.replication_controller("rc", 2)
    owner = side.scalable("scalable", 3)
    for i in range(2):
        side.pod(f"scalable-{i}", {"app": "scalable"}, owner)
    side.pod("bare", {"app": "bare"})
    side.pod("cm", {"app": "cm"}, side.configmap("owner"))
    for app, count in PODS.items():
        wait(lambda app=app, count=count: side.ready({"app": app}, count), f"{side.name}: {app}")  # type: ignore[misc]
    for name, (spec, _) in KINDS.items():
        side.budget(name, _select(name), **spec)
    side.budget("cm", _select("cm"), maxUnavailable=1)
    side.budget("all", {}, minAvailable=3)
    statuses = {}
    for name, (_, expected) in KINDS.items():
        statuses[name] = side.synced_touching(name, **expected)
    total = sum(PODS.values())
    statuses["all"] = wait(
        lambda: side.synced("all", expectedPods=total, desiredHealthy=3, currentHealthy=total),
        f"{side.name}: budget all",
    )

    def failed() -> Obj | None:
        status = side.status("cm")
        conditions = status.get("conditions") or ()
        return status if any(c.get("reason") == "SyncFailed" for c in conditions) else None

    statuses["cm"] = wait(failed, f"{side.name}: budget cm failed safe")
    # A change of a pod that "bare" and "all" both select.
    side.kube.request(
        "PATCH",
        f"{side.core}/pods/bare",
        {"metadata": {"labels": {"touched": "yes"}}},
        content_type="application/merge-patch+json",
    )
    wanted = {
        ("PodDisruptionBudget", "none", "NoPods"),
        ("PodDisruptionBudget", "bare", "UnmanagedPods"),
        ("PodDisruptionBudget", "cm", "CalculateExpectedPodCountFailed"),
        ("Pod", "bare", "MultiplePodDisruptionBudgets"),
    }

    def recorded() -> bool:
        seen = {
            (
                (e.get("involvedObject") or {}).get("kind"),
                (e.get("involvedObject") or {}).get("name"),
                e.get("reason"),
            )
            for e in side.events()
        }
        return wanted <= seen

    wait(recorded, f"{side.name}: the Events {sorted(wanted)}")
    return {k: masked(v) for k, v in statuses.items()}, _own_events(side)


def test_budgets_over_each_kind_of_owner(steward: Side, upstream: Side) -> None:
    """Breaks when an owner kind is counted wrong (the finders, the scale subresource
    through discovery), a percent is rounded the wrong way, an unmanaged pod, a budget
    without pods or an owner without ``scale`` is handled otherwise than upstream (status,
    fail-safe ``SyncFailed`` condition and message, Event text such as the selector of
    ``UnmanagedPods``), an empty selector selects nothing, or a pod of two budgets gives
    no ``MultiplePodDisruptionBudgets`` Event."""
    (ours, our_events), (theirs, their_events) = both(_kinds, steward, upstream)
    assert ours == theirs
    assert our_events == their_events
    cm = ours["cm"]["conditions"][0]
    assert cm["reason"] == "SyncFailed"
    assert cm["message"] == "configmaps does not implement the scale subresource"
    assert ours["cm"]["disruptionsAllowed"] == 0
    assert ("PodDisruptionBudget", "Normal", "NoPods", "No matching pods found") in our_events
