"""The Go runtime end to end: ``runtimes/go/bin/confighash`` against a real informer and
manager and the session's cluster (kube-controller-manager's Deployment controller on).

The binary is built with ``make -C runtimes/go build`` once per module, runs as a
subprocess, and keeps each Deployment's pod template annotated with the hash of the
ConfigMaps it uses; the manager decides which instance is active. The informer and the
manager serve mutual TLS with RBAC authorization, and the binary dials them with the
admin's client certificate from the ``STEWARD_TLS_*`` variables. Its ``/metrics`` has the
Python runtime's ``workqueue_*`` and ``controller_runtime_*`` families, alike.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.v1 import manager_pb2 as mpb
from steward.version import steward_version
from tests.e2e.runtime_metrics import assert_runtime_metrics, reconciles, scrape
from tests.manager.conftest import RunningManager
from tests.services import host_flags, security_env

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
GO_RUNTIME = ROOT / "runtimes" / "go"
CONFIGHASH = GO_RUNTIME / "bin" / "confighash"
ANNOTATION = "steward.dev/config-hash"
NAME = "confighash"

_T = TypeVar("_T")


# Reusable helpers ---------------------------------------------------------------------


def build_go_runtime() -> None:
    """``make -C runtimes/go build``; fails the test with the build's output if it fails."""
    proc = subprocess.run(
        ["make", "-C", str(GO_RUNTIME), "build"],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"make -C runtimes/go build failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )


class ControllerProcess:
    """A controller binary run as a subprocess, its stdout and stderr in files. It gets
    this process's environment without ``OTEL_*``, ``KUBECONFIG`` and ``STEWARD_*``,
    plus ``env``."""

    def __init__(
        self, argv: list[str], log_dir: Path, label: str, env: dict[str, str] | None = None
    ) -> None:
        self.label = label
        self.log_path = log_dir / f"{label}.log"
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "KUBECONFIG", "STEWARD_"))
        }
        env = {**inherited, **(env or {})}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_exit(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.label} did not exit within {timeout}s:\n{self.logs()}")

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the exit code."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self) -> None:
        """SIGKILL: no deregistration, the lease has to lapse."""
        if self.running():
            self.proc.kill()
        self.proc.wait(30)


def eventually(check: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    """Poll ``check`` until it holds (generous deadline; machines are noisy)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


# Fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def go_binaries() -> None:
    build_go_runtime()


@pytest.fixture
def start_confighash(
    go_binaries: None,
    cluster: LocalCluster,
    namespace: str,
    informer: str,
    manager: RunningManager,
    tmp_path: Path,
) -> Iterator[Callable[..., ControllerProcess]]:
    """Start bin/confighash instances watching the test's namespace, dialing with the
    admin's certificate (system:masters: it may register any name); all killed after."""
    started: list[ControllerProcess] = []
    admin = security_env(cluster.client_security("admin"))

    def start(label: str, *extra: str) -> ControllerProcess:
        flags = host_flags(informer, manager.address, str(cluster.kubeconfig), namespace)
        argv = [str(CONFIGHASH), *flags, *extra]
        proc = ControllerProcess(argv, tmp_path, label, admin)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.kill()


# The test -----------------------------------------------------------------------------


def _deployment(name: str, configmap: str) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(
                            name="app",
                            image="busybox:1.36",
                            volume_mounts=[
                                client.V1VolumeMount(name="config", mount_path="/etc/app")
                            ],
                        )
                    ],
                    volumes=[
                        client.V1Volume(
                            name="config",
                            config_map=client.V1ConfigMapVolumeSource(name=configmap),
                        )
                    ],
                ),
            ),
        ),
    )


