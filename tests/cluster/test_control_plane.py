"""Proof that the local control plane is real and whole: version, scheduling onto kwok
nodes, upstream's Job controller, Jaeger receiving the API server's spans, clean stop."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client
from kubernetes import config as k8s_config

from steward.cluster import (
    AlreadyUpError,
    ClusterConfig,
    ComponentFailedError,
    LocalCluster,
)
from steward.cluster.identities import STEWARD_CONTROLLERS
from steward.cluster.progress import Progress
from steward.cluster.registry import steward_controllers
from steward.cluster.supervisor import RestartBackoff
from steward.v1 import manager_pb2, manager_pb2_grpc
from steward.v1.informer_pb2 import ListRequest, ResourceType
from steward.v1.informer_pb2_grpc import InformerServiceStub
from tests.polling import wait_for
from tests.services import serving

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
WITHOUT_STEWARDS = ",".join(["*", *(f"-{name}" for name in STEWARD_CONTROLLERS)])
"""kube-controller-manager's ``--controllers`` under ``make up``: every controller but
those Steward runs itself (``*,-daemonset,-deployment,-endpoint,-endpointslice,
-horizontalpodautoscaling,-job,-replicaset``)."""


def test_apiserver_reports_pinned_version(api_client: client.ApiClient) -> None:
    info = client.VersionApi(api_client).get_code()
    assert info.git_version == "v1.37.2"
    assert (info.major, info.minor) == ("1", "37")


def test_kubectl_lists_simulated_nodes_ready(cluster: LocalCluster) -> None:
    out = subprocess.run(
        [
            str(BIN / "kubectl"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "get",
            "nodes",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    nodes = json.loads(out.stdout)["items"]
    assert len(nodes) == 3
    for node in nodes:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert [c["status"] for c in ready] == ["True"], node["metadata"]["name"]
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_simulated_nodes_keep_renewed_leases(
    core: client.CoreV1Api, api_client: client.ApiClient
) -> None:
    """Each node's Lease in kube-node-lease is renewed: without it the node lifecycle
    controller sees the nodes silent for its grace period and marks every pod not Ready,
    which kwok never undoes."""
    coordination = client.CoordinationV1Api(api_client)
    names = {str(n.metadata.name) for n in core.list_node().items}

    def renewals() -> dict[str, Any]:
        leases = coordination.list_namespaced_lease("kube-node-lease").items
        return {str(lease.metadata.name): lease.spec.renew_time for lease in leases}

    first = wait_for(lambda: (r := renewals()) and set(r) >= names and r, "a Lease for every node")
    wait_for(lambda: all(renewals()[n] > first[n] for n in names), "every node's Lease renewed")


def test_upstream_job_controller_completes_a_job_on_kwok_nodes(
    api_client: client.ApiClient, namespace: str
) -> None:
    batch = client.BatchV1Api(api_client)
    core = client.CoreV1Api(api_client)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="proof"),
        spec=client.V1JobSpec(
            parallelism=2,
            completions=3,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="work", image="busybox:1.36")],
                )
            ),
        ),
    )
    batch.create_namespaced_job(namespace, job)

    def complete() -> client.V1JobStatus | None:
        status = batch.read_namespaced_job_status("proof", namespace).status
        done = [c for c in status.conditions or [] if c.type == "Complete" and c.status == "True"]
        return status if done else None

    status = wait_for(complete, "Job 'proof' to be Complete")
    assert status.succeeded == 3
    assert not status.failed
    pods = core.list_namespaced_pod(namespace, label_selector="job-name=proof").items
    assert len(pods) == 3
    nodes = {p.spec.node_name for p in pods}
    assert nodes
    assert all(n.startswith("kwok-node-") for n in nodes)
    assert all(p.status.phase == "Succeeded" for p in pods)


def test_jaeger_receives_apiserver_spans(cluster: LocalCluster, core: client.CoreV1Api) -> None:
    core.list_namespace()  # make sure there is at least one fresh request to trace

    def query(path: str, **params: Any) -> Any:
        url = f"{cluster.jaeger_query_url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())

    def apiserver_traces() -> list[Any]:
        services = query("/api/services")["data"] or []
        if "apiserver" not in services:
            return []
        return list(query("/api/traces", service="apiserver", limit=20)["data"] or [])

    traces = wait_for(apiserver_traces, "spans of service 'apiserver'", within=60)
    spans = [span for trace in traces for span in trace["spans"]]
    assert spans
    processes = {p["serviceName"] for trace in traces for p in trace["processes"].values()}
    assert "apiserver" in processes


def test_second_up_on_a_running_cluster_is_refused(cluster: LocalCluster) -> None:
    with pytest.raises(AlreadyUpError, match="already up"):
        LocalCluster.up(ClusterConfig(state_dir=cluster.directory), progress=Progress(quiet=True))
    # ... and the running cluster is untouched.
    assert all(cluster.state.alive().values())


@pytest.mark.slow
def test_down_leaves_no_process_alive(tmp_path: Path) -> None:
    cfg = ClusterConfig(
        name="steward-test-down",
        state_dir=tmp_path / "c",
        nodes=1,
        die_with_parent=True,
        steward=True,  # as make up: Steward's informer, manager and controllers too
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    records = list(running.iter_processes())
    assert {r.name for r in records} == {
        "jaeger",
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "supervisor",
        "informer",
        "manager",
        # Not those off by default (bootstrapsigner, tokencleaner), as upstream's.
        *(f"{name}-controller" for name in ON_BY_DEFAULT),
    }
    assert {"bootstrapsigner", "tokencleaner"} <= set(STEWARD_CONTROLLERS)
    job_controller = next(r for r in records if r.name == "job-controller")
    assert job_controller.argv[1:5] == ["-m", "steward", "run", "job"]
    assert all(r.alive() for r in records)
    # The informer serves the cluster's objects, over mTLS to a known client certificate.
    with running.client_security().sync_channel(running.state.informer_address) as channel:
        stub = InformerServiceStub(channel)
        nodes = stub.List(ListRequest(type=ResourceType(version="v1", resource="nodes")))
        assert [item.metadata.name for item in nodes.items] == ["kwok-node-0"]
    # Stop it the way the CLI does: from the state directory alone.
    LocalCluster.find(cfg).down(progress=Progress(quiet=True))
    assert [r.name for r in records if r.alive()] == []
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_component_exiting_at_startup_shows_its_log(tmp_path: Path) -> None:
    cfg = ClusterConfig(
        name="steward-test-bad",
        state_dir=tmp_path / "c",
        nodes=0,
        die_with_parent=True,
        controllers="no-such-controller",
    )
    with pytest.raises(ComponentFailedError) as info:
        LocalCluster.up(cfg, progress=Progress(quiet=True))
    message = str(info.value)
    assert message.startswith("kube-controller-manager exited during start-up")
    assert "no-such-controller" in message  # the component's own words, from its log
    assert "logs are kept in" in message
    assert (tmp_path / "c" / "logs" / "kube-controller-manager.log").exists()
    assert not (tmp_path / "c" / "state.json").exists()
    # Everything that was started has been stopped again.
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout == "", leftover.stdout


ON_BY_DEFAULT = tuple(c.name for c in steward_controllers() if c.enabled_by_default)
"""The controllers ``make up`` runs (not bootstrapsigner and tokencleaner, off by default)."""


@pytest.mark.slow
def test_steward_job_controller_completes_a_plain_job(tmp_path: Path) -> None:
    cfg = ClusterConfig(
        name="steward-test-jobs",
        state_dir=tmp_path / "c",
        nodes=1,
        die_with_parent=True,
        steward=True,  # as make up
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    try:
        # Upstream's controllers of Steward's names are off: Steward's run.
        assert running.state.controllers == WITHOUT_STEWARDS
        kcm = next(r for r in running.iter_processes() if r.name == "kube-controller-manager")
        assert f"--controllers={WITHOUT_STEWARDS}" in kcm.argv
        # Its tokens controller, which ignores --controllers, has no key: Steward's signs.
        assert not [a for a in kcm.argv if a.startswith("--service-account-private-key-file")]
        api = k8s_config.new_client_from_config(config_file=str(running.kubeconfig))
        batch = client.BatchV1Api(api)
        job = client.V1Job(  # no spec.managedBy: what `kubectl apply` of a plain Job makes
            metadata=client.V1ObjectMeta(name="plain"),
            spec=client.V1JobSpec(
                parallelism=2,
                completions=3,
                template=client.V1PodTemplateSpec(
                    spec=client.V1PodSpec(
                        restart_policy="Never",
                        containers=[client.V1Container(name="work", image="busybox:1.36")],
                    )
                ),
            ),
        )
        batch.create_namespaced_job("default", job)

        def complete() -> client.V1JobStatus | None:
            status = batch.read_namespaced_job_status("plain", "default").status
            done = [
                c for c in status.conditions or [] if c.type == "Complete" and c.status == "True"
            ]
            return status if done else None

        status = wait_for(complete, "Job 'plain' to be Complete")
        assert status.succeeded == 3
        assert not status.failed

        def completed_by() -> set[str]:
            events = client.CoreV1Api(api).list_namespaced_event(
                "default", field_selector="involvedObject.name=plain"
            )
            return {str(e.reporting_component) for e in events.items if e.reason == "Completed"}

        # Steward's controller says so in its Events (upstream's would be job-controller).
        assert wait_for(completed_by, "the Completed Event") == {"steward.io/job-controller"}

        # A ReplicaSet's pods are made by Steward's controller: they carry the traceparent
        # of the reconcile that created them (upstream's would not).
        apps = client.AppsV1Api(api)
        labels = {"app": "plain-rs"}
        apps.create_namespaced_replica_set(
            "default",
            client.V1ReplicaSet(
                metadata=client.V1ObjectMeta(name="plain-rs"),
                spec=client.V1ReplicaSetSpec(
                    replicas=2,
                    selector=client.V1LabelSelector(match_labels=labels),
                    template=client.V1PodTemplateSpec(
                        metadata=client.V1ObjectMeta(labels=labels),
                        spec=client.V1PodSpec(
                            containers=[client.V1Container(name="web", image="nginx:1.27")]
                        ),
                    ),
                ),
            ),
        )

        def ready() -> int | None:
            status = apps.read_namespaced_replica_set_status("plain-rs", "default").status
            return status.ready_replicas if status.ready_replicas == 2 else None

        wait_for(ready, "ReplicaSet 'plain-rs' to have 2 ready replicas")
        pods = client.CoreV1Api(api).list_namespaced_pod("default", label_selector="app=plain-rs")
        assert len(pods.items) == 2
        assert all("traceparent" in (p.metadata.annotations or {}) for p in pods.items)

        # kube-controller-manager takes -daemonset as its DaemonSet controller (an alias of
        # daemonset-controller) and leaves it off; Steward's puts a DaemonSet's pod on the
        # node and says so in its Events.
        kcm_log = (running.directory / "logs" / "kube-controller-manager.log").read_text()
        assert re.search(r'controller is disabled" controller="daemonset-controller"', kcm_log)
        daemons = {"app": "plain-ds"}
        apps.create_namespaced_daemon_set(
            "default",
            client.V1DaemonSet(
                metadata=client.V1ObjectMeta(name="plain-ds"),
                spec=client.V1DaemonSetSpec(
                    selector=client.V1LabelSelector(match_labels=daemons),
                    template=client.V1PodTemplateSpec(
                        metadata=client.V1ObjectMeta(labels=daemons),
                        spec=client.V1PodSpec(
                            containers=[client.V1Container(name="agent", image="busybox:1.36")]
                        ),
                    ),
                ),
            ),
        )

        def scheduled() -> client.V1DaemonSetStatus | None:
            status = apps.read_namespaced_daemon_set_status("plain-ds", "default").status
            return status if status.number_ready == 1 else None

        status = wait_for(scheduled, "DaemonSet 'plain-ds' to have its pod ready")
        assert status.desired_number_scheduled == 1
        pods = client.CoreV1Api(api).list_namespaced_pod("default", label_selector="app=plain-ds")
        assert [p.spec.node_name for p in pods.items] == ["kwok-node-0"]

        def created_by() -> set[str]:
            events = client.CoreV1Api(api).list_namespaced_event(
                "default", field_selector="involvedObject.name=plain-ds"
            )
            found = {str(e.reporting_component) for e in events.items}
            return found if any(e.reason == "SuccessfulCreate" for e in events.items) else set()

        assert wait_for(created_by, "the SuccessfulCreate Event") == {
            "steward.io/daemonset-controller"
        }

        # kube-controller-manager takes -horizontalpodautoscaling as its HPA controller (an
        # alias of horizontal-pod-autoscaler-controller) and leaves it off; Steward's scales
        # the ReplicaSet up to the HPA's minReplicas and says so in its Events.
        assert re.search(
            r'controller is disabled" controller="horizontal-pod-autoscaler-controller"', kcm_log
        )
        client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
            "default",
            client.V2HorizontalPodAutoscaler(
                metadata=client.V1ObjectMeta(name="plain-hpa"),
                spec=client.V2HorizontalPodAutoscalerSpec(
                    scale_target_ref=client.V2CrossVersionObjectReference(
                        api_version="apps/v1", kind="ReplicaSet", name="plain-rs"
                    ),
                    min_replicas=3,
                    max_replicas=4,
                ),
            ),
        )

        def scaled() -> int | None:
            replicas = apps.read_namespaced_replica_set_scale("plain-rs", "default").spec.replicas
            return replicas if replicas == 3 else None

        wait_for(scaled, "ReplicaSet 'plain-rs' scaled to the HPA's minReplicas")

        def rescaled_by() -> set[str]:
            events = client.CoreV1Api(api).list_namespaced_event(
                "default", field_selector="involvedObject.name=plain-hpa"
            )
            return {
                str(e.reporting_component) for e in events.items if e.reason == "SuccessfulRescale"
            }

        assert wait_for(rescaled_by, "the SuccessfulRescale Event") == {
            "steward.io/horizontal-pod-autoscaler"
        }
        api.close()
    finally:
        running.down(progress=Progress(quiet=True))


def test_client_limits_audit_log_and_a_chosen_steward_controller(tmp_path: Path) -> None:
    """What the benchmarks start: the same ``--kube-api-qps``/``--kube-api-burst`` for
    kube-controller-manager and each of Steward's clients, only the Steward controllers
    asked for, and an audit log of the controllers' own requests (not the admin's)."""
    from bench.controllers import audit_requests

    cfg = ClusterConfig(
        name="steward-test-limits",
        state_dir=tmp_path / "c",
        nodes=1,
        die_with_parent=True,
        steward=True,
        steward_controllers=("job",),
        steward_tracing=False,
        kube_api_qps=7,
        kube_api_burst=9,
        audit_log=True,
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    try:
        procs = {r.name: r for r in running.iter_processes()}
        assert [n for n in procs if n.endswith("-controller")] == ["job-controller"]
        for name in ("kube-controller-manager", "informer", "job-controller"):
            assert "--kube-api-qps=7" in procs[name].argv, name
            assert "--kube-api-burst=9" in procs[name].argv, name
        api = k8s_config.new_client_from_config(config_file=str(running.kubeconfig))
        batch = client.BatchV1Api(api)
        batch.create_namespaced_job(
            "default",
            client.V1Job(
                metadata=client.V1ObjectMeta(name="audited"),
                spec=client.V1JobSpec(
                    template=client.V1PodTemplateSpec(
                        spec=client.V1PodSpec(
                            restart_policy="Never",
                            containers=[client.V1Container(name="w", image="busybox")],
                        )
                    )
                ),
            ),
        )
        audit = running.directory / "audit.log"

        def created_by_steward() -> dict[str, int] | None:
            if not audit.exists():
                return None
            found = audit_requests(audit, 0).get("steward", {}).get("steward:controller:job")
            return found if found and found.get("create pods") else None

        seen = wait_for(created_by_steward, "the Job's pod in the audit log", within=60)
        assert seen["create pods"] == 1
        # The admin's own create of the Job is not in the log.
        assert "steward-admin" not in audit.read_text()
    finally:
        running.down(progress=Progress(quiet=True))


def _job(name: str) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="work", image="busybox:1.36")],
                )
            )
        ),
    )


def _holders(cluster: LocalCluster) -> dict[str, str]:
    """Each controller's lease holder at the manager (an instance id names its pid)."""
    with cluster.client_security().sync_channel(cluster.state.manager_address) as channel:
        try:
            reply = manager_pb2_grpc.ManagerServiceStub(channel).ListControllers(
                manager_pb2.ListControllersRequest(), timeout=2.0
            )
        except grpc.RpcError:
            return {}
    return {c.name: c.holder for c in reply.controllers}


