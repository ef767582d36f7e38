"""Reliability of Steward's Job controller: the active process is SIGKILLed in the middle
of a burst of Jobs, the standby takes over, and every Job still ends with the right count
and no pod keeps the tracking finalizer."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.controllers.job.pods import TRACKING_FINALIZER
from steward.kube import KubeClient
from steward.manager import ManagerOptions
from steward.v1 import manager_pb2
from tests.controllers.job.conftest import condition, get_job, job_body
from tests.manager.conftest import FAST, RunningManager
from tests.polling import wait_for
from tests.services import serving

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOBS = 30
COMPLETIONS = 2


SETPRIV = shutil.which("setpriv")


class Processes:
    """Child processes of one test, stopped at the end (and, where util-linux's
    ``setpriv`` exists, killed by the kernel should the test process die: no Python code
    runs between fork and exec, which could hang in a process with gRPC threads)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        if SETPRIV:
            argv = [SETPRIV, "--pdeathsig", "KILL", *argv]
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path / "logs")
    try:
        yield running
    finally:
        running.stop()


def job_state(manager: RunningManager) -> manager_pb2.Controller:
    """The manager's view of the job controller (empty before any instance registered)."""
    try:
        reply = manager.stub.GetController(manager_pb2.GetControllerRequest(name="job"), timeout=5)
    except grpc.RpcError as err:
        if err.code() is grpc.StatusCode.NOT_FOUND:
            return manager_pb2.Controller()
        raise
    controller: manager_pb2.Controller = reply.controller
    return controller


def holder_pid(manager: RunningManager) -> int | None:
    """The pid of the job controller instance holding the lease (ids end in pid-random)."""
    holder = job_state(manager).holder
    if not holder:
        return None
    return int(holder.rsplit("-", 2)[1])


def tracked_pods(kube: KubeClient, ns: str) -> list[str]:
    found = kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
    return [
        p["metadata"]["name"]
        for p in found.get("items") or ()
        if TRACKING_FINALIZER in (p["metadata"].get("finalizers") or ())
    ]


def test_standby_finishes_a_burst_after_sigkill(
    cluster: LocalCluster, kube: KubeClient, namespace: str, processes: Processes
) -> None:
    informer_kubeconfig = cluster.component_kubeconfig("informer")
    informer = f"127.0.0.1:{free_port()}"
    processes.start(
        "informer",
        [sys.executable, "-m", "steward.cli", "informer", f"--kubeconfig={informer_kubeconfig}",
         f"--listen={informer}", *cluster.state.steward_serving_args()],
    )  # fmt: skip
    wait_for(lambda: serving(cluster, informer), "the informer to serve", 60)
    manager = RunningManager(
        ManagerOptions(
            security=cluster.state.serving_security(),
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("manager")),
            namespace=namespace,
            timing=FAST,
            identity=f"manager-{uuid.uuid4().hex[:6]}",
        ),
        client=cluster.client_security(),
    )
    try:
        argv = [
            sys.executable,
            "-m",
            "steward",
            "run",
            "job",
            f"--kubeconfig={cluster.component_kubeconfig('controller-job')}",
            f"--informer={informer}",
            f"--manager={manager.address}",
            f"--namespace={namespace}",
            "--no-take-unmanaged",
            "--standby",
            *cluster.state.client_args("controller-job"),
        ]
        first = processes.start("job-controller-a", argv)
        wait_for(lambda: holder_pid(manager) == first.pid, "the first instance to be active")
        second = processes.start("job-controller-b", argv)
        wait_for(lambda: len(job_state(manager).instances) == 2, "the second instance to stand by")

        names = [f"burst-{i:02d}" for i in range(JOBS)]

        def create(name: str) -> None:
            body = job_body(name, completions=COMPLETIONS, parallelism=COMPLETIONS)
            kube.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)

        def completed() -> list[str]:
            found = kube.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")
            return [
                j["metadata"]["name"] for j in found.get("items") or () if condition(j, "Complete")
            ]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(create, names[: JOBS // 2]))
            wait_for(completed, "a first Job to complete")
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
            list(pool.map(create, names[JOBS // 2 :]))

        wait_for(lambda: holder_pid(manager) == second.pid, "the standby to take over", 60)
        wait_for(lambda: len(completed()) == JOBS, f"all {JOBS} Jobs to complete", 180)
        for name in names:
            status = get_job(kube, namespace, name)["status"]
            assert status["succeeded"] == COMPLETIONS, (name, status)
            assert status.get("failed", 0) == 0, (name, status)
            assert status.get("active", 0) == 0, (name, status)
            assert not (status.get("uncountedTerminatedPods") or {}).get("succeeded"), name
        wait_for(
            lambda: not tracked_pods(kube, namespace), "no pod with the tracking finalizer", 60
        )
        assert second.poll() is None, "the standby exited"
    finally:
        manager.stop()
