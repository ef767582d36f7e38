"""Upstream's DaemonSet integration scenarios (``test/integration/daemonset``), each run
under Steward's controller and under upstream's at once, then compared.

Every scenario is one function of a :class:`~.conftest.Side`, ported step by step with
upstream's checks (pods created and marked Running and Ready by the test, as nothing runs
them; status counts; tolerations; collision count; revision dedup). It runs on both
sides in parallel: upstream's run shows the checks hold for upstream's controller. Then
the differential: the two sides must reach the same state, compared field by field —
the DaemonSet's status, which pods each node has (by revision hash, template generation,
phase and readiness), and the ControllerRevisions (name, number, labels, data, owner).
Last, upstream's ``cleanupDaemonSets``: a node selector that matches nothing, and every
daemon pod must go.

Pod names, UIDs and timestamps differ between the planes and are left out; the
revisions' names are their template's hash, so they are compared as they are.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from steward.kube import ApiStatusError
from steward.runtime.hashing import pod_template_hash
from tests.controllers.daemonset.conftest import Side

pytestmark = [pytest.mark.integration]

Scenario = Callable[[Side], None]
WITHIN = 60.0
"""Seconds a check may take to hold on a side (upstream's tests poll for 60 s)."""
HASH = "controller-revision-hash"
GENERATION = "pod-template-generation"
ZERO = 0

ON_DELETE: dict[str, Any] = {"type": "OnDelete"}
ROLLING: dict[str, Any] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
STRATEGIES = pytest.mark.parametrize(
    "strategy", [ON_DELETE, ROLLING], ids=["OnDelete", "RollingUpdate"]
)


def new_daemonset(name: str, strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    """Upstream's ``newDaemonSet``: selector and labels ``name=test``, history limit 2,
    OnDelete, one container, no termination grace."""
    labels = {"name": "test"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "revisionHistoryLimit": 2,
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": dict(strategy or ON_DELETE),
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "containers": [{"name": "foo", "image": "bar"}],
                    "terminationGracePeriodSeconds": ZERO,
                },
            },
        },
    }


# Upstream's checks ---------------------------------------------------------------------
def wait_for(side: Side, check: Callable[[], Any], what: str, within: float = WITHIN) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.name}: timed out waiting for {what} (last: {last!r})")
        time.sleep(0.2)


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def check_owner(side: Side, pod: dict[str, Any]) -> None:
    refs = pod["metadata"].get("ownerReferences") or []
    name = pod["metadata"]["name"]
    assert len(refs) == 1, f"{side.name}: pod {name} has {len(refs)} owner references"
    assert refs[0]["kind"] == "DaemonSet", f"{side.name}: pod {name} owned by {refs[0]}"
    assert refs[0].get("controller") is True, f"{side.name}: pod {name}: not a controller ref"


