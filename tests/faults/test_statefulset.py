"""The StatefulSet controller SIGKILLed, and the informer restarted, in the middle of a
rolling update: the standby (or the controller itself) finishes it with the right
revisions.

Steward's informer, manager and two StatefulSet controller instances (one active, one
standby) run as processes (``stack.py``) against a control plane of this module's own
whose kube-controller-manager has no statefulset controller (3 kwok nodes make pods
Running and Ready). A set of six pods is rolled out, then its template changed; once the
update has replaced some pods but not all, the active instance is SIGKILLed (or the
informer killed and started again). The end
state must be the one upstream's controller reaches for that history, which is known
exactly: every pod of the second template's revision, the update complete (current =
update revision), two ControllerRevisions numbered 1 and 2 and named
``<set>-<hash>`` with upstream's hash (:mod:`steward.controllers.statefulset.history`,
verified against upstream's code by ``test_history_unit.py``), no pod deleted twice
over (each ordinal exists once).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.controllers.statefulset import history
from steward.kube import KubeClient, NotFoundError, load_access
from tests.conftest import local_cluster
from tests.faults.stack import Stack
from tests.polling import wait_for

pytestmark = pytest.mark.integration

REPLICAS = 6
WITHIN = 120.0
APPS = "/apis/apps/v1"


@pytest.fixture(scope="module")
def sts_fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of this module's own without upstream's statefulset controller."""
    yield from local_cluster(tmp_path_factory, "sts-faults", controllers="*,-statefulset")


@pytest.fixture
def admin(sts_fault_cluster: LocalCluster) -> Iterator[KubeClient]:
    api = KubeClient(load_access(str(sts_fault_cluster.kubeconfig)), user_agent="sts-fault-test")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def stack(sts_fault_cluster: LocalCluster, tmp_path: Path) -> Iterator[Stack]:
    running = Stack(sts_fault_cluster, tmp_path / "logs")
    try:
        running.start_informer()
        running.start_manager()
        first = running.start_controller("statefulset", flags=["--workers=5"])
        running.wait_holder("statefulset", first)
        running.start_controller("statefulset", flags=["--workers=5"])
        running.wait_instances("statefulset", 2)
        yield running
    finally:
        running.stop()


def body(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": REPLICAS,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": image}],
                },
            },
        },
    }


def pods(kube: KubeClient, ns: str) -> list[dict[str, Any]]:
    found = kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
    return sorted(found.get("items") or [], key=lambda p: p["metadata"]["name"])


def revision_of(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get("controller-revision-hash", ""))


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def done(kube: KubeClient, ns: str, revision: str) -> dict[str, Any] | None:
    """The set once every pod is ready and of ``revision`` and the update complete."""
    sts = kube.request("GET", f"{APPS}/namespaces/{ns}/statefulsets/web")
    status = sts.get("status") or {}
    live = pods(kube, ns)
    if (
        len(live) != REPLICAS
        or not all(ready(p) and revision_of(p) == revision for p in live)
        or status.get("observedGeneration") != sts["metadata"]["generation"]
        or status.get("currentRevision") != revision
        or status.get("updateRevision") != revision
        or status.get("updatedReplicas") != REPLICAS
        or status.get("readyReplicas") != REPLICAS
    ):
        return None
    return dict(sts)


def rollout_with_fault(
    stack: Stack, admin: KubeClient, fault: Callable[[], None], what: str
) -> list[str]:
    """Roll a set of :data:`REPLICAS` pods out, change its template, let ``fault`` strike
    once two to five pods are updated, and check the end state (see the module docs);
    the services that exited."""
    ns = f"sts-fault-{uuid.uuid4().hex[:6]}"
    admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        created = admin.request("POST", f"{APPS}/namespaces/{ns}/statefulsets", body("img:v1"))
        first = history.new_revision(created, 1, {}, 0)["metadata"]["name"]
        wait_for(lambda: done(admin, ns, first), "the first rollout", WITHIN)
        path = f"{APPS}/namespaces/{ns}/statefulsets/web"
        changed = admin.request(
            "PATCH",
            path,
            {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "img:v2"}]}}}},
            content_type="application/strategic-merge-patch+json",
        )
        second = history.new_revision(changed, 2, {}, 0)["metadata"]["name"]
        end = time.monotonic() + WITHIN
        updated = 0
        while time.monotonic() < end:
            updated = sum(1 for p in pods(admin, ns) if revision_of(p) == second)
            if updated >= 2:
                break
            time.sleep(0.05)
        assert 2 <= updated < REPLICAS, f"{updated} pods updated: not mid-rollout"
        fault()
        struck = time.monotonic()
        sts = wait_for(lambda: done(admin, ns, second), f"the rollout after {what}", WITHIN)
        assert [p["metadata"]["name"] for p in pods(admin, ns)] == [
            f"web-{i}" for i in range(REPLICAS)
        ]
        revisions = admin.request("GET", f"{APPS}/namespaces/{ns}/controllerrevisions")
        numbers = {r["metadata"]["name"]: r["revision"] for r in revisions.get("items") or []}
        assert numbers == {first: 1, second: 2}
        assert (sts["status"].get("collisionCount") or 0) == 0
        print(f"statefulset {what} mid-rollout: done {time.monotonic() - struck:.1f}s later")
        return stack.exited()
    finally:
        with contextlib.suppress(NotFoundError):
            admin.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_statefulset_sigkill_mid_rollout(stack: Stack, admin: KubeClient) -> None:
    """The active instance SIGKILLed: the standby finishes the rollout. Catches: a
    successor that makes another revision for the same template, renumbers, stops, or
    replaces a pod twice over."""

    def kill() -> None:
        stack.active("statefulset").kill()

    exited = rollout_with_fault(stack, admin, kill, "a SIGKILL")
    assert [e.split(":", 1)[0] for e in exited] == ["statefulset-0"], exited


def test_informer_restart_mid_rollout(stack: Stack, admin: KubeClient) -> None:
    """The informer killed and started again: the controller, still running, resumes
    from its re-listed mirror and finishes the rollout. Catches: a controller that stops
    on a lost stream, or acts twice on what it re-lists."""
    assert stack.informer is not None
    informer = stack.informer

    def restart() -> None:
        informer.kill()
        time.sleep(1.0)
        informer.start()
        stack.wait_serving(informer, stack.informer_address)

    exited = rollout_with_fault(stack, admin, restart, "an informer restart")
    assert not exited, exited
