"""A real node whose kubelet stops, under Steward's node lifecycle and taint eviction
controllers and under upstream's: the same story on both sides.

Each side gets a cluster of two real nodes (and no simulated one): Steward's side runs
Steward's ``nodelifecycle`` and ``taint-eviction-controller`` (kube-controller-manager
without its own of those names, every other controller upstream's), upstream's side
kube-controller-manager with every controller. Both run with a node monitor grace period
of :data:`GRACE` (kube-controller-manager's ``--node-monitor-grace-period``, which
Steward's controller declares too and so is given alike).

A Deployment of one replica runs a pause pod on the first node (preferred by affinity),
tolerating the ``unreachable`` and ``not-ready`` NoExecute taints for
:data:`TOLERATION` seconds (in place of the 300 s the API server would add). Then the
first node's kubelet is stopped, and every half second the test records the node's Ready
condition and taints and the Deployment's pods. Expected, on both sides: the node goes
Unknown no sooner than the grace period after its last heartbeat, is tainted
``unreachable`` NoSchedule and NoExecute, its pod is marked not ready, then deleted no
sooner than the toleration after the NoExecute taint was added, and the Deployment's
ReplicaSet replaces it on the other node; once the kubelet is started again the node is
Ready, its ``unreachable`` taints go, and the kubelet finishes the deleted pod. The two
sides' sequences of node conditions, taint sets and each pod's states are then compared.
Needs root and the real nodes' packages (``make node-packages``).
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.nodes import REAL_NODE_LABEL
from steward.cluster.progress import Progress
from tests.conftest import require_real_nodes

pytestmark = pytest.mark.integration

GRACE = 30
"""Seconds without a heartbeat before a node is Unknown, on both sides (shorter than
upstream's default 50 s, for time; a kubelet renews its Lease every 10 s)."""
TOLERATION = 10
"""Seconds the pod tolerates the NoExecute taints of a node that is not ready."""
STEWARD_CONTROLLERS = ("nodelifecycle", "taint-eviction-controller")
NAMESPACE = "failure"
APP = "victim"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
WAIT = 240.0
"""Seconds to wait for each step (a deadline that fails the test, not a measurement)."""


def start(side: str, tmp_path_factory: pytest.TempPathFactory) -> LocalCluster:
    require_real_nodes()
    cfg = ClusterConfig(
        name=f"steward-test-failure-{side}-{os.getpid()}",
        state_dir=tmp_path_factory.mktemp(f"failure-{side}"),
        nodes=0,
        real_nodes=2,
        steward=side == "steward",
        steward_controllers=STEWARD_CONTROLLERS if side == "steward" else None,
        kcm_flags=(f"--node-monitor-grace-period={GRACE}s",),
        die_with_parent=True,
    )
    return LocalCluster.up(cfg, progress=Progress(interval=15.0))


def deployment(first_node: str) -> dict[str, Any]:
    tolerations = [
        {"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"},
        *(
            {
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": TOLERATION,
            }
            for key in (NOT_READY, UNREACHABLE)
        ),
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "tolerations": tolerations,
                    "affinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "preference": {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/hostname",
                                                "operator": "In",
                                                "values": [first_node],
                                            }
                                        ]
                                    },
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "pause",
                            "image": "registry.k8s.io/pause:3.10.2",
                            "imagePullPolicy": "Never",
                        }
                    ],
                },
            },
        },
    }