def test_confighash_rolls_deployments_and_fails_over(
    api_client: client.ApiClient,
    namespace: str,
    manager: RunningManager,
    start_confighash: Callable[..., ControllerProcess],
) -> None:
    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"a": "1"})
    )
    apps.create_namespaced_deployment(namespace, _deployment("web", "cfg"))
    apps.create_namespaced_deployment(namespace, _deployment("other", "unrelated"))

    def annotation(name: str = "web") -> str | None:
        dep = apps.read_namespaced_deployment(name, namespace)
        return (dep.spec.template.metadata.annotations or {}).get(ANNOTATION)

    def replicaset_with(config_hash: str | None) -> bool:
        """Whether kube-controller-manager made a ReplicaSet of web's template with it."""
        items = apps.list_namespaced_replica_set(namespace, label_selector="app=web").items
        return any(
            (rs.spec.template.metadata.annotations or {}).get(ANNOTATION) == config_hash
            for rs in items
        )

    def controller() -> mpb.Controller:
        reply = manager.stub.GetController(mpb.GetControllerRequest(name=NAME))
        return reply.controller

    def instances() -> list[str]:
        try:
            return [i.instance_id for i in controller().instances]
        except Exception:  # NOT_FOUND until the first registration
            return []

    metrics = f"127.0.0.1:{free_port()}"
    first = start_confighash("first", "--metrics-listen", metrics)
    # A Deployment mounting a ConfigMap gets the hash of its data.
    eventually(lambda: annotation() is not None, "the config-hash annotation")
    before = annotation()
    assert before is not None
    eventually(lambda: replicaset_with(before), "the ReplicaSet of the annotated template")
    assert first.running(), first.logs()
    # Its metrics are the Python runtime's, and count what it reconciled.
    eventually(lambda: reconciles(metrics, NAME) > 0, "a reconcile counted in /metrics")
    assert_runtime_metrics(scrape(metrics), NAME)
    [first_id] = instances()
    assert controller().holder == first_id

    # Changing the ConfigMap changes the annotation, and the Deployment rolls out.
    core.patch_namespaced_config_map("cfg", namespace, {"data": {"a": "2"}})
    eventually(lambda: annotation() not in (None, before), "a new config hash")
    second_hash = annotation()
    eventually(lambda: replicaset_with(second_hash), "kube-controller-manager's new ReplicaSet")
    # The Deployment whose ConfigMap does not exist is annotated too, and unrelated to cfg.
    eventually(lambda: annotation("other") is not None, "the annotation of the other Deployment")
    other_hash = annotation("other")

    # A second instance without --standby is refused while the first one lives.
    refused = start_confighash("refused")
    assert refused.wait_exit() == 1, refused.logs()
    assert "AlreadyExists" in refused.logs(), refused.logs()
    assert first_id in refused.logs(), refused.logs()  # the message names the holder

    # With --standby it waits, and takes over when the first one is killed.
    standby = start_confighash("standby", "--standby")
    eventually(lambda: len(instances()) == 2, "the standby to register")
    [standby_id] = [i for i in instances() if i != first_id]
    assert controller().holder == first_id
    first.kill()
    eventually(lambda: controller().holder == standby_id, "the standby's promotion")
    core.patch_namespaced_config_map("cfg", namespace, {"data": {"a": "3"}})
    eventually(lambda: annotation() not in (None, before, second_hash), "a hash by the standby")
    assert annotation("other") == other_hash

    # SIGTERM deregisters and exits 0.
    assert standby.terminate() == 0, standby.logs()
    eventually(lambda: controller().holder == "", "the name to be released")


def test_confighash_refuses_to_start_without_tls_or_plaintext(
    go_binaries: None, cluster: LocalCluster, tmp_path: Path
) -> None:
    """Neither the TLS variables nor STEWARD_INSECURE_PLAINTEXT: exit 1 at once, saying
    which variables to set (the informer's address is never dialed)."""
    argv = [str(CONFIGHASH), "--informer", "127.0.0.1:1", "--kubeconfig", str(cluster.kubeconfig)]
    proc = ControllerProcess(argv, tmp_path, "no-security")
    assert proc.wait_exit() == 1, proc.logs()
    logs = proc.logs()
    for variable in (
        "STEWARD_TLS_CA_FILE",
        "STEWARD_TLS_CERT_FILE",
        "STEWARD_TLS_KEY_FILE",
        "STEWARD_INSECURE_PLAINTEXT=true",
    ):
        assert variable in logs, logs


def test_confighash_says_its_version_as_steward_does(go_binaries: None) -> None:
    """``--version`` of a Go controller prints the version of Steward that the Python
    distribution has (one version across the runtimes) and exits 0."""
    done = subprocess.run(
        [str(CONFIGHASH), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"confighash {steward_version()} (go"), done.stdout