def mark_bound_ready(side: Side) -> tuple[int, int]:
    """Play the kubelet as upstream's tests do: every daemon pod bound to a node and not
    in a terminal phase is marked Running and Ready. Returns the number of pods not in a
    terminal phase, and of those the number Ready now (marked here or before)."""
    live = ready = 0
    for pod in side.pods():
        check_owner(side, pod)
        if _terminal(pod):
            continue
        live += 1
        if _ready(pod):
            ready += 1
        elif (pod.get("spec") or {}).get("nodeName"):
            side.set_pod_status(
                pod,
                {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            )
            ready += 1
    return live, ready


def pods_marked_ready(side: Side, number: int, *, unschedulable: int = 0) -> None:
    """``validateDaemonSetPodsAndMarkReady``: ``number`` pods not in a terminal phase,
    all but ``unschedulable`` of them bound by the scheduler and marked Running and Ready
    (a pod not bound yet is waited for: nothing would mark it later)."""
    wait_for(
        side,
        lambda: mark_bound_ready(side) == (number, number - unschedulable),
        f"{number} daemon pods, {number - unschedulable} of them bound and marked ready",
    )


def ready_status(side: Side, name: str, number: int) -> None:
    """``validateDaemonSetStatus``: ``status.numberReady`` reaches ``number``. Pods bound
    meanwhile are marked ready too (upstream's checks poll once a second, by when the
    scheduler has bound a new pod; here the kubelet's part is played throughout)."""

    def check() -> bool:
        mark_bound_ready(side)
        return bool((side.ds(name).get("status") or {}).get("numberReady", 0) == number)

    wait_for(side, check, f"status.numberReady == {number}")


def pods_active(side: Side, number: int) -> None:
    """``validateDaemonSetPodsActive``: ``number`` pods Running or Pending."""

    def check() -> bool:
        pods = side.pods()
        for pod in pods:
            check_owner(side, pod)
        active = [p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Pending")]
        return len(active) == number

    wait_for(side, check, f"{number} active daemon pods")


def status_equals(side: Side, name: str, field: str, number: int) -> None:
    """``validateDaemonSetStatus`` (numberReady) and ``validateUpdatedNumberScheduled``.
    As in :func:`ready_status`, pods bound meanwhile are marked ready: a rolling update
    with surge may have started its next pod after the last count of ready pods held,
    and only a kubelet's part played throughout lets it finish."""

    def check() -> bool:
        mark_bound_ready(side)
        return bool((side.ds(name).get("status") or {}).get(field, 0) == number)

    wait_for(side, check, f"status.{field} == {number}")


def tolerations_with_prefix(side: Side, expected: list[dict[str, Any]], prefix: str) -> None:
    """``validateDaemonSetPodsTolerations``: every pod's tolerations with the prefix are
    exactly ``expected``."""
    for pod in side.pods():
        check_owner(side, pod)
        got = [
            t for t in pod["spec"].get("tolerations") or () if t.get("key", "").startswith(prefix)
        ]
        assert got == expected, f"{side.name}: pod {pod['metadata']['name']} tolerates {got}"


def cleanup_daemonset(side: Side, name: str) -> None:
    """``cleanupDaemonSets``: a node selector no node has, every daemon pod gone, then
    the DaemonSet deleted."""

    def nowhere(ds: dict[str, Any]) -> None:
        ds["spec"]["template"]["spec"]["nodeSelector"] = {str(uuid.uuid4()): str(uuid.uuid4())}

    ds = side.update_ds(name, nowhere)
    if (ds["spec"]["template"].get("metadata") or {}).get("finalizers"):
        # Upstream's RemovePodFinalizersInNamespace.
        for pod in side.pods():
            side.kube.request(
                "PATCH",
                f"{side.pods_path}/{pod['metadata']['name']}",
                {"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )

    def gone() -> bool:
        st = side.ds(name).get("status") or {}
        return int(st.get("currentNumberScheduled", 0)) + int(st.get("numberMisscheduled", 0)) == 0

    wait_for(side, gone, "every daemon pod deleted after the node selector changed", 30.0)
    side.kube.request("DELETE", f"{side.daemonsets}/{name}")


# The differential ----------------------------------------------------------------------
_STATUS = (
    "currentNumberScheduled",
    "desiredNumberScheduled",
    "numberAvailable",
    "numberMisscheduled",
    "numberReady",
    "numberUnavailable",
    "updatedNumberScheduled",
    "observedGeneration",
    "collisionCount",
)


def _target(pod: dict[str, Any]) -> str:
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    fields = [
        f for t in required.get("nodeSelectorTerms") or () for f in t.get("matchFields") or ()
    ]
    return ",".join(v for f in fields for v in f.get("values") or ()) or "?"


def snapshot(side: Side, name: str, nodes: bool = True) -> dict[str, Any]:
    """What the two sides must agree on (with ``nodes`` False, the pods regardless of the
    nodes they are on)."""
    ds = side.ds(name)
    status = {k: (ds.get("status") or {}).get(k) for k in _STATUS}
    pods: dict[str, list[tuple[Any, ...]]] = {}
    for pod in side.pods():
        labels = pod["metadata"].get("labels") or {}
        entry = (
            labels.get(HASH),
            labels.get(GENERATION),
            (pod.get("status") or {}).get("phase"),
            _ready(pod),
            bool(pod["metadata"].get("deletionTimestamp")),
            json.dumps(pod["spec"].get("affinity"), sort_keys=True) if nodes else "",
            json.dumps(pod["spec"].get("tolerations"), sort_keys=True),
        )
        pods.setdefault(_target(pod) if nodes else "any", []).append(entry)
    revisions = []
    for rev in side.revisions():
        meta = rev["metadata"]
        owners = [
            (o["kind"], o["name"], o.get("controller")) for o in meta.get("ownerReferences") or ()
        ]
        revisions.append(
            (meta["name"], rev.get("revision"), meta.get("labels"), rev.get("data"), owners)
        )
    return {
        "status": status,
        "pods by node": {node: sorted(map(repr, entries)) for node, entries in pods.items()},
        "revisions": sorted(map(repr, revisions)),
    }


def run_both(
    steward: Side,
    upstream: Side,
    scenario: Scenario,
    name: str = "foo",
    *,
    cleanup: bool = True,
    nodes: bool = True,
) -> None:
    """Run ``scenario`` on both sides at once; then both must reach the same state (with
    ``nodes`` False, regardless of which nodes the pods are on); then, where upstream's
    test has it, upstream's cleanup on both."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = {side.name: pool.submit(scenario, side) for side in (upstream, steward)}
        errors = {n: f.exception() for n, f in runs.items()}
    # Upstream's failure first: it says the scenario's checks are wrong, not Steward.
    for n in ("upstream", "steward"):
        if errors[n] is not None:
            raise AssertionError(f"the scenario failed on the {n} side: {errors[n]}") from errors[n]
    deadline = time.monotonic() + 30.0
    while True:
        ours, theirs = snapshot(steward, name, nodes), snapshot(upstream, name, nodes)
        if ours == theirs:
            break
        if time.monotonic() > deadline:
            diff = {
                k: {"steward": ours[k], "upstream": theirs[k]} for k in ours if ours[k] != theirs[k]
            }
            pytest.fail(f"the sides differ:\n{json.dumps(diff, indent=1, default=str)}")
        time.sleep(0.5)
    if not cleanup:
        return
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(cleanup_daemonset, s, name) for s in (upstream, steward)]:
            done.result()


# The scenarios -------------------------------------------------------------------------
@STRATEGIES
def test_one_node_daemon_launches_pod(
    steward: Side, upstream: Side, strategy: dict[str, Any]
) -> None:
    def scenario(side: Side) -> None:
        side.create_ds(new_daemonset("foo", strategy))
        side.add_node("single-node")
        pods_marked_ready(side, 1)
        ready_status(side, "foo", 1)

    run_both(steward, upstream, scenario)


@STRATEGIES
def test_simple_daemonset_launches_pods(
    steward: Side, upstream: Side, strategy: dict[str, Any]
) -> None:
    def scenario(side: Side) -> None:
        side.create_ds(new_daemonset("foo", strategy))
        for i in range(5):
            side.add_node(f"node-{i}")
        pods_marked_ready(side, 5)
        ready_status(side, "foo", 5)

    run_both(steward, upstream, scenario)


@pytest.mark.parametrize(
    ("phase", "finalizer"),
    [("Succeeded", False), ("Failed", False), ("Succeeded", True)],
    ids=["Succeeded", "Failed", "Succeeded-with-finalizer"],
)
@STRATEGIES
def test_restarts_pods_on_terminal_phase(
    steward: Side, upstream: Side, strategy: dict[str, Any], phase: str, finalizer: bool
) -> None:
    def scenario(side: Side) -> None:
        ds = new_daemonset("restart-terminal-pod", strategy)
        if finalizer:
            ds["spec"]["template"]["metadata"]["finalizers"] = ["test.k8s.io/finalizer"]
        side.create_ds(ds)
        for i in range(3):
            side.add_node(f"node-{i}")
        pods_marked_ready(side, 3)
        ready_status(side, "restart-terminal-pod", 3)
        pod = sorted(side.pods(), key=lambda p: _target(p))[0]
        side.set_pod_status(pod, {**pod["status"], "phase": phase})
        pods_active(side, 3)
        pods_marked_ready(side, 3)
        ready_status(side, "restart-terminal-pod", 3)

    run_both(steward, upstream, scenario, "restart-terminal-pod")


@STRATEGIES
def test_node_selector_launches_pods(
    steward: Side, upstream: Side, strategy: dict[str, Any]
) -> None:
    def scenario(side: Side) -> None:
        ds = new_daemonset("foo", strategy)
        ds["spec"]["template"]["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["test"]}
                            ]
                        },
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                            ]
                        },
                    ]
                }
            }
        }
        side.create_ds(ds)
        for i in range(6):
            side.add_node(f"node-{i}", {"zone": "test"} if i in (2, 3) else None)
        pods_marked_ready(side, 3)
        ready_status(side, "foo", 3)

    run_both(steward, upstream, scenario)


@STRATEGIES
def test_not_ready_node_does_launch_pod(
    steward: Side, upstream: Side, strategy: dict[str, Any]
) -> None:
    def scenario(side: Side) -> None:
        side.create_ds(new_daemonset("foo", strategy))
        side.add_node("single-node", conditions=[{"type": "Ready", "status": "False"}])
        pods_marked_ready(side, 1)
        ready_status(side, "foo", 1)

    run_both(steward, upstream, scenario)


@STRATEGIES
def test_insufficient_capacity_node(
    steward: Side, upstream: Side, strategy: dict[str, Any]
) -> None:
    def scenario(side: Side) -> None:
        ds = new_daemonset("foo", strategy)
        ds["spec"]["template"]["spec"] = {
            "containers": [
                {
                    "name": "foo",
                    "image": "bar",
                    "resources": {"requests": {"memory": "120M", "cpu": "75m"}},
                }
            ],
            "terminationGracePeriodSeconds": ZERO,
        }
        side.create_ds(ds)
        side.add_node(
            "node-with-limited-memory",
            allocatable={"memory": "100M", "cpu": "200m", "pods": "100"},
        )
        pods = wait_for(side, lambda: side.pods() if len(side.pods()) == 1 else None, "1 pod")

        def unschedulable() -> bool:
            pod = side.kube.request("GET", f"{side.pods_path}/{pods[0]['metadata']['name']}")
            return any(
                c.get("type") == "PodScheduled"
                and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"
                for c in (pod.get("status") or {}).get("conditions") or ()
            )

        wait_for(side, unschedulable, "the pod unschedulable", 30.0)
        side.add_node(
            "node-with-enough-memory",
            allocatable={"memory": "200M", "cpu": "2000m", "pods": "100"},
        )
        # Two pods, one of them scheduled.
        pods_marked_ready(side, 2, unschedulable=1)
        ready_status(side, "foo", 1)

    run_both(steward, upstream, scenario)


def settled(side: Side, name: str, pods: int) -> bool:
    """Every pod bound and the status showing them, for the DaemonSet's generation."""
    ds = side.ds(name)
    st = ds.get("status") or {}
    bound = [p for p in side.pods() if p["spec"].get("nodeName")]
    return (
        len(bound) == pods
        and st.get("observedGeneration") == ds["metadata"]["generation"]
        and st.get("currentNumberScheduled") == pods
    )


def _revision_of(side: Side, ds: dict[str, Any]) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        for rev in side.revisions():
            if any(
                o["uid"] == ds["metadata"]["uid"]
                for o in rev["metadata"].get("ownerReferences") or ()
            ):
                return rev
        return None

    result: dict[str, Any] = wait_for(side, found, "the DaemonSet's ControllerRevision", 10.0)
    return result


def _fake_revision(side: Side, ds: dict[str, Any], revision: dict[str, Any]) -> str:
    """A revision owned by ``ds`` under the name of the template with a termination grace
    of 1 s, holding the current template's data (upstream's "fake" revision); its hash."""
    template = json.loads(json.dumps(ds["spec"]["template"]))
    template["spec"]["terminationGracePeriodSeconds"] = 1
    digest = pod_template_hash(template, (ds.get("status") or {}).get("collisionCount"))
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": ds["metadata"]["name"],
        "uid": ds["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": f"{ds['metadata']['name']}-{digest}",
            "labels": {**template["metadata"]["labels"], HASH: digest},
            "ownerReferences": [owner],
        },
        "data": revision["data"],
        "revision": revision["revision"] + 1,
    }
    if ds["metadata"].get("annotations"):
        body["metadata"]["annotations"] = ds["metadata"]["annotations"]
    side.kube.request("POST", side.revisions_path, body)
    return digest


def test_launch_with_hash_collision(steward: Side, upstream: Side) -> None:
    """An update whose revision name is taken by another template raises the collision
    count and still rolls out."""

    def scenario(side: Side) -> None:
        side.add_node("single-node")
        created = side.create_ds(new_daemonset("foo", ROLLING))
        revision = _revision_of(side, created)
        # Nothing left to sync on: the pod is bound and the status written. (A sync between
        # the fake revision and the update would merge the two duplicates first.)
        wait_for(side, lambda: settled(side, "foo", 1), "the DaemonSet settled", 10.0)
        ds = side.ds("foo")
        before = (ds.get("status") or {}).get("collisionCount") or 0
        _fake_revision(side, ds, revision)

        def grace_one(ds: dict[str, Any]) -> None:
            ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1

        side.update_ds("foo", grace_one)
        wait_for(
            side,
            lambda: any(p["spec"].get("terminationGracePeriodSeconds") == 1 for p in side.pods()),
            "a pod of the updated template",
            10.0,
        )
        assert (side.ds("foo").get("status") or {}).get("collisionCount") == before + 1

    # Upstream's test has no cleanup: the new pod (a grace period of 1 s) would stay
    # terminating without a kubelet.
    run_both(steward, upstream, scenario, cleanup=False)


def test_pod_label_updated_after_dedup_of_current_histories(steward: Side, upstream: Side) -> None:
    """A second revision of the current template, numbered higher under another hash: the
    pods are relabelled with its hash and the older duplicate deleted."""

    def scenario(side: Side) -> None:
        side.add_node("single-node")
        created = side.create_ds(new_daemonset("foo", ROLLING))
        revision = _revision_of(side, created)
        ds = side.ds("foo")
        new_hash = _fake_revision(side, ds, revision)
        new_name = f"foo-{new_hash}"
        side.add_node("second-node")  # a sync

        def relabelled() -> bool:
            pods = [
                p
                for p in side.pods()
                if any(
                    o["uid"] == ds["metadata"]["uid"]
                    for o in p["metadata"].get("ownerReferences") or ()
                )
            ]
            return bool(pods) and all(p["metadata"]["labels"].get(HASH) == new_hash for p in pods)

        wait_for(side, relabelled, "the pods relabelled with the kept revision's hash", 10.0)

        def deduplicated() -> bool:
            return [r["metadata"]["name"] for r in side.revisions()] == [new_name]

        wait_for(side, deduplicated, f"the duplicate revision deleted, {new_name} kept", 10.0)

    run_both(steward, upstream, scenario, cleanup=False)  # none upstream either


@STRATEGIES
def test_tainted_node(steward: Side, upstream: Side, strategy: dict[str, Any]) -> None:
    def scenario(side: Side) -> None:
        side.create_ds(new_daemonset("foo", strategy))
        side.add_node(
            "node-with-taint", taints=[{"key": "key1", "value": "val1", "effect": "NoSchedule"}]
        )
        side.add_node("node-without-taint")
        pods_marked_ready(side, 1)
        ready_status(side, "foo", 1)
        side.set_taints("node-with-taint", [])
        pods_marked_ready(side, 2)
        ready_status(side, "foo", 2)

    run_both(steward, upstream, scenario)


@STRATEGIES
def test_unschedulable_node_does_launch_pod(
    steward: Side, upstream: Side, strategy: dict[str, Any]
) -> None:
    def scenario(side: Side) -> None:
        ds = new_daemonset("foo", strategy)
        ds["spec"]["template"]["spec"]["hostNetwork"] = True
        side.create_ds(ds)
        side.add_node(
            "unschedulable-node",
            unschedulable=True,
            taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
        )
        side.add_node(
            "network-unavailable-node",
            conditions=[
                {"type": "Ready", "status": "False"},
                {"type": "NetworkUnavailable", "status": "True"},
            ],
            taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}],
        )
        pods_marked_ready(side, 2)
        ready_status(side, "foo", 2)

    run_both(steward, upstream, scenario)


@STRATEGIES
def test_status_updated_despite_pod_creation_failure(
    steward: Side, upstream: Side, strategy: dict[str, Any]
) -> None:
    """Upstream's admission that refuses pods past the second is a ResourceQuota of two
    pods here: a real refusal by the API server."""

    def scenario(side: Side) -> None:
        quota = {"metadata": {"name": "two-pods"}, "spec": {"hard": {"pods": "2"}}}
        side.kube.request("POST", f"/api/v1/namespaces/{side.ns}/resourcequotas", quota)
        wait_for(
            side,
            lambda: (
                side.kube.request(
                    "GET", f"/api/v1/namespaces/{side.ns}/resourcequotas/two-pods"
                ).get("status")
                or {}
            ).get("hard"),
            "the quota's status",
        )
        side.create_ds(new_daemonset("foo", strategy))
        for i in range(5):
            side.add_node(f"node-{i}")
        pods_marked_ready(side, 2)
        ready_status(side, "foo", 2)
        status_equals(side, "foo", "desiredNumberScheduled", 5)
        status_equals(side, "foo", "currentNumberScheduled", 2)

    # Which two nodes get the pods the quota allows depends on the order creations are
    # tried in, which upstream takes from a Go map.
    run_both(steward, upstream, scenario, nodes=False)


def test_rolling_update_with_tolerations(steward: Side, upstream: Side) -> None:
    """maxSurge 1, maxUnavailable 0: pods on nodes the new template no longer tolerates
    stay until the new ones are available elsewhere."""

    def scenario(side: Side) -> None:
        for i in range(6):
            key = "zone-y" if i < 2 else "zone-z" if i < 4 else "zone-common"
            side.add_node(f"node-{i}", taints=[{"key": key, "effect": "NoSchedule"}])
        ds = new_daemonset("foo")
        ds["spec"]["updateStrategy"] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
        }

        def exists(key: str) -> dict[str, Any]:
            return {"key": key, "operator": "Exists"}

        tolerations = [exists("zone-y"), exists("zone-common")]
        ds["spec"]["template"]["spec"]["tolerations"] = tolerations
        side.create_ds(ds)
        pods_active(side, 4)
        pods_marked_ready(side, 4)
        ready_status(side, "foo", 4)
        status_equals(side, "foo", "updatedNumberScheduled", 4)
        tolerations_with_prefix(side, tolerations, "zone-")

        def tolerate(wanted: list[dict[str, Any]] | None) -> Callable[[dict[str, Any]], None]:
            def change(ds: dict[str, Any]) -> None:
                ds["spec"]["template"]["spec"]["tolerations"] = wanted

            return change

        # Two new pods Pending on zone-z, one surged on zone-common, the two on zone-y
        # running until the others are available.
        tolerations = [exists("zone-z"), exists("zone-common")]
        side.update_ds("foo", tolerate(tolerations))
        pods_active(side, 7)
        pods_marked_ready(side, 4)
        ready_status(side, "foo", 4)
        status_equals(side, "foo", "updatedNumberScheduled", 4)
        tolerations_with_prefix(side, tolerations, "zone-")

        tolerations = [exists("zone-y"), exists("zone-z"), exists("zone-common")]
        side.update_ds("foo", tolerate(tolerations))
        pods_active(side, 7)
        pods_marked_ready(side, 6)
        ready_status(side, "foo", 6)
        status_equals(side, "foo", "updatedNumberScheduled", 6)
        tolerations_with_prefix(side, tolerations, "zone-")

        side.update_ds("foo", tolerate(None))
        pods_active(side, 0)
        ready_status(side, "foo", 0)
        status_equals(side, "foo", "updatedNumberScheduled", 0)

    run_both(steward, upstream, scenario)


