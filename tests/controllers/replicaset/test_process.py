"""The ReplicaSet controller as its own process (``python -m steward run replicaset``):
it registers with the manager as ``replicaset``, reconciles once active, serves its
metrics, and exits 0 on SIGTERM. The ReplicationController controller likewise
(``replicationcontroller``, its work queue named ``replicationmanager`` as upstream's),
SIGKILLed in the middle of a scale-up (a quota holds it there): the next instance
finishes it with exactly ``spec.replicas`` pods and clears ``ReplicaFailure``."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.kube import KubeClient
from steward.manager import ManagerOptions
from steward.serving.security import DEVELOPMENT
from steward.v1 import manager_pb2
from steward.version import steward_version
from tests.controllers.harness import stays
from tests.controllers.replicaset.conftest import (
    RC,
    controller_of,
    create_rs,
    eventually,
    get_rs,
    list_pods,
    rs_body,
    wait_stable_rs,
)
from tests.manager.conftest import FAST, RunningManager

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

SETPRIV = shutil.which("setpriv")


def holder(manager: RunningManager, name: str = "replicaset") -> str:
    try:
        reply = manager.stub.GetController(manager_pb2.GetControllerRequest(name=name), timeout=5)
    except grpc.RpcError as err:
        if err.code() is grpc.StatusCode.NOT_FOUND:
            return ""
        raise
    return str(reply.controller.holder)


def metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


async def test_process_registers_reconciles_and_stops_on_sigterm(
    rs_cluster: LocalCluster,
    rs_identity: Path,
    rs_informer: str,
    rs_kube: KubeClient,
    rs_namespace: str,
    tmp_path: Path,
) -> None:
    ns, kube = rs_namespace, rs_kube
    manager = _manager(rs_cluster, ns)
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "steward",
        "run",
        "replicaset",
        f"--kubeconfig={rs_identity}",
        f"--informer={rs_informer}",
        f"--manager={manager.address}",
        f"--namespace={ns}",
        f"--metrics=127.0.0.1:{port}",
        "--workers=2",
        "--insecure-plaintext",  # the fixtures' informer and manager are plaintext
    ]
    if SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "KILL", *argv]
    log = (tmp_path / "replicaset-controller.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        await eventually(lambda: holder(manager), "the controller to be active", within=60)
        rs = create_rs(kube, ns, rs_body("rs", 2))
        await wait_stable_rs(kube, rs)
        pods = list_pods(kube, ns)
        assert len(pods) == 2
        assert all(controller_of(p)["uid"] == rs["metadata"]["uid"] for p in pods)  # type: ignore[index]
        text = await eventually(lambda: metrics(port), "the metrics endpoint")
        found = {
            (s.name, s.labels.get("controller", s.labels.get("name", ""))): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }
        assert found[("workqueue_adds_total", "replicaset")] >= 1
        # The steward_* families of the Go and TypeScript runtimes: the active instance of
        # an epoch the manager gave, its mirror synced, nothing fenced.
        assert found[("steward_controller_active", "replicaset")] == 1
        assert found[("steward_mirror_synced", "replicaset")] == 1
        assert found[("steward_manager_epoch", "replicaset")] >= 1
        assert found[("steward_fenced_writes_total", "replicaset")] == 0
        # Opened again once at least: catch_up() at the START resumes on a new stream.
        assert found[("steward_mirror_reconnects_total", "replicaset")] >= 1
        build = [
            s
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == "steward_build_info"
        ]
        assert [(b.labels["version"], b.labels["runtime"], b.value) for b in build] == [
            (steward_version(), "python", 1.0)
        ]
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 60)
        assert code == 0, (tmp_path / "replicaset-controller.log").read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        log.close()
        manager.stop()


def _manager(cluster: LocalCluster, ns: str) -> RunningManager:
    return RunningManager(
        ManagerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("manager")),
            namespace=ns,
            timing=FAST,
            identity=f"manager-{uuid.uuid4().hex[:6]}",
        )
    )


async def _spawn(
    name: str,
    identity: Path,
    informer: str,
    manager: RunningManager,
    ns: str,
    port: int,
    log: Any,
    *flags: str,
) -> asyncio.subprocess.Process:
    argv = [
        sys.executable,
        "-m",
        "steward",
        "run",
        name,
        f"--kubeconfig={identity}",
        f"--informer={informer}",
        f"--manager={manager.address}",
        f"--namespace={ns}",
        f"--metrics=127.0.0.1:{port}",
        "--workers=2",
        "--insecure-plaintext",
        *flags,
    ]
    if SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "KILL", *argv]
    return await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )


async def test_replication_controller_killed_mid_scale_up_is_finished_by_the_next(
    rs_cluster: LocalCluster,
    rc_identity: Path,
    rs_informer: str,
    rs_kube: KubeClient,
    rs_namespace: str,
    tmp_path: Path,
) -> None:
    ns, kube = rs_namespace, rs_kube
    # A quota of 7 pods holds the first instance mid-way through a scale-up to 30 (its
    # creations refused, ReplicaFailure set, retrying with backoff) when it is killed.
    quota_path = f"/api/v1/namespaces/{ns}/resourcequotas"
    kube.request("POST", quota_path, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "7"}}})
    await eventually(
        lambda: (kube.request("GET", f"{quota_path}/q").get("status") or {}).get("hard"),
        "the quota counted",
    )
    manager = _manager(rs_cluster, ns)
    procs: list[asyncio.subprocess.Process] = []
    log = (tmp_path / "replicationcontroller.log").open("wb")
    try:
        port = free_port()
        first = await _spawn(
            "replicationcontroller", rc_identity, rs_informer, manager, ns, port, log
        )
        procs.append(first)
        await eventually(
            lambda: holder(manager, "replicationcontroller"),
            "the controller to be active",
            within=60,
        )
        rc = create_rs(kube, ns, rs_body("rc", 30, RC), RC)

        def held() -> bool:
            st = get_rs(kube, ns, "rc", RC).get("status") or {}
            failing = [c["type"] for c in st.get("conditions") or ()] == ["ReplicaFailure"]
            return failing and st.get("replicas") == 7

        await eventually(held, "7 pods and ReplicaFailure")
        # Its work queue is upstream's (the name label of workqueue_*).
        text = await eventually(lambda: metrics(port), "the metrics endpoint")
        assert 'name="replicationmanager"' in text
        first.kill()
        await first.wait()
        kube.request("DELETE", f"{quota_path}/q")
        # --standby: the manager holds the dead instance's name until its lease lapses.
        second = await _spawn(
            "replicationcontroller",
            rc_identity,
            rs_informer,
            manager,
            ns,
            free_port(),
            log,
            "--standby",
        )
        procs.append(second)
        await wait_stable_rs(kube, rc, RC)

        def finished() -> bool:
            pods = [p for p in list_pods(kube, ns) if not p["metadata"].get("deletionTimestamp")]
            st = get_rs(kube, ns, "rc", RC).get("status") or {}
            return (
                len(pods) == 30
                and all(
                    (ref := controller_of(p)) is not None and ref["uid"] == rc["metadata"]["uid"]
                    for p in pods
                )
                and not st.get("conditions")
            )

        await eventually(finished, "30 pods of the ReplicationController, no ReplicaFailure")
        # Nothing more comes: no pod beyond spec.replicas is created (and then deleted).
        await stays(lambda: len(list_pods(kube, ns)) == 30, "30 pods", for_seconds=2.0)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        log.close()
        manager.stop()
