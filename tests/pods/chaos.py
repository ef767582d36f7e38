"""The disruptions, the steady burst and the observations of the self-healing test
(``tests/pods/test_self_healing.py``).

Steward's pods are found in every namespace by their label ``app.kubernetes.io/name``
(``steward-informer``, ``steward-manager``, ``steward-controller-<name>``), whichever
layout runs them (Deployments in ``steward``, or the kubelet's static pods in
``kube-system``); the manager is asked only through
:func:`steward.cluster.pods.manager_call`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from steward.cluster import LocalCluster
from steward.cluster.errors import ClusterError
from steward.cluster.pods import manager_call
from steward.cluster.process import spawn, stop
from steward.kube import ApiError, NotFoundError
from steward.v1 import manager_pb2
from tests.faults.stack import apiserver_ready
from tests.faults.workload import Workload

KUBECTL = str(Path(sys.executable).parent / "kubectl")
APP_LABEL = "app.kubernetes.io/name"


def components(controllers: list[str]) -> list[str]:
    """The values of :data:`APP_LABEL` of Steward's pods: informer, manager and one per
    registered controller."""
    return [
        "steward-informer",
        "steward-manager",
        *(f"steward-controller-{c}" for c in controllers),
    ]


# Observations -----------------------------------------------------------------------------
@dataclass(frozen=True)
class PodView:
    """What the attribution needs of one of Steward's pods."""

    app: str
    namespace: str
    name: str
    uid: str
    owner: str
    """Kind of the controlling owner (``ReplicaSet``; ``Node`` for a static pod's mirror)."""
    node: str
    ready: bool
    deleting: bool
    restarts: int
    containers: tuple[str, ...]
    """Container ids."""


def steward_pods(cluster: LocalCluster, apps: list[str]) -> list[PodView]:
    """Steward's pods in every namespace, by :data:`APP_LABEL`."""
    listing = cluster.api("GET", f"/api/v1/pods?labelSelector={APP_LABEL}")
    wanted = set(apps)
    found = []
    for pod in listing.get("items") or []:
        meta = pod["metadata"]
        app = (meta.get("labels") or {}).get(APP_LABEL, "")
        if app not in wanted:
            continue
        owner = next(
            (r["kind"] for r in meta.get("ownerReferences") or () if r.get("controller")), ""
        )
        status = pod.get("status") or {}
        statuses = status.get("containerStatuses") or []
        found.append(
            PodView(
                app=app,
                namespace=meta["namespace"],
                name=meta["name"],
                uid=meta["uid"],
                owner=owner,
                node=(pod.get("spec") or {}).get("nodeName") or "",
                ready=any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or ()
                ),
                deleting=bool(meta.get("deletionTimestamp")),
                restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
                containers=tuple(sorted(s.get("containerID") or "" for s in statuses)),
            )
        )
    return found


