"""The services work with exactly the identities the manifests grant.

The local overlay's namespace, ServiceAccounts, roles and bindings are applied for real to
``apps_cluster`` (tests/deploy/conftest.py: upstream's ReplicaSet and Deployment
controllers off); each service then runs as a local process with its container's
command, arguments and environment (see tests/deploy/harness.py for the substitutions)
and a token of its own ServiceAccount, and does its job: the informer serves a watch of
pods, the manager registers the controllers, a Job runs to completion under Steward's Job
controller (``spec.managedBy``, ``--no-take-unmanaged`` from the manifest: upstream's Job
controller runs too), and a ReplicaSet adopts, creates and deletes pods and reports them
ready under Steward's ReplicaSet controller.

The Deployment controller's manifest is covered by rendering and the server-side dry run
(tests/deploy/test_manifests.py) only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from steward.cluster import LocalCluster
from tests.deploy import exercises
from tests.deploy.harness import (
    NAMESPACE,
    Doc,
    Launcher,
    Process,
    apply,
    container,
    ensure_namespace,
    env_of,
    find,
    grpc_probe,
    grpc_serving,
    http_ok,
    identity,
    rbac_docs,
    render,
    service_account_of,
    wait_for,
    whoami,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

INFORMER, MANAGER = "steward-informer", "steward-manager"
JOB, REPLICASET = "steward-controller-job", "steward-controller-replicaset"
CONTROLLERS = {JOB: "job", REPLICASET: "replicaset"}
"""The controllers' Deployments run here, and the name each registers with the manager."""


@dataclass
class Stack:
    docs: list[Doc]
    launcher: Launcher
    kubeconfigs: dict[str, Path]
    processes: dict[str, Process]

    def address(self, name: str) -> str:
        port, _ = grpc_probe(find(self.docs, "Deployment", name), "readinessProbe")
        return self.processes[name].address(port)


def start_ready(launcher: Launcher, name: str, kubeconfig: Path, docs: list[Doc]) -> Process:
    """Start a gRPC service and wait until its readiness probe (as the manifest states it:
    port and health service name) would pass."""
    process = launcher.start(launcher.prepare(name, kubeconfig))
    port, service = grpc_probe(find(docs, "Deployment", name), "readinessProbe")
    wait_for(
        lambda: grpc_serving(process.address(port), service),
        f"{name}'s readiness probe (health of {service!r})",
        process,
    )
    return process


@pytest.fixture(scope="module")
def stack(apps_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cluster = apps_cluster
    docs = render("local")
    labels = find(docs, "Namespace", NAMESPACE)["metadata"]["labels"]
    ensure_namespace(cluster, NAMESPACE, labels)
    apply(cluster, rbac_docs(docs))
    workdir = tmp_path_factory.mktemp("deployed")
    launcher = Launcher(docs, workdir)
    kubeconfigs = {
        name: identity(cluster, docs, service_account_of(docs, name), workdir)
        for name in (INFORMER, MANAGER, *CONTROLLERS)
    }
    processes: dict[str, Process] = {}
    try:
        processes[INFORMER] = start_ready(launcher, INFORMER, kubeconfigs[INFORMER], docs)
        launcher.expose(INFORMER, processes[INFORMER])
        processes[MANAGER] = start_ready(launcher, MANAGER, kubeconfigs[MANAGER], docs)
        launcher.expose(MANAGER, processes[MANAGER])
        for name in CONTROLLERS:
            processes[name] = launcher.start(launcher.prepare(name, kubeconfigs[name]))
        yield Stack(docs, launcher, kubeconfigs, processes)
    finally:
        for name in (*CONTROLLERS, MANAGER, INFORMER):
            if name in processes:
                processes[name].stop()


def test_each_service_runs_as_its_own_service_account(
    stack: Stack, apps_cluster: LocalCluster
) -> None:
    assert set(stack.kubeconfigs) == {INFORMER, MANAGER, *CONTROLLERS}
    for name, kubeconfig in stack.kubeconfigs.items():
        sa = service_account_of(stack.docs, name)
        assert whoami(apps_cluster, kubeconfig) == f"system:serviceaccount:{NAMESPACE}:{sa}"


def test_processes_run_the_containers_command_and_environment(stack: Stack) -> None:
    for name, process in stack.processes.items():
        c = container(find(stack.docs, "Deployment", name))
        assert process.argv[0].endswith("/" + c["command"][0])
        assert len(process.argv) == len(c["command"]) + len(c.get("args", []))
        assert sorted(env_of(process)) == sorted(e["name"] for e in c.get("env", []))
        assert process.env["OTEL_SERVICE_NAME"] == name


def test_informer_serves_a_watch_of_pods(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    informer = stack.processes[INFORMER]
    problem = exercises.watch_pods(apps_cluster, stack.address(INFORMER), apps_namespace)
    assert problem is None, f"{problem}\ninformer log:\n{informer.tail()}"
    assert not informer.forbidden(), informer.tail()


@pytest.mark.parametrize("deployment", list(CONTROLLERS))
def test_manager_registers_the_controllers(stack: Stack, deployment: str) -> None:
    manager, controller = stack.processes[MANAGER], stack.processes[deployment]
    problem = exercises.wait_registered(stack.address(MANAGER), CONTROLLERS[deployment])
    assert problem is None, (
        f"{problem}\nmanager log:\n{manager.tail()}\ncontroller log:\n{controller.tail()}"
    )


def test_job_runs_to_completion_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    controller = stack.processes[JOB]
    assert exercises.wait_registered(stack.address(MANAGER)) is None, controller.tail()
    problem = exercises.run_job(apps_cluster, apps_namespace)
    assert problem is None, f"{problem}\ncontroller log:\n{controller.tail()}"
    for process in stack.processes.values():
        assert not process.forbidden(), f"{process.name} was refused:\n{process.tail()}"


def test_replicaset_pods_are_made_and_ready_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    controller = stack.processes[REPLICASET]
    registered = exercises.wait_registered(stack.address(MANAGER), CONTROLLERS[REPLICASET])
    assert registered is None, controller.tail()
    problem = exercises.run_replicaset(apps_cluster, apps_namespace)
    assert problem is None, f"{problem}\ncontroller log:\n{controller.tail()}"
    for process in stack.processes.values():
        assert not process.forbidden(), f"{process.name} was refused:\n{process.tail()}"


@pytest.mark.parametrize("deployment", list(CONTROLLERS))
def test_controller_answers_its_http_probes(stack: Stack, deployment: str) -> None:
    c = container(find(stack.docs, "Deployment", deployment))
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    process = stack.processes[deployment]
    for kind in ("livenessProbe", "readinessProbe"):
        probe = c[kind]["httpGet"]
        port = named.get(probe["port"], probe["port"])
        url = f"http://{process.address(int(port))}{probe['path']}"
        wait_for(partial(http_ok, url), f"{deployment} {kind} {url}", process, 30)
