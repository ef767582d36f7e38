"""The TypeScript runtime end to end: its example controller (namespace-labeller), run by
node against a real informer and manager and the session's cluster, labels namespaces by
rule, follows rule changes and label edits, and hands over to a standby. The informer and
the manager serve mutual TLS with RBAC authorization; the example dials them with the
admin's client certificate from the ``STEWARD_TLS_*`` variables, and refuses to start
without them. Its ``/metrics`` has the Python runtime's ``workqueue_*`` and
``controller_runtime_*`` families, alike."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes import client

from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.v1 import manager_pb2 as mpb
from tests.e2e.runtime_metrics import assert_runtime_metrics, reconciles, scrape
from tests.manager.conftest import RunningManager
from tests.services import security_env

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtimes" / "typescript"
EXAMPLE = RUNTIME / "dist" / "examples" / "namespace-labeller.js"
NAME = "namespace-labeller"
OWNED = "steward.dev/namespace-labeller-keys"


@pytest.fixture(scope="module")
def built() -> Path:
    """Install and compile the runtime and its example; fail with the output if that fails."""
    make = shutil.which("make")
    node = shutil.which("node")
    if make is None or node is None:
        pytest.fail("make and node are needed to build the TypeScript runtime")
    proc = subprocess.run(
        [make, "-C", str(RUNTIME), "deps", "build"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the TypeScript runtime failed:\n{proc.stdout}\n{proc.stderr}")
    assert EXAMPLE.is_file(), f"{EXAMPLE} was not built"
    return EXAMPLE


def _environment() -> dict[str, str]:
    """This process's environment without ``OTEL_*`` and ``STEWARD_*``."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STEWARD_"))}


def _tls_env(cluster: LocalCluster) -> dict[str, str]:
    """The admin's mTLS files (system:masters: it may register any name) as ``STEWARD_*``."""
    return security_env(cluster.client_security("admin"))


class Instance:
    """One node process of the example; its stderr is kept for failure messages."""

    def __init__(self, proc: asyncio.subprocess.Process, log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30.0)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode


@pytest_asyncio.fixture
async def start(
    built: Path, cluster: LocalCluster, informer: str, manager: RunningManager, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Instance]]]:
    """Start example instances (node subprocesses); all are stopped after the test."""
    instances: list[Instance] = []

    async def launch(*rules: str, standby: bool = False, metrics: str | None = None) -> Instance:
        args = [
            str(built),
            "--informer",
            informer,
            "--manager",
            manager.address,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--name",
            NAME,
        ]
        for rule in rules:
            args += ["--rule", rule]
        if standby:
            args.append("--standby")
        if metrics is not None:
            args += ["--metrics-listen", metrics]
        log_path = tmp_path / f"instance-{len(instances)}.log"
        env = {**_environment(), **_tls_env(cluster)}
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                "node", *args, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        instance = Instance(proc, log_path)
        instances.append(instance)
        return instance

    try:
        yield launch
    finally:
        for instance in instances:
            with contextlib.suppress(ProcessLookupError):
                await instance.stop()