@pytest.mark.slow
def test_killed_steward_services_are_restarted_and_the_workload_converges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 of the informer, the manager and each controller in turn, while Jobs are
    created: the supervisor starts each again (after 1 s here; kubelet's 10 s by
    default), ``status`` shows the restart and the SIGKILL, every Job completes, and
    ``down`` stops the new processes too."""
    from steward.cli import main

    cfg = ClusterConfig(
        name="steward-test-restarts",
        state_dir=tmp_path / "c",
        nodes=1,
        die_with_parent=True,
        steward=True,
        steward_tracing=False,
        restart_backoff=RestartBackoff(initial=1.0, maximum=2.0),
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    first = {r.name: r for r in running.iter_processes()}
    services = ["informer", "manager", *(f"{name}-controller" for name in ON_BY_DEFAULT)]
    api = k8s_config.new_client_from_config(config_file=str(running.kubeconfig))
    created: list[str] = []
    done = threading.Event()

    def create_jobs() -> None:
        # A client of its own: the kubernetes client is not shared between threads.
        own = k8s_config.new_client_from_config(config_file=str(running.kubeconfig))
        batch = client.BatchV1Api(own)
        try:
            while not done.is_set():
                name = f"load-{len(created)}"
                batch.create_namespaced_job("default", _job(name))
                created.append(name)
                done.wait(1.0)
        finally:
            own.close()

    load = threading.Thread(target=create_jobs, name="create-jobs")
    load.start()
    try:
        for name in services:
            old = next(r for r in running.iter_processes() if r.name == name)
            os.kill(old.pid, signal.SIGKILL)

            def restarted(name: str = name, pid: int = old.pid) -> dict[str, Any] | None:
                status = LocalCluster.find(cfg).status()  # as `steward cluster status` reads it
                comp = next(c for c in status["components"] if c["name"] == name)
                return comp if comp["alive"] and comp["pid"] != pid else None

            comp = wait_for(restarted, f"{name} to be started again", within=30)
            assert comp["restarts"] == 1, comp
            assert comp["last_exit"] == "signal SIGKILL", comp
            if name in ("informer", "manager"):
                address = getattr(running.state, f"{name}_address")
                wait_for(functools.partial(serving, running, address), f"{name} serving")
        done.set()
        load.join(timeout=30)
        assert len(created) >= len(services)

        # Every controller is active again, in its new process.
        def all_active() -> bool:
            holders = _holders(running)
            pids = {r.name: r.pid for r in running.iter_processes()}
            return all(f"-{pids[f'{c}-controller']}-" in holders.get(c, "") for c in ON_BY_DEFAULT)

        wait_for(all_active, "every controller active in its new process", within=60)
        batch = client.BatchV1Api(api)

        def unfinished() -> list[str]:
            jobs = batch.list_namespaced_job("default").items
            finished = {
                j.metadata.name
                for j in jobs
                if any(
                    c.type == "Complete" and c.status == "True" for c in j.status.conditions or []
                )
            }
            return sorted(set(created) - finished)

        wait_for(lambda: not unfinished(), "every Job to complete", within=60)

        # The CLI shows each service's restart and how it last exited.
        assert main(["cluster", "status", "--state-dir", str(cfg.directory())]) == 0
        printed = capsys.readouterr().out
        for name in services:
            line = next(ln for ln in printed.splitlines() if ln.strip().startswith(name + " "))
            assert "restarts 1, last exit signal SIGKILL at " in line, line
        line = next(ln for ln in printed.splitlines() if ln.strip().startswith("kwok "))
        assert "restarts" not in line  # only the supervised ones
    finally:
        done.set()
        load.join(timeout=30)
        api.close()
        current = list(running.iter_processes())
        running.down(progress=Progress(quiet=True))
    assert [r.name for r in [*first.values(), *current] if r.alive()] == []


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


@pytest.mark.slow
def test_steward_tracing_is_switched_in_a_running_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``set_steward_tracing``: the supervisor replaces Steward's services with their spans
    exported to the cluster's Jaeger or not, not counted as restarts; each comes back
    serving or active in its new process, and a Job reconciled while tracing is on leaves
    the Job controller's spans in Jaeger."""
    from steward.cli import main
    from tests.tracing.jaeger import query

    cfg = ClusterConfig(
        name="steward-test-tracing-switch",
        state_dir=tmp_path / "c",
        nodes=1,
        die_with_parent=True,
        steward=True,
        steward_tracing=False,
        steward_controllers=("job",),
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    key = "OTEL_EXPORTER_OTLP_ENDPOINT"
    services = ["informer", "manager", "job-controller"]
    try:
        before = {r.name: r.pid for r in running.iter_processes()}
        replaced = []
        assert all(not _environ(before[n]).get(key) for n in services)

        assert running.set_steward_tracing(True, progress=Progress(quiet=True)) == services
        on = {r.name: r.pid for r in running.iter_processes()}
        for name in services:
            assert on[name] != before[name]
            assert _environ(on[name])[key] == running.otlp_endpoint
        assert on["kube-apiserver"] == before["kube-apiserver"]  # only Steward's services
        status = {c["name"]: c for c in running.status()["components"]}
        assert all(status[n]["alive"] and status[n]["restarts"] == 0 for n in services)
        assert f"-{on['job-controller']}-" in _holders(running)["job"]
        # Asked again, nothing changes.
        assert running.set_steward_tracing(True, progress=Progress(quiet=True)) == []

        api = k8s_config.new_client_from_config(config_file=str(running.kubeconfig))
        client.BatchV1Api(api).create_namespaced_job("default", _job("traced"))

        def job_controller_spans() -> int:
            found = query(running, "/api/traces", service="steward-controller-job", limit="20")
            return sum(len(t["spans"]) for t in found.get("data") or [])

        wait_for(job_controller_spans, "the Job controller's spans in Jaeger", within=60)

        # As a user switches it: `steward cluster tracing off`.
        assert main(["cluster", "tracing", "off", "--state-dir", str(cfg.directory())]) == 0
        printed = capsys.readouterr().out
        assert printed.strip() == f"tracing off: replaced {', '.join(services)}"
        off = {r.name: r.pid for r in running.iter_processes()}
        replaced = [r for r in running.iter_processes() if r.name in services]
        for name in services:
            assert off[name] != on[name]
            assert not _environ(off[name]).get(key)
        assert serving(running, running.state.informer_address)
    finally:
        running.down(progress=Progress(quiet=True))
    assert replaced and [r.name for r in replaced if r.alive()] == []
