"""A sample controller end to end: informer → mirror → queue → workers → API writes, with
the manager deciding which instance is active.

The informer and the manager run as their own identities (the cluster's component
kubeconfigs); the labeller, an example with no identity of its own, writes as admin."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from examples import labeller
from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.kube import KubeClient, load_access
from steward.runtime.controller import ControllerOptions
from steward.runtime.session import SessionOptions
from steward.v1 import manager_pb2 as mpb
from tests.manager.conftest import RunningManager
from tests.services import host_flags

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]


async def _eventually(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` (in a thread: it may call the API server) for up to a minute."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


async def _labelled_and_copied(
    core: client.CoreV1Api, namespace: str, name: str, value: str
) -> None:
    """Create ConfigMap ``name`` labelled ``value`` and wait for the labeller's copy."""
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={labeller.LABEL: value})),
    )

    def copied() -> bool:
        cm = core.read_namespaced_config_map(name, namespace)
        return (cm.metadata.annotations or {}).get(labeller.ANNOTATION) == value

    await _eventually(copied, f"the copy of {name}")


@pytest.mark.asyncio
async def test_labeller_copies_labels_only_while_active(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    dev_informer: str,
    dev_manager: RunningManager,
) -> None:
    core = client.CoreV1Api(api_client)
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="labeller-test")
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="before", labels={labeller.LABEL: "one"})
        ),
    )

    def annotation(name: str) -> str | None:
        cm = core.read_namespaced_config_map(name, namespace)
        return (cm.metadata.annotations or {}).get(labeller.ANNOTATION)

    async with grpc.aio.insecure_channel(dev_informer) as channel:
        first = labeller.LABELLER.new(channel, api, ControllerOptions(namespace=namespace))
        task = asyncio.create_task(
            first.run(
                manager=dev_manager.address,
                session=SessionOptions(controller=labeller.LABELLER.name),
            )
        )
        try:
            # What existed before the controller started, and what comes after.
            await _eventually(lambda: annotation("before") == "one", "the first copy")
            core.create_namespaced_config_map(
                namespace,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name="after", labels={labeller.LABEL: "two"})
                ),
            )
            await _eventually(lambda: annotation("after") == "two", "a copy of a new object")
            core.patch_namespaced_config_map(
                "after", namespace, {"metadata": {"labels": {labeller.LABEL: "three"}}}
            )
            await _eventually(lambda: annotation("after") == "three", "a copy of a change")

            # The manager shows the instance active, with its reconciles.
            info = dev_manager.stub.GetController(
                mpb.GetControllerRequest(name=labeller.LABELLER.name)
            )
            assert first.session is not None
            assert info.controller.holder == first.session.options.instance_id
            assert first.status().reconciles["success"] >= 3

            # Disabled at run time: the instance stops reconciling, changes are not copied.
            dev_manager.stub.DisableController(
                mpb.DisableControllerRequest(name=labeller.LABELLER.name)
            )
            await _eventually(lambda: first._workers is None, "the workers to stop")
            core.patch_namespaced_config_map(
                "after", namespace, {"metadata": {"labels": {labeller.LABEL: "four"}}}
            )
            await asyncio.sleep(2.0)
            assert annotation("after") == "three"
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    api.close()


@pytest.mark.asyncio
async def test_labeller_without_a_manager_reconciles_on_its_own(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str, dev_informer: str
) -> None:
    core = client.CoreV1Api(api_client)
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="labeller-test")
    registry = CollectorRegistry()
    async with grpc.aio.insecure_channel(dev_informer) as channel:
        alone = labeller.LABELLER.new(
            channel, api, ControllerOptions(namespace=namespace, registry=registry)
        )
        task = asyncio.create_task(alone.run())
        try:
            await _labelled_and_copied(core, namespace, "solo", "x")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    api.close()
    labels = {"controller": labeller.LABELLER.name, "result": "success"}
    assert (registry.get_sample_value("controller_runtime_reconcile_total", labels) or 0) >= 1
    adds = registry.get_sample_value("workqueue_adds_total", {"name": labeller.LABELLER.name})
    assert adds is not None
    assert adds >= 1


@pytest.mark.asyncio
async def test_the_resync_runs_under_a_manager_too(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    dev_informer: str,
    dev_manager: RunningManager,
) -> None:
    """One start path: the resync period holds for an active instance under a manager as
    it does alone. One ConfigMap, whose only event the predicate lets through is its
    creation: every further reconcile of it is a resync."""
    core = client.CoreV1Api(api_client)
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="labeller-test")
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="resynced"))
    )
    async with grpc.aio.insecure_channel(dev_informer) as channel:
        options = ControllerOptions(namespace=namespace, resync_period=0.3)
        controller = labeller.LABELLER.new(channel, api, options)
        session = SessionOptions(controller=labeller.LABELLER.name)
        task = asyncio.create_task(controller.run(manager=dev_manager.address, session=session))
        try:
            await _eventually(
                lambda: controller.status().reconciles["success"] >= 5, "five reconciles"
            )
            assert controller.session is not None and controller.session.holds_lease()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    api.close()


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


@pytest.mark.asyncio
async def test_the_hosted_labeller_serves_health_and_metrics_refuses_a_twin_and_drains(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    dev_informer: str,
    dev_manager: RunningManager,
) -> None:
    """``python -m examples.labeller``: the 39-line example is a whole service through
    ``steward.run`` — flags, health, metrics, the manager session, SIGTERM."""
    core = client.CoreV1Api(api_client)
    health, metrics = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "examples.labeller",
        *host_flags(dev_informer, dev_manager.address, str(cluster.kubeconfig), namespace),
        "--insecure-plaintext",
    ]
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [*argv, f"--health-listen=127.0.0.1:{health}", f"--metrics-listen=127.0.0.1:{metrics}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _labelled_and_copied(core, namespace, "hosted", "h")
        for probe in ("healthz", "readyz"):
            status, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{health}/{probe}")
            assert status == 200
        _, text = await asyncio.to_thread(_get, f"http://127.0.0.1:{metrics}/metrics")
        assert (
            'controller_runtime_reconcile_total{controller="configmap-labeller",result="success"}'
            in text
        )

        twin = await asyncio.to_thread(
            subprocess.run, argv, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert twin.returncode == 1, twin.stderr
        assert "ALREADY_EXISTS" in twin.stderr

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 0
        info = dev_manager.stub.GetController(mpb.GetControllerRequest(name=labeller.LABELLER.name))
        assert not info.controller.holder  # it said goodbye: no lease left to lapse
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_hosted_labeller_explains_its_flags() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "examples.labeller", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for flag in (
        "--kubeconfig",
        "--informer",
        "--manager",
        "--workers",
        "--namespace",
        "--standby",
        "--metrics-listen",
        "--health-listen",
        "--tls-ca-file",
        "--token-file",
    ):
        assert flag in proc.stdout
    assert "steward.io/copied" in proc.stdout
