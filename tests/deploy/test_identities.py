"""The services work with exactly the identities the manifests grant.

The local overlay's namespace, ServiceAccounts, roles and bindings are applied for real to
``apps_cluster`` (tests/deploy/conftest.py: upstream's ReplicaSet, Deployment, Endpoints,
DaemonSet and HorizontalPodAutoscaler controllers off); each service then runs as a local
process with its container's command, arguments and environment (see tests/deploy/harness.py
for the substitutions) and a token of its own ServiceAccount, the informer and the manager
serving mutual TLS with certificates of the cluster's CA, the controllers dialing them with
a client certificate and a projected token (audience steward) of their ServiceAccount; and
each does its job: the informer serves a watch of pods, the manager registers the
controllers, a Job runs to completion under Steward's Job controller
(``spec.managedBy``, ``--no-take-unmanaged`` from the manifest: upstream's Job controller
runs too), a ReplicaSet adopts, creates and deletes pods and reports them ready under
Steward's ReplicaSet controller, a Service's Endpoints are created, updated and
deleted under Steward's Endpoints controller, a Service's EndpointSlices are created,
updated and deleted under Steward's EndpointSlice controller (upstream's runs beside it),
and a DaemonSet adopts an orphan pod and revision, runs a pod on every node, rolls a new
template out and back onto a taken revision name under Steward's DaemonSet controller,
and an HPA scales its Deployment up to its minReplicas and another's metrics are asked
of the three metrics APIs (none refuses) under Steward's HorizontalPodAutoscaler
controller.

The Deployment controller's manifest is covered by rendering and the server-side dry run
(tests/deploy/test_manifests.py) only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc
import pytest

from steward.cluster import LocalCluster
from steward.security import ClientSecurity
from steward.v1 import informer_pb2, informer_pb2_grpc
from tests.deploy import exercises
from tests.deploy.harness import (
    NAMESPACE,
    TOKEN_AUDIENCE,
    Doc,
    Launcher,
    Process,
    apply,
    caller,
    container,
    ensure_namespace,
    env_of,
    find,
    grpc_port,
    http_ok,
    identity,
    probe_url,
    rbac_docs,
    render,
    service_account_of,
    wait_for,
    whoami,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

INFORMER, MANAGER = "steward-informer", "steward-manager"
JOB, REPLICASET = "steward-controller-job", "steward-controller-replicaset"
ENDPOINT, ENDPOINTSLICE = "steward-controller-endpoint", "steward-controller-endpointslice"
DAEMONSET = "steward-controller-daemonset"
HPA = "steward-controller-horizontalpodautoscaling"
CONTROLLERS = {
    JOB: "job",
    REPLICASET: "replicaset",
    ENDPOINT: "endpoint",
    ENDPOINTSLICE: "endpointslice",
    DAEMONSET: "daemonset",
    HPA: "horizontalpodautoscaling",
}
"""The controllers' Deployments run here, and the name each registers with the manager."""


@dataclass
class Stack:
    docs: list[Doc]
    launcher: Launcher
    kubeconfigs: dict[str, Path]
    processes: dict[str, Process]
    admin: ClientSecurity
    """The cluster's admin (system:masters): may read the manager's registry."""
    watcher: ClientSecurity
    """A caller with the Job controller's ServiceAccount token (audience steward)."""

    def address(self, name: str) -> str:
        return self.processes[name].address(grpc_port(find(self.docs, "Deployment", name)))


def start_ready(launcher: Launcher, name: str, kubeconfig: Path, docs: list[Doc]) -> Process:
    """Start a gRPC service and wait until its readiness probe (as the manifest states it:
    HTTP path and port) would pass."""
    process = launcher.start(launcher.prepare(name, kubeconfig))
    url = probe_url(find(docs, "Deployment", name), process, "readinessProbe")
    wait_for(partial(http_ok, url), f"{name}'s readiness probe {url}", process)
    return process