def ready_counts(pods: list[PodView]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in pods:
        if pod.ready and not pod.deleting:
            counts[pod.app] = counts.get(pod.app, 0) + 1
    return counts


def pods_short_of(baseline: dict[str, int], pods: list[PodView]) -> list[str]:
    """Components with fewer Ready pods than ``baseline`` (app → Ready pods)."""
    now = ready_counts(pods)
    return [
        f"{app}: {now.get(app, 0)} of {want} pods Ready"
        for app, want in sorted(baseline.items())
        if now.get(app, 0) < want
    ]


def controller_states(cluster: LocalCluster) -> dict[str, tuple[int, str]]:
    """Each controller the manager knows: (state, holder); empty when it cannot be asked."""
    try:
        reply = manager_call(
            cluster, "ListControllers", manager_pb2.ListControllersRequest(), timeout=5
        )
    except (ClusterError, OSError, grpc.RpcError):
        return {}
    return {c.name: (c.state, c.holder) for c in reply.controllers}


def inactive(states: dict[str, tuple[int, str]], controllers: list[str]) -> list[str]:
    """Registered controllers that are not ACTIVE at the manager, with their state."""
    if not states:
        return ["the manager could not be asked"]
    out = []
    for name in controllers:
        state = states.get(name)
        if state is None:
            out.append(f"{name}: unknown to the manager")
        elif state[0] != manager_pb2.CONTROLLER_STATE_ACTIVE:
            label = manager_pb2.ControllerState.Name(state[0])  # type: ignore[arg-type]
            out.append(f"{name}: {label}")
    return out


def attribute(before: list[PodView], after: list[PodView]) -> str:
    """What brought each component's pods back, derived from what changed between the
    two snapshots: new UIDs (a pod re-created, and by whom: its controlling owner),
    new container ids or restart counts on the same pod (the kubelet restarted its
    containers)."""
    old_by_uid = {p.uid: p for p in before}
    old_by_name = {(p.namespace, p.name): p for p in before}
    notes: list[str] = []
    for app in sorted({p.app for p in (*before, *after)}):
        new = [p for p in after if p.app == app and p.uid not in old_by_uid]
        kept = [p for p in after if p.app == app and p.uid in old_by_uid]
        parts: list[str] = []
        by_owner: dict[str, list[PodView]] = {}
        for pod in new:
            by_owner.setdefault(pod.owner or "nothing", []).append(pod)
        for owner, pods in sorted(by_owner.items()):
            if owner == "ReplicaSet":
                parts.append(f"ReplicaSet controller re-created {len(pods)} pod(s)")
            elif owner == "Node":
                # A static pod's mirror: the kubelet writes it again; whether the
                # container itself was restarted shows in its id.
                same = [
                    p
                    for p in pods
                    if (p.namespace, p.name) in old_by_name
                    and old_by_name[(p.namespace, p.name)].containers == p.containers
                ]
                if same:
                    parts.append(f"kubelet re-created {len(same)} mirror pod(s), container kept")
                if len(pods) > len(same):
                    parts.append(f"kubelet restarted {len(pods) - len(same)} static pod(s)")
            else:
                parts.append(f"{len(pods)} new pod(s) owned by {owner}")
        bounced = [
            p
            for p in kept
            if p.restarts > old_by_uid[p.uid].restarts
            or p.containers != old_by_uid[p.uid].containers
        ]
        if bounced:
            count = sum(max(1, p.restarts - old_by_uid[p.uid].restarts) for p in bounced)
            parts.append(f"kubelet restarted {count} container(s) in {len(bounced)} pod(s)")
        if parts:
            notes.append(f"{app.removeprefix('steward-')}: {', '.join(parts)}")
    return "; ".join(notes) or "no Steward pod changed"


def holders_moved(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> str:
    moved = sorted(n for n, (_, h) in after.items() if n in before and before[n][1] != h)
    return f"new lease holder: {', '.join(moved)}" if moved else "no lease changed hands"


# Disruptions ------------------------------------------------------------------------------
def force_delete(cluster: LocalCluster, selector: str) -> int:
    """``kubectl delete pods -A -l <selector> --grace-period=0 --force``; returns how
    many pods it deleted (at least one, else the case would test nothing)."""
    done = subprocess.run(
        [
            KUBECTL,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "delete",
            "pods",
            "-A",
            "-l",
            selector,
            "--grace-period=0",
            "--force",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl delete -l {selector}: {done.stderr.strip()}")
    deleted = sum(1 for line in done.stdout.splitlines() if "deleted" in line)
    assert deleted, f"no pod matched {selector}: {done.stdout!r} {done.stderr!r}"
    return deleted


def in_cgroup(pid: int, cgroup: str) -> bool:
    """Whether process ``pid`` is in ``cgroup`` or below it, in any hierarchy."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if path == cgroup or path.startswith(cgroup.rstrip("/") + "/"):
            return True
    return False


def steward_processes(cgroup: str) -> list[int]:
    """Processes in the real node's ``cgroup`` whose command line names steward: the
    node's Steward containers, never another cluster's."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if not in_cgroup(pid, cgroup):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "steward" in cmdline:
            found.append(pid)
    return sorted(found)


def sigkill_steward(cluster: LocalCluster) -> int:
    """SIGKILL every Steward process on the real node at once; returns how many."""
    pids = steward_processes(cluster.state.real_nodes[0].cgroup)
    assert pids, f"no Steward process in {cluster.state.real_nodes[0].cgroup}"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def process_name(cluster: LocalCluster, prefix: str) -> str:
    """The one component of ``cluster`` whose name is or starts with ``prefix``."""
    names = [p.name for p in cluster.state.processes]
    found = [n for n in names if n == prefix] or [n for n in names if n.startswith(prefix)]
    assert len(found) == 1, f"{prefix}: {found} among {names}"
    return found[0]


def sigkill_and_start(cluster: LocalCluster, name: str) -> None:
    """SIGKILL component ``name`` and start it again with the same command line at once,
    as a kubelet restarts a static pod's container (no grace, no wait)."""
    index, record = next((i, p) for i, p in enumerate(cluster.state.processes) if p.name == name)
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    stop([record], grace=0)  # reaps it
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    _, fresh = spawn(
        name, record.argv, Path(record.log), env=env, cwd=cluster.directory, die_with_parent=True
    )
    cluster.state.processes[index] = fresh
    cluster.state.save()


# The steady burst -------------------------------------------------------------------------
@dataclass
class Burst:
    """:meth:`Workload.churn`, then one change a second (a new Job; a Deployment scaled
    or rolled) until stopped, on a thread of its own. A change the API server was down
    for is retried; a Job whose creation may have reached it is looked up, so that the
    workload's record stays exact."""

    workload: Workload
    period: float = 1.0
    changes: int = 0
    errors: int = 0
    failure: BaseException | None = None
    churned: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Burst:
        self._thread = threading.Thread(target=self._run, name="burst", daemon=True)
        self._thread.start()
        if not self.churned.wait(60):
            raise AssertionError(f"the workload's churn did not finish: {self.failure!r}")
        return self

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(120)
        assert not self._thread.is_alive(), "the burst did not stop"
        if self.failure is not None:
            raise AssertionError(f"the burst failed: {self.failure!r}") from self.failure

    def _run(self) -> None:
        try:
            self.workload.churn()
            self.churned.set()
            step = 0
            while not self._stop.wait(self.period):
                self._retry(lambda s=step: self._change(s))
                step += 1
        except BaseException as err:  # reported by stop()
            self.failure = err
            self.churned.set()

    def _retry(self, change: Any) -> None:
        """Apply ``change`` until the API server takes it (each change is idempotent or
        checks what reached the server)."""
        for _ in range(300):
            try:
                change()
                self.changes += 1
                return
            except ApiError:
                self.errors += 1
                time.sleep(1.0)
        raise AssertionError("the API server refused the burst's changes for 300 s")

    def _change(self, step: int) -> None:
        w = self.workload
        names = sorted(w.live_deployments)
        kind = step % 3
        if kind == 0 or not names:
            self._create_job()
        elif kind == 1:
            w.scale(names[0], w.replicas + 1 + (step // 3) % 2)
        else:
            w.roll(names[min(1, len(names) - 1)], f"busybox:{2 + step % 5}")

    def _create_job(self) -> None:
        """One more Job; if the request failed, the Job may still have been created:
        ask until the API server answers."""
        w = self.workload
        name = f"job-{w.created_jobs:02d}"
        try:
            w.create_jobs(1)
            return
        except ApiError:
            pass
        for _ in range(300):
            try:
                w.kube.request("GET", f"/apis/batch/v1/namespaces/{w.ns}/jobs/{name}")
            except NotFoundError:
                w.created_jobs -= 1  # not created: the next attempt reuses the name
                raise
            except ApiError:
                time.sleep(1.0)
                continue
            w.live_jobs.add(name)
            return
        raise AssertionError(f"could not learn whether Job {name} was created")


def wait_apiserver(cluster: LocalCluster, within: float = 180.0) -> None:
    deadline = time.monotonic() + within
    while not apiserver_ready(cluster):
        if time.monotonic() > deadline:
            raise AssertionError(f"kube-apiserver not ready within {within:.0f}s")
        time.sleep(0.5)