def test_surge_keeps_old_pods_until_new_ones_are_available(steward: Side, upstream: Side) -> None:
    """maxSurge 2 over four nodes: a template change starts two new pods beside the old
    ones; an old pod goes only once its node's new pod is available; then the next two."""

    def scenario(side: Side) -> None:
        for i in range(4):
            side.add_node(f"node-{i}")
        ds = new_daemonset("foo")
        ds["spec"]["updateStrategy"] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 2},
        }
        side.create_ds(ds)
        pods_marked_ready(side, 4)
        ready_status(side, "foo", 4)
        status_equals(side, "foo", "numberAvailable", 4)

        def image(ds: dict[str, Any]) -> None:
            ds["spec"]["template"]["spec"]["containers"][0]["image"] = "bar:2"

        side.update_ds("foo", image)
        updated = side.ds("foo")

        def surged() -> bool:
            pods = side.pods()
            new = [p for p in pods if p["spec"]["containers"][0]["image"] == "bar:2"]
            old = [p for p in pods if p["spec"]["containers"][0]["image"] == "bar"]
            return len(new) == 2 and len(old) == 4

        wait_for(side, surged, "two new pods beside the four old ones")
        assert updated["metadata"]["generation"] == 2
        # Nothing more while the two new pods are not ready.
        time.sleep(2.0)
        assert surged(), f"{side.name}: the surge went past maxSurge before readiness"
        pods_marked_ready(side, 4)
        status_equals(side, "foo", "updatedNumberScheduled", 4)
        wait_for(
            side,
            lambda: all(p["spec"]["containers"][0]["image"] == "bar:2" for p in side.pods()),
            "only pods of the new template",
        )

    run_both(steward, upstream, scenario)