def _time(text: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


@dataclass(frozen=True)
class PodState:
    node: str
    phase: str
    ready: bool
    deleting: bool


@dataclass(frozen=True)
class Seen:
    """One reading: the first node's Ready status and its taints (but the real-node one),
    and each pod of the Deployment by name."""

    ready: str
    taints: frozenset[tuple[str, str]]
    pods: dict[str, PodState] = field(hash=False)


@dataclass
class Story:
    """What one side's cluster went through."""

    first: str
    other: str
    readings: list[tuple[float, Seen]] = field(default_factory=list)
    node: dict[str, Any] = field(default_factory=dict)
    """The first node as it was when first seen with the ``unreachable`` NoExecute taint."""
    deleted_pod: dict[str, Any] = field(default_factory=dict)
    """The first pod as it was when it was seen being deleted."""

    def nodes(self, pod: str) -> str:
        """Which node (``first``/``other``) a pod runs on, by role."""
        return {self.first: "first", self.other: "other"}.get(pod, pod or "-")

    def conditions(self) -> list[str]:
        return _collapse(s.ready for _, s in self.readings)

    def taint_sets(self) -> list[frozenset[tuple[str, str]]]:
        return _collapse(s.taints for _, s in self.readings)

    def pod_story(self, index: int) -> list[tuple[str, str, bool, bool]]:
        """The states (node, phase, ready, deleting) of the ``index``-th pod to appear, in
        order; ``("gone", ...)`` once it no longer exists."""
        order: list[str] = []
        for _, seen in self.readings:
            order += [name for name in seen.pods if name not in order]
        name = order[index]
        states: list[tuple[str, str, bool, bool]] = []
        appeared = False
        for _, seen in self.readings:
            pod = seen.pods.get(name)
            if pod is None:
                if appeared:
                    states.append(("gone", "", False, False))
                continue
            appeared = True
            states.append((self.nodes(pod.node), pod.phase, pod.ready, pod.deleting))
        return _collapse(states)


def _collapse(items: Any) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def read(cluster: LocalCluster, story: Story) -> Seen:
    node = cluster.api("GET", f"/api/v1/nodes/{story.first}")
    ready = next(
        (c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), "-"
    )
    taints = frozenset(
        (t["key"], t["effect"])
        for t in node["spec"].get("taints") or []
        if t["key"] != REAL_NODE_LABEL
    )
    pods: dict[str, PodState] = {}
    listed = cluster.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    mine = [p for p in listed if (p["metadata"].get("labels") or {}).get("app") == APP]
    for pod in sorted(mine, key=lambda p: p["metadata"]["creationTimestamp"]):
        status = pod.get("status") or {}
        pods[pod["metadata"]["name"]] = PodState(
            node=pod["spec"].get("nodeName", ""),
            phase=status.get("phase", ""),
            ready=any(
                c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
            ),
            deleting="deletionTimestamp" in pod["metadata"],
        )
        if pods[pod["metadata"]["name"]].deleting and not story.deleted_pod:
            story.deleted_pod = pod
    if (UNREACHABLE, "NoExecute") in taints and not story.node:
        story.node = node
    return Seen(ready, taints, pods)


def record_until(
    cluster: LocalCluster, story: Story, done: Callable[[Seen], bool], what: str
) -> None:
    started = time.monotonic()
    while True:
        seen = read(cluster, story)
        story.readings.append((time.monotonic(), seen))
        if done(seen):
            return
        if time.monotonic() - started > WAIT:
            raise AssertionError(f"not {what} after {WAIT:.0f} s; last reading: {seen}")
        time.sleep(0.5)


def run_story(cluster: LocalCluster) -> Story:
    first, other = (n.name for n in cluster.state.real_nodes)
    story = Story(first, other)
    cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, ok=(201,))
    cluster.api(
        "POST", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", deployment(first), ok=(201,)
    )

    def running_on(node: str) -> Callable[[Seen], bool]:
        return lambda s: any(
            p.node == node and p.phase == "Running" and p.ready and not p.deleting
            for p in s.pods.values()
        )

    record_until(cluster, story, lambda s: s.ready == "True" and running_on(first)(s), "running")
    story.readings = story.readings[-1:]  # the story starts with the pod running
    cluster.stop_kubelet(first)
    record_until(cluster, story, running_on(other), "replaced on the other node")
    cluster.start_kubelet(first)
    record_until(
        cluster,
        story,
        lambda s: s.ready == "True" and not s.taints and len(s.pods) == 1,
        "Ready and untainted with the deleted pod gone",
    )
    return story