@pytest.fixture(scope="module")
def stack(apps_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cluster = apps_cluster
    docs = render("local")
    labels = find(docs, "Namespace", NAMESPACE)["metadata"]["labels"]
    ensure_namespace(cluster, NAMESPACE, labels)
    apply(cluster, rbac_docs(docs))
    workdir = tmp_path_factory.mktemp("deployed")
    launcher = Launcher(docs, workdir, cluster)
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
        watcher = caller(
            cluster, workdir, "steward-deploy-test", service_account=service_account_of(docs, JOB)
        )
        admin = cluster.client_security("admin")
        yield Stack(docs, launcher, kubeconfigs, processes, admin, watcher)
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
    problem = exercises.watch_pods(
        apps_cluster, stack.address(INFORMER), apps_namespace, security=stack.watcher
    )
    assert problem is None, f"{problem}\ninformer log:\n{informer.tail()}"
    assert not informer.forbidden(), informer.tail()


@pytest.mark.parametrize("deployment", list(CONTROLLERS))
def test_manager_registers_the_controllers(stack: Stack, deployment: str) -> None:
    manager, controller = stack.processes[MANAGER], stack.processes[deployment]
    problem = exercises.wait_registered(
        stack.address(MANAGER), CONTROLLERS[deployment], security=stack.admin
    )
    assert problem is None, (
        f"{problem}\nmanager log:\n{manager.tail()}\ncontroller log:\n{controller.tail()}"
    )


def _runs_under(
    stack: Stack, deployment: str, run: exercises.Run, cluster: LocalCluster, namespace: str
) -> None:
    """The controller of ``deployment`` is active in the manager and does ``run`` in
    ``namespace``, and no service was refused meanwhile."""
    controller = stack.processes[deployment]
    registered = exercises.wait_registered(
        stack.address(MANAGER), CONTROLLERS[deployment], security=stack.admin
    )
    assert registered is None, controller.tail()
    problem = run(cluster, namespace)
    assert problem is None, f"{problem}\ncontroller log:\n{controller.tail()}"
    for process in stack.processes.values():
        assert not process.forbidden(), f"{process.name} was refused:\n{process.tail()}"


def test_job_runs_to_completion_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    _runs_under(stack, JOB, exercises.run_job, apps_cluster, apps_namespace)


def test_replicaset_pods_are_made_and_ready_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    _runs_under(stack, REPLICASET, exercises.run_replicaset, apps_cluster, apps_namespace)


def test_endpoints_follow_a_service_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    _runs_under(stack, ENDPOINT, exercises.run_endpoints, apps_cluster, apps_namespace)


def test_endpointslices_follow_a_service_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    _runs_under(stack, ENDPOINTSLICE, exercises.run_endpointslices, apps_cluster, apps_namespace)


def test_daemonset_pods_run_on_every_node_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    _runs_under(stack, DAEMONSET, exercises.run_daemonset, apps_cluster, apps_namespace)


def test_hpa_scales_its_target_and_asks_the_metrics_apis_under_stewards_controller(
    stack: Stack, apps_cluster: LocalCluster, apps_namespace: str
) -> None:
    _runs_under(stack, HPA, exercises.run_hpa, apps_cluster, apps_namespace)


@pytest.mark.parametrize("deployment", [INFORMER, MANAGER, *CONTROLLERS])
def test_each_service_answers_its_http_probes(stack: Stack, deployment: str) -> None:
    process = stack.processes[deployment]
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        url = probe_url(find(stack.docs, "Deployment", deployment), process, kind)
        wait_for(partial(http_ok, url), f"{deployment} {kind} {url}", process, 30)


def _watch_code(address: str, security: ClientSecurity | None) -> grpc.StatusCode:
    """The status a Watch of pods ends with at once (OK: it was served)."""
    pods = informer_pb2.ResourceType(group="", version="v1", resource="pods")
    request = informer_pb2.WatchRequest(
        targets=[informer_pb2.WatchTarget(type=pods)], namespace="default", subscriber="probe"
    )
    channel = grpc.insecure_channel(address) if security is None else security.sync_channel(address)
    with channel:
        stream = informer_pb2_grpc.InformerServiceStub(channel).Watch(request, timeout=10)
        try:
            next(iter(stream))
        except grpc.RpcError as err:
            return err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
        finally:
            stream.cancel()
    return grpc.StatusCode.OK


def test_the_controllers_identity_is_their_service_accounts_token(
    stack: Stack, apps_cluster: LocalCluster
) -> None:
    """The informer serves mutual TLS only; of the Job controller's credentials (as the
    harness made its volume) the certificate alone names a user with no rights, and the
    projected token is for the audience steward and names its ServiceAccount."""
    informer = stack.address(INFORMER)
    process = stack.processes[JOB]
    env = process.env
    for name in ("STEWARD_TLS_CA_FILE", "STEWARD_TLS_CERT_FILE", "STEWARD_TLS_KEY_FILE"):
        assert Path(env[name]).is_file(), f"{name}={env[name]}"
    assert _watch_code(informer, None) == grpc.StatusCode.UNAVAILABLE
    certificate_only = ClientSecurity(
        ca_file=env["STEWARD_TLS_CA_FILE"],
        cert_file=env["STEWARD_TLS_CERT_FILE"],
        key_file=env["STEWARD_TLS_KEY_FILE"],
    )
    assert _watch_code(informer, certificate_only) == grpc.StatusCode.PERMISSION_DENIED
    review = apps_cluster.api(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {
                "token": Path(env["STEWARD_TOKEN_FILE"]).read_text(),
                "audiences": [TOKEN_AUDIENCE],
            },
        },
        ok=(201,),
    )
    sa = service_account_of(stack.docs, JOB)
    assert review["status"]["authenticated"] is True, review["status"]
    assert review["status"]["user"]["username"] == f"system:serviceaccount:{NAMESPACE}:{sa}"
    with_token = ClientSecurity(
        ca_file=env["STEWARD_TLS_CA_FILE"],
        cert_file=env["STEWARD_TLS_CERT_FILE"],
        key_file=env["STEWARD_TLS_KEY_FILE"],
        token_file=env["STEWARD_TOKEN_FILE"],
    )
    assert _watch_code(informer, with_token) == grpc.StatusCode.OK