async def _eventually(check: Callable[[], bool], what: str, *instances: Instance) -> None:
    """Poll ``check`` (in a thread: it calls the API server) for up to a minute."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.2)
    logs = "\n".join(f"--- instance {i}:\n{inst.log()}" for i, inst in enumerate(instances))
    pytest.fail(f"timed out waiting for {what}\n{logs}")


@pytest.fixture
def namespaces(core: client.CoreV1Api) -> Iterator[Callable[[str], str]]:
    """Create namespaces for the test (deleted afterwards)."""
    made: list[str] = []

    def create(name: str) -> str:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        made.append(name)
        return name

    try:
        yield create
    finally:
        for name in made:
            with contextlib.suppress(client.ApiException):
                core.delete_namespace(name)


def _labels(core: client.CoreV1Api, name: str) -> dict[str, str]:
    return dict(core.read_namespace(name).metadata.labels or {})


async def test_labels_follow_rules_and_changes(
    start: Callable[..., Awaitable[Instance]],
    core: client.CoreV1Api,
    namespaces: Callable[[str], str],
) -> None:
    prefix = f"tsl-{uuid.uuid4().hex[:6]}"
    pay = await asyncio.to_thread(namespaces, f"{prefix}-pay-api")
    web = await asyncio.to_thread(namespaces, f"{prefix}-web")
    metrics = f"127.0.0.1:{free_port()}"
    first = await start(f"team=payments:^{prefix}-pay-", metrics=metrics)

    await _eventually(
        lambda: _labels(core, pay).get("team") == "payments", "the matching namespace", first
    )
    # Its metrics are the Python runtime's, and count what it reconciled.
    await _eventually(lambda: reconciles(metrics, NAME) > 0, "a reconcile in /metrics", first)
    assert_runtime_metrics(await asyncio.to_thread(scrape, metrics), NAME)
    late = await asyncio.to_thread(namespaces, f"{prefix}-pay-late")
    await _eventually(
        lambda: _labels(core, late).get("team") == "payments", "a namespace made later", first
    )
    assert "team" not in await asyncio.to_thread(_labels, core, web)

    # A label someone removes comes back (the controller sees the namespace change).
    await asyncio.to_thread(core.patch_namespace, pay, {"metadata": {"labels": {"team": None}}})
    await _eventually(
        lambda: _labels(core, pay).get("team") == "payments", "the label restored", first
    )

    # The rules change: restarted with another rule, the old label goes where it no longer
    # applies and the new one comes; labels it did not set stay.
    await asyncio.to_thread(
        core.patch_namespace, web, {"metadata": {"labels": {"owner": "someone"}}}
    )
    assert await first.stop() == 0, first.log()
    second = await start(f"tier=web:^{prefix}-web$")
    await _eventually(
        lambda: "team" not in _labels(core, pay) and "team" not in _labels(core, late),
        "the labels of the old rule removed",
        second,
    )
    await _eventually(lambda: _labels(core, web).get("tier") == "web", "the new rule", second)
    labels = await asyncio.to_thread(_labels, core, web)
    assert labels.get("owner") == "someone"
    annotations = (await asyncio.to_thread(core.read_namespace, pay)).metadata.annotations or {}
    assert OWNED not in annotations


async def test_second_instance_is_refused_or_stands_by_and_takes_over(
    start: Callable[..., Awaitable[Instance]],
    core: client.CoreV1Api,
    namespaces: Callable[[str], str],
    manager: RunningManager,
) -> None:
    prefix = f"tsh-{uuid.uuid4().hex[:6]}"
    rule = f"ha=yes:^{prefix}-"
    first = await start(rule)
    one = await asyncio.to_thread(namespaces, f"{prefix}-one")
    await _eventually(lambda: _labels(core, one).get("ha") == "yes", "the first instance", first)

    # Without --standby a second live instance of the name is refused: exit code 3.
    refused = await start(rule)
    code = await asyncio.wait_for(refused.proc.wait(), 60.0)
    assert code == 3, refused.log()
    assert "ALREADY_EXISTS" in refused.log()

    # With --standby it waits...
    standby = await start(rule, standby=True)

    def roles() -> list[int]:
        info = manager.stub.GetController(mpb.GetControllerRequest(name=NAME))
        return [i.role for i in info.controller.instances]

    await _eventually(
        lambda: roles() == [mpb.ROLE_ACTIVE, mpb.ROLE_STANDBY], "a standby", first, standby
    )
    # ...and takes over when the active one dies without deregistering (lease lapses).
    first.proc.kill()
    await first.proc.wait()
    await _eventually(lambda: roles() == [mpb.ROLE_ACTIVE], "the standby promoted", standby)
    two = await asyncio.to_thread(namespaces, f"{prefix}-two")
    await _eventually(
        lambda: _labels(core, two).get("ha") == "yes", "the promoted standby", standby
    )
    assert await standby.stop() == 0, standby.log()


async def test_refuses_to_start_without_tls_or_plaintext(
    built: Path, cluster: LocalCluster, tmp_path: Path
) -> None:
    """Neither the TLS variables nor STEWARD_INSECURE_PLAINTEXT: a non-zero exit at once,
    naming the variables (nothing is dialed)."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(built),
        "--rule",
        "a=b:^never$",
        "--informer",
        "127.0.0.1:1",
        "--kubeconfig",
        str(cluster.kubeconfig),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_environment(),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60.0)
    text = out.decode(errors="replace")
    assert proc.returncode == 2, text
    for variable in (
        "STEWARD_TLS_CA_FILE",
        "STEWARD_TLS_CERT_FILE",
        "STEWARD_TLS_KEY_FILE",
        "STEWARD_INSECURE_PLAINTEXT=true",
    ):
        assert variable in text, text