@pytest.fixture(scope="module")
def stories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Story]:
    told: dict[str, Story] = {}
    for side in ("steward", "upstream"):
        cluster = start(side, tmp_path_factory)
        try:
            told[side] = run_story(cluster)
        finally:
            cluster.down(progress=Progress(quiet=True))
    return told


def _ready_condition(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize("side", ["steward", "upstream"])
def test_the_dead_node_goes_unknown_is_tainted_and_its_pod_is_replaced(
    stories: dict[str, Story], side: str
) -> None:
    story = stories[side]
    assert story.conditions() == ["True", "Unknown", "True"], story.conditions()
    tainted = {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    assert any(tainted <= taints for taints in story.taint_sets()), story.taint_sets()
    assert story.taint_sets()[-1] == frozenset()
    # Unknown no sooner than the grace period after the last heartbeat (the Lease's
    # renewal or the status's, the later), with upstream's reason.
    ready = _ready_condition(story.node)
    assert ready["reason"] == "NodeStatusUnknown", ready
    assert ready["message"] == "Kubelet stopped posting node status.", ready
    heartbeat = _time(ready["lastHeartbeatTime"])
    changed = _time(ready["lastTransitionTime"])
    assert heartbeat is not None and changed is not None
    assert (changed - heartbeat).total_seconds() >= GRACE - 1, ready
    # The pod: marked not ready, then deleted (DisruptionTarget first) no sooner than its
    # toleration after the NoExecute taint, then gone once the kubelet came back.
    original = story.pod_story(0)
    assert original[0] == ("first", "Running", True, False), original
    assert ("first", "Running", False, False) in original, original
    assert original[-1] == ("gone", "", False, False), original
    deleted = story.deleted_pod
    assert any(
        c["type"] == "DisruptionTarget" and c["reason"] == "DeletionByTaintManager"
        for c in deleted["status"].get("conditions", [])
    ), deleted["status"]
    noexecute = next(
        t
        for t in story.node["spec"]["taints"]
        if (t["key"], t["effect"]) == (UNREACHABLE, "NoExecute")
    )
    added = _time(noexecute.get("timeAdded"))
    asked = _time(deleted["metadata"]["deletionTimestamp"])
    assert added is not None and asked is not None, (noexecute, deleted["metadata"])
    # deletionTimestamp is when the delete was asked plus the pod's grace period.
    asked -= datetime.timedelta(
        seconds=int(deleted["metadata"].get("deletionGracePeriodSeconds", 0))
    )
    assert (asked - added).total_seconds() >= TOLERATION - 1, (added, asked)
    replacement = story.pod_story(1)
    assert replacement[-1] == ("other", "Running", True, False), replacement


def test_both_sides_tell_the_same_story(stories: dict[str, Story]) -> None:
    steward, upstream = stories["steward"], stories["upstream"]
    assert steward.conditions() == upstream.conditions()
    assert _settled(steward.taint_sets()) == _settled(upstream.taint_sets())
    assert _until_deleted(steward.pod_story(0)) == _until_deleted(upstream.pod_story(0))
    assert steward.pod_story(1)[-1] == upstream.pod_story(1)[-1]


def _settled(taint_sets: list[frozenset[tuple[str, str]]]) -> list[frozenset[tuple[str, str]]]:
    """The taint sets without the transient ones: the order in which the NoSchedule and
    the NoExecute taint of one condition are added is a race in upstream's controller too
    (two workers), so only none and both count."""
    kept = [
        t
        for t in taint_sets
        if not t or {(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")} <= t
    ]
    return _collapse(kept)


def _until_deleted(states: list[tuple[str, str, bool, bool]]) -> list[tuple[str, str, bool, bool]]:
    """A pod's states up to its first seen being deleted, then its end: what the kubelet
    reports while it finishes a deleted pod depends on when a reading falls."""
    for index, state in enumerate(states):
        if state[3]:
            return [*states[: index + 1], states[-1]]
    return states
