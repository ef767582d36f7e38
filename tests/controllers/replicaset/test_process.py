"""The ReplicaSet controller as its own process (``python -m steward run replicaset``):
it registers with the manager as ``replicaset``, reconciles once active, serves its
metrics, and exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest

from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.kube import KubeClient
from steward.manager import ManagerOptions
from steward.serving.security import DEVELOPMENT
from steward.v1 import manager_pb2
from tests.controllers.replicaset.conftest import (
    controller_of,
    create_rs,
    eventually,
    list_pods,
    rs_body,
    wait_stable_rs,
)
from tests.manager.conftest import FAST, RunningManager

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

SETPRIV = shutil.which("setpriv")


def holder(manager: RunningManager) -> str:
    try:
        reply = manager.stub.GetController(
            manager_pb2.GetControllerRequest(name="replicaset"), timeout=5
        )
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
    manager = RunningManager(
        ManagerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(rs_cluster.component_kubeconfig("manager")),
            namespace=ns,
            timing=FAST,
            identity=f"manager-{uuid.uuid4().hex[:6]}",
        )
    )
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
        assert "workqueue" in text or "controller_runtime" in text
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 60)
        assert code == 0, (tmp_path / "replicaset-controller.log").read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        log.close()
        manager.stop()
