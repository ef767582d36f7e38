"""Fault injection: Steward's services and the control plane under them fail while a
workload of Jobs and Deployments is created, scaled, rolled and deleted, and every object
must still converge to the state upstream's controllers reach, with nothing lost.

Each case runs Steward's informer, manager and its Job, ReplicaSet and Deployment
controllers as processes (``tests/faults/stack.py``) against a control plane of this
module's own, whose kube-controller-manager runs none of those three controllers, so
kube-apiserver and etcd can be restarted without disturbing other tests. The workload and
what "converged" means are in ``tests/faults/workload.py``.

Every case reports one line: the fault, how long convergence took (from the kill, or from
the end of a cut, pause or restart) and what was checked; the module prints them as a
table at the end and appends them to ``$STEWARD_FAULT_REPORT`` when it is set.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from steward.cluster import LocalCluster
from steward.kube import ConflictError, KubeClient, NotFoundError, load_access
from steward.v1 import manager_pb2
from tests.conftest import local_cluster
from tests.faults.stack import (
    CONTROLLERS,
    LEASE,
    RecordingApiProxy,
    Service,
    Stack,
    compact_etcd,
    kubeconfig_for,
    restart_component,
)
from tests.faults.workload import CHECKED, Workload
from tests.informer.proxy import CuttableProxy
from tests.polling import wait_for

pytestmark = pytest.mark.integration

CONVERGE_WITHIN = 240.0
SLOW_SECONDS = float(os.environ.get("STEWARD_FAULT_SLOW_SECONDS", "30"))
"""How long the slow controller cannot keep up (STEWARD_FAULT_SLOW_SECONDS for longer)."""


# Report -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    fault: str
    seconds: float
    checked: tuple[str, ...]

    def line(self) -> str:
        return f"FAULT {self.fault} converged in {self.seconds:.1f} s; checked: " + "; ".join(
            self.checked
        )


OUTCOMES: list[Outcome] = []


def record(fault: str, seconds: float, extra: Sequence[str]) -> None:
    outcome = Outcome(fault, seconds, (*extra, "workload converged (see below)"))
    OUTCOMES.append(outcome)
    print(outcome.line())
    path = os.environ.get("STEWARD_FAULT_REPORT")
    if path:
        with Path(path).open("a") as out:
            out.write(outcome.line() + "\n")


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [
        "| fault | converged after (s) | checked |",
        "|---|---|---|",
        *(f"| {o.fault} | {o.seconds:.1f} | {'; '.join(o.checked)} |" for o in outcomes),
        "",
        "Workload converged: " + "; ".join(CHECKED) + ".",
    ]
    return "\n".join(rows)


@pytest.fixture(scope="module", autouse=True)
def fault_table(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print the module's table of faults once every case has run."""
    yield
    if not OUTCOMES:
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")
    context = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with context:
        print("\n\nFault injection (tests/faults/test_injection.py):\n" + table(OUTCOMES))


# Fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of this module's own: upstream's Job, ReplicaSet and Deployment
    controllers off (Steward's run instead), 2 kwok nodes."""
    yield from local_cluster(
        tmp_path_factory, "faults", nodes=2, controllers="*,-job,-replicaset,-deployment"
    )


@pytest.fixture(scope="module")
def admin(fault_cluster: LocalCluster) -> Iterator[KubeClient]:
    api = KubeClient(load_access(str(fault_cluster.kubeconfig)), user_agent="fault-test")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def stack(fault_cluster: LocalCluster, tmp_path: Path) -> Iterator[Stack]:
    running = Stack(fault_cluster, tmp_path / "logs")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def workload(admin: KubeClient, request: pytest.FixtureRequest) -> Iterator[Workload]:
    """The workload, in a fresh namespace (deleted afterwards)."""
    base = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    ns = f"{base}-{uuid.uuid4().hex[:6]}"
    admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    wait_for(lambda: _has_default_account(admin, ns), "the namespace's default ServiceAccount")
    try:
        yield Workload(admin, ns)
    finally:
        _drop_namespace(admin, ns)


def _has_default_account(admin: KubeClient, ns: str) -> bool:
    try:
        admin.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
    except NotFoundError:
        return False
    return True


def _drop_namespace(admin: KubeClient, ns: str) -> None:
    """Delete the namespace, first clearing finalizers a failed case left on pods."""
    with contextlib.suppress(Exception):
        for pod in admin.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items") or ():
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(NotFoundError, ConflictError):
                    admin.request(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                        {"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )
    with contextlib.suppress(Exception):
        admin.request("DELETE", f"/api/v1/namespaces/{ns}")


def converge(workload: Workload, stack: Stack, since: float) -> float:
    """Wait until the workload has converged and every controller has an active
    instance; fail naming what still differs. Returns the seconds since ``since``."""
    deadline = time.monotonic() + CONVERGE_WITHIN
    problems: list[str] = []
    while time.monotonic() < deadline:
        problems = workload.problems()
        if not problems:
            break
        exited = stack.exited()
        assert not exited, "services exited:\n" + "\n".join(exited)
        time.sleep(0.5)
    else:
        pytest.fail(f"not converged after {CONVERGE_WITHIN:.0f}s:\n  " + "\n  ".join(problems[:40]))
    seconds = time.monotonic() - since
    stack.all_active()
    exited = stack.exited()
    assert not exited, "services exited:\n" + "\n".join(exited)
    return seconds


# Cases ------------------------------------------------------------------------------------
def test_informer_sigkill_during_burst(stack: Stack, workload: Workload) -> None:
    stack.up()
    workload.begin()
    workload.churn()
    assert stack.informer is not None
    stack.informer.kill()
    killed = time.monotonic()
    workload.finish()  # nobody sees these until the informer is back
    time.sleep(1.0)
    stack.informer.start()
    stack.wait_serving(stack.informer, stack.informer_address)
    seconds = converge(workload, stack, killed)
    # The restarted informer's counters are its own: every controller reconnected to it
    # and asked to resume each watch from the resource version it had (ReplicaSets are
    # watched by the ReplicaSet and the Deployment controller).
    sent = {k: stack.informer_metric(SUBSCRIBER_EVENTS, subscriber=k) for k in CONTROLLERS}
    assert all(sent.values()), f"events the restarted informer sent each controller: {sent}"
    resumes = {r: stack.informer_metric(RESUMES, resource=r) for r in RESUMED_AFTER_RESTART}
    short = {r: n for r, n in resumes.items() if n < RESUMED_AFTER_RESTART[r]}
    assert not short, f"watches resumed from a resource version: {resumes}"
    record(
        "SIGKILL of the informer during a burst (restarted after 1 s)",
        seconds,
        [
            "every controller process kept running, reconnected to the restarted informer "
            "and resumed its watches from their resource versions (steward_informer_watch_"
            "resumes: " + ", ".join(f"{r} {n:.0f}" for r, n in resumes.items()) + ")"
        ],
    )


SUBSCRIBER_EVENTS = "steward_informer_subscriber_events_total"
RESUMES = "steward_informer_watch_resumes_total"
RESUMED_AFTER_RESTART = {"jobs.v1.batch": 1, "replicasets.v1.apps": 2, "deployments.v1.apps": 1}
"""Resumes the restarted informer must see, by type: one per controller watching it."""


def test_manager_sigkill(stack: Stack, workload: Workload) -> None:
    stack.up(standbys=("job",))
    workload.begin()
    assert stack.manager is not None
    stack.manager.kill()
    killed = time.monotonic()
    workload.churn()
    time.sleep(1.0)
    stack.manager.start()
    stack.wait_serving(stack.manager, stack.manager_address)
    workload.finish()
    seconds = converge(workload, stack, killed)
    for kind in ("job", "replicaset", "deployment"):
        state = stack.controller(kind)
        actives = [i for i in state.instances if i.role == manager_pb2.ROLE_ACTIVE]
        assert [i.instance_id for i in actives] == [state.holder], (kind, state)
    record(
        "SIGKILL of the manager (restarted after 1 s)",
        seconds,
        ["every controller active again under the new manager, one holder each"],
    )


def test_active_controller_sigkill(stack: Stack, workload: Workload) -> None:
    stack.up(standbys=("job", "deployment"))
    workload.begin()
    workload.churn()
    victims = {kind: stack.active(kind) for kind in ("job", "deployment")}
    for service in victims.values():
        service.kill()
    killed = time.monotonic()
    workload.finish()
    for kind, victim in victims.items():
        standby = next(s for s in stack.services if s.name.startswith(kind) and s is not victim)
        stack.wait_holder(kind, standby)
    stack.services = [s for s in stack.services if s not in victims.values()]
    seconds = converge(workload, stack, killed)
    record(
        "SIGKILL of the active Job and Deployment controllers",
        seconds,
        ["each standby took the lease over"],
    )


STANDBY_RESYNC = 30.0
"""Resync period (s) of the paused case's standby: what repairs a divergence that a write
in flight across the pause caused, as kube-controller-manager's resyncs would."""


def test_paused_active_instance_is_fenced(
    fault_cluster: LocalCluster, stack: Stack, workload: Workload, tmp_path: Path
) -> None:
    """The active Job controller is paused (SIGSTOP) in the middle of a burst for longer
    than its lease; the standby takes over. Once resumed, the old instance must not send
    a single write to the API server: all its requests pass a recording proxy.

    A write the old instance began before the pause can reach the API server after the
    takeover (a client-side fence cannot recall bytes on their way; upstream's
    controllers have the same race, a Lease has no fencing token). If the workload then
    does not converge at first, the case says so and waits for the standby's resync
    instead: the workload must converge all the same, or the case fails."""
    proxy = RecordingApiProxy(fault_cluster, "controller-job", tmp_path)
    paused: Service | None = None
    late_landing = ""
    try:
        stack.start_informer()
        stack.start_manager()
        paused = stack.start_controller("job", kubeconfig=proxy.kubeconfig)
        stack.wait_holder("job", paused)
        for kind in ("replicaset", "deployment"):
            stack.wait_holder(kind, stack.start_controller(kind))
        standby = stack.start_controller("job", flags=[f"--resync-period={STANDBY_RESYNC}"])
        stack.wait_instances("job", 2)

        workload.begin()
        wait_for(lambda: len(proxy.writes()) >= 3, "the active Job controller's first writes")
        paused.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        workload.churn()  # queued for the paused instance, which sees them on resume
        stack.wait_holder("job", standby)
        took_over = time.monotonic()
        time.sleep(float(LEASE[0]))  # well past the lease
        resumed = time.monotonic()
        paused.signal(signal.SIGCONT)
        # Told its lease is gone, the old instance may end (as kube-controller-manager
        # does on lost leadership) or stand by; either way it must not write.
        stack.services.remove(paused)
        workload.finish()
        try:
            seconds = converge(workload, stack, resumed)
        except pytest.fail.Exception as err:
            around = proxy.writes(since=stopped - 2.0)
            timeline = "\n  ".join(
                f"{r.at - stopped:+.2f} s (whole at {r.complete - stopped:+.2f} s) {r.method} "
                f"{r.path} -> {r.status}"
                for r in around
            )
            story = (
                f"{err}\nthe paused instance's writes from 2 s before the pause (s after "
                f"SIGSTOP; the standby held the lease at {took_over - stopped:+.2f} s, "
                f"SIGCONT at {resumed - stopped:+.2f} s):\n  {timeline or 'none'}"
            )
            in_flight = [r for r in around if r.at < stopped and r.complete >= took_over]
            if not in_flight:
                pytest.fail(story)
            print(f"not converged at first; a write in flight across the pause: {story}")
            try:
                seconds = converge(workload, stack, resumed)
            except pytest.fail.Exception as again:
                pytest.fail(f"{story}\nstill not converged with the standby's resyncs: {again}")
            late_landing = (
                f"{len(in_flight)} write(s) begun before the pause reached the API server "
                "after the takeover, and the workload did not converge at first; it did "
                f"after the standby's resyncs (every {STANDBY_RESYNC:.0f} s): "
                + ", ".join(f"{r.method} {r.path} -> {r.status}" for r in in_flight)
            )
        time.sleep(2 * float(LEASE[2]))  # heartbeats of the resumed instance come and go
        late = proxy.writes_completed(since=resumed)
        assert not late, (
            f"the fenced instance's writes reached the API server after it resumed: {late}"
        )
        before = len(proxy.writes_completed(0.0, stopped))
        during = len(proxy.writes_completed(stopped, resumed))
        assert paused.proc is not None
        assert paused.proc.poll() in (None, 0), paused.tail()
        assert stack.holder_pid("job") == standby.pid
    finally:
        if paused is not None:
            paused.stop()  # out of the stack's list once resumed; it may stand by
        proxy.close()
    record(
        f"SIGSTOP of the active Job controller for {resumed - stopped:.0f} s "
        f"(lease {LEASE[0]} s), then SIGCONT",
        seconds,
        [
            "the standby took the lease over",
            "no write of the resumed instance reached the API server after SIGCONT "
            f"(counted by each request's last byte through a recording proxy; {before} "
            f"had before the pause, {during} while it was paused)",
            "it ended cleanly or stood by; the standby kept the lease",
            *([late_landing] if late_landing else []),
        ],
    )


def test_controller_cut_off_past_history(stack: Stack, workload: Workload) -> None:
    """The Job controller reaches the informer through a proxy that is cut while more
    pod events happen than the informer's history keeps: its resume must fall back to
    REPLACED and a fresh snapshot."""
    history = 60
    proxy = CuttableProxy(("127.0.0.1", int(stack.informer_address.rsplit(":", 1)[1])))
    try:
        stack.start_informer(f"--history-size={history}")
        stack.start_manager()
        job = stack.start_controller("job", informer=f"127.0.0.1:{proxy.port}")
        stack.wait_holder("job", job)
        for kind in ("replicaset", "deployment"):
            stack.wait_holder(kind, stack.start_controller(kind))
        workload.begin()
        wait_for(lambda: stack.informer_metric("steward_informer_sent_events_total") > 0, "events")
        proxy.cut()
        cut = time.monotonic()
        before = _pod_events(stack)
        workload.churn()
        name = sorted(workload.live_deployments)[0]
        replicas = workload.live_deployments[name]
        up = False
        while _pod_events(stack) - before <= history + 20:
            up = not up
            workload.scale(name, replicas + 4 if up else replicas)
            assert time.monotonic() - cut < 120, "too few pod events while cut off"
            time.sleep(2.0)
        missed = _pod_events(stack) - before
        workload.finish()
        proxy.heal()
        healed = time.monotonic()
        seconds = converge(workload, stack, healed)
        replaced = stack.informer_metric(
            "steward_informer_watch_resumes_total", resource="pods.v1", result="replaced"
        )
        assert replaced >= 1, "the Job controller's resume was not answered REPLACED"
    finally:
        proxy.close()
    record(
        f"Job controller cut off from the informer for {healed - cut:.0f} s "
        f"({missed:.0f} pod events, history {history})",
        seconds,
        ["its resume was answered REPLACED and a snapshot (steward_informer_watch_resumes)"],
    )


def _pod_events(stack: Stack) -> float:
    return stack.informer_metric("steward_informer_events_total", resource="pods.v1")


@pytest.mark.slow
def test_apiserver_restart(fault_cluster: LocalCluster, stack: Stack, workload: Workload) -> None:
    stack.up(standbys=("job",))
    workload.begin()
    workload.churn()
    down = restart_component(fault_cluster, "kube-apiserver", down_for=2.0)
    ready = time.monotonic()
    workload.finish()
    seconds = converge(workload, stack, ready)
    record(
        f"kube-apiserver restart ({down:.0f} s until ready again)",
        seconds,
        ["every service survived; each controller active again"],
    )


@pytest.mark.slow
def test_etcd_restart(fault_cluster: LocalCluster, stack: Stack, workload: Workload) -> None:
    stack.up()
    workload.begin()
    workload.churn()
    down = restart_component(fault_cluster, "etcd", down_for=3.0)
    ready = time.monotonic()
    workload.finish()
    seconds = converge(workload, stack, ready)
    record(
        f"etcd restart ({down:.0f} s until kube-apiserver ready again)",
        seconds,
        ["every service survived; each controller active again"],
    )


@pytest.mark.slow
def test_compaction_forces_410(
    fault_cluster: LocalCluster, stack: Stack, workload: Workload, tmp_path: Path
) -> None:
    """The informer reaches kube-apiserver through a proxy that is cut while the
    workload changes; etcd is compacted past the informer's resource versions and
    kube-apiserver restarted (so its watch cache holds no older history either): the
    informer's watches are answered 410 Gone and it must relist."""
    proxy = CuttableProxy(("127.0.0.1", fault_cluster.state.ports["apiserver"]))
    try:
        kubeconfig = kubeconfig_for(
            fault_cluster,
            "informer",
            f"https://127.0.0.1:{proxy.port}",
            tmp_path / "informer.kubeconfig",
        )
        stack.start_informer(kubeconfig=kubeconfig)
        stack.start_manager()
        for kind in ("job", "replicaset", "deployment"):
            stack.wait_holder(kind, stack.start_controller(kind))
        workload.begin()
        wait_for(lambda: _pod_events(stack) > 0, "pod events at the informer")
        proxy.cut()
        workload.churn()
        workload.finish()
        compact_etcd(fault_cluster)
        restart_component(fault_cluster, "kube-apiserver")
        proxy.heal()
        healed = time.monotonic()
        seconds = converge(workload, stack, healed)
        gone = stack.informer_metric("steward_informer_errors_total", reason="gone")
        relists = stack.informer_metric("steward_informer_relists_total")
        assert gone >= 1, "no watch was answered 410 Gone"
        assert relists >= 1, "the informer did not relist"
    finally:
        proxy.close()
    record(
        "etcd compaction while the informer was cut off (410 Gone)",
        seconds,
        [f"the informer saw {gone:.0f} 410 Gone and relisted {relists:.0f} times"],
    )


@pytest.mark.slow
def test_slow_controller(stack: Stack, workload: Workload) -> None:
    """The only Job controller instance runs a tenth of the time (SIGSTOP/SIGCONT) for
    SLOW_SECONDS (30 s) while the workload goes on; the informer holds 5 objects per subscriber
    and type before it sends REPLACED. (At this workload's rate the connection's HTTP/2
    and socket buffers absorb a 0.9 s stall, so REPLACED is reported, not required; the
    informer's bound itself is tested in tests/informer/test_flow.py.)"""
    stack.up(informer_flags=("--subscriber-buffer=5",))
    job = stack.active("job")
    workload.begin()
    stop_throttle = threading.Event()
    throttle = threading.Thread(target=_throttle, args=(job, stop_throttle), daemon=True)
    throttle.start()
    started = time.monotonic()
    try:
        workload.churn()
        name = sorted(workload.live_deployments)[0]
        replicas = workload.live_deployments[name]
        up = False
        while time.monotonic() - started < SLOW_SECONDS - 10:
            up = not up
            workload.scale(name, replicas + 4 if up else replicas)
            time.sleep(5.0)
        workload.finish()
        while time.monotonic() - started < SLOW_SECONDS:
            time.sleep(0.5)
    finally:
        stop_throttle.set()
        throttle.join(timeout=10)
    ended = time.monotonic()
    seconds = converge(workload, stack, ended)
    replaced = stack.informer_metric("steward_informer_subscriber_replaced_total", subscriber="job")
    record(
        f"slow Job controller (runs 10% of the time for {SLOW_SECONDS:.0f} s; the informer "
        f"sent it REPLACED {replaced:.0f} times, reported, not required)",
        seconds,
        ["the slowed instance, the only Job controller, kept running and caught up"],
    )


def _throttle(service: Service, done: threading.Event) -> None:
    """Let ``service`` run 0.1 s of every second until ``done``."""
    try:
        while not done.is_set():
            service.signal(signal.SIGSTOP)
            if done.wait(0.9):
                break
            service.signal(signal.SIGCONT)
            done.wait(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            service.signal(signal.SIGCONT)