def test_revision_history_limit(steward: Side, upstream: Side) -> None:
    """Three template changes under OnDelete with a history limit of 2: the revisions
    of templates no pod runs are deleted oldest first, the one the pods run is kept."""

    def scenario(side: Side) -> None:
        side.add_node("single-node")
        side.create_ds(new_daemonset("foo"))
        pods_marked_ready(side, 1)
        for version in ("2", "3", "4"):

            def label(ds: dict[str, Any], version: str = version) -> None:
                ds["spec"]["template"]["metadata"]["labels"]["version"] = version

            side.update_ds("foo", label)
            wait_for(
                side,
                lambda: (
                    (side.ds("foo").get("status") or {}).get("observedGeneration")
                    == side.ds("foo")["metadata"]["generation"]
                ),
                "the update observed",
            )
        # OnDelete: the pod still runs the first template; its revision stays.
        wait_for(side, lambda: len(side.revisions()) == 3, "three revisions left")

    run_both(steward, upstream, scenario)


def test_selecting_all_is_refused_by_the_api_server(steward: Side) -> None:
    """apps/v1 refuses an empty selector, so the controller's SelectingAll guard only
    matters for objects from elsewhere; the refusal is the API server's."""
    ds = new_daemonset("all")
    ds["spec"]["selector"] = {}
    with pytest.raises(ApiStatusError) as refused:
        steward.create_ds(ds)
    assert refused.value.status == 422
