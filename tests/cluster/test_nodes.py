"""Real nodes' configuration and Steward's pod manifests, checked without starting them
(tests/pods/ starts them)."""

from __future__ import annotations

import base64
import itertools
import socket
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from steward import deploy, static_core
from steward.cluster import nodes, pods
from steward.cluster.identities import STEWARD_CONTROLLERS
from steward.cluster.registry import RegisteredController, steward_controllers
from steward.v1 import manager_pb2

pytestmark = pytest.mark.unit


def _plan(tmp_path: Path, count: int = 3) -> list[nodes.RealNode]:
    return nodes.plan(tmp_path, count, itertools.count(20000))


def test_each_node_has_its_own_range_bridge_network_and_ports(tmp_path: Path) -> None:
    planned = _plan(tmp_path)
    assert [n.pod_cidr for n in planned] == ["10.245.0.0/24", "10.245.1.0/24", "10.245.2.0/24"]
    assert len({n.bridge for n in planned}) == 3
    assert all(len(n.bridge) <= 15 for n in planned)  # IFNAMSIZ
    assert len({n.network for n in planned}) == 3
    ports = [p for n in planned for p in (n.kubelet_port, n.kubelet_healthz_port)]
    assert len(set(ports)) == len(ports)
    # Another cluster's nodes get other bridges and networks.
    other = _plan(tmp_path / "other", 1)[0]
    assert other.bridge != planned[0].bridge and other.network != planned[0].network


def test_node_files_stay_under_the_node_directory(tmp_path: Path) -> None:
    node = _plan(tmp_path, 1)[0]
    conf = nodes.write_node_files(node).read_text()
    paths = [line.split('"')[1] for line in conf.splitlines() if '= "/' in line]
    system = {nodes.RUNC, str(nodes.CNI_BIN)}
    ours = (str(node.directory), str(node.runtime_dir))
    assert paths and all(p.startswith(ours) or p in system for p in paths)
    assert node.runtime_dir.parent == nodes.RUNTIME_ROOT
    # A Unix socket's path may not exceed 104 bytes, however deep the state directory.
    assert len(f"{node.containerd_socket}.ttrpc") < 104
    assert "restrict_oom_score_adj = true" in conf
    assert f'sandbox_image = "{nodes.SANDBOX_IMAGE}"' in conf
    cni = nodes.cni_config(node)
    assert cni["plugins"][0]["ipam"]["dataDir"].startswith(str(node.directory))
    assert cni["plugins"][0]["bridge"] == node.bridge


def test_the_kubelet_serves_authenticated_and_authorized(tmp_path: Path) -> None:
    node = _plan(tmp_path, 1)[0]
    config = nodes.kubelet_config(
        node, node_ip="192.0.2.2", ca=tmp_path / "ca.crt", serving=(tmp_path / "a", tmp_path / "b")
    )
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["webhook"] == {"enabled": True}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["readOnlyPort"] == 0
    assert config["registerWithTaints"] == [
        {"key": nodes.REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
    ]
    assert config["podLogsDir"].startswith(str(node.directory))
    assert config["cgroupRoot"] == f"/{nodes.CGROUP_PARENT}/{node.name}"


JOB = RegisteredController(
    name="job",
    definition="steward.controllers.job.controller:CONTROLLER",
    launch=("-m", "steward", "run", "job"),
    beside_upstream=("--no-take-unmanaged",),
    alone=("--take-unmanaged",),
)


WITHOUT_STEWARDS = ",".join(["*", *(f"-{name}" for name in STEWARD_CONTROLLERS)])
ON_BY_DEFAULT = tuple(c.name for c in steward_controllers() if c.enabled_by_default)
"""The controllers the local overlay deploys (not those off by default)."""
"""kube-controller-manager's ``--controllers`` once Steward has taken over
(``*,-daemonset,-deployment,-endpoint,-endpointslice,-horizontalpodautoscaling,-job,
-replicaset``)."""


def _rendered() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(deploy.render("local")) if d]


def _deployment(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name)


def test_pods_ask_for_a_real_node_and_export_to_the_cluster_jaeger() -> None:
    docs = pods.manifests(
        _rendered(),
        otlp_endpoint="http://192.0.2.2:4317",
        kcm_controllers=WITHOUT_STEWARDS,
        registry=[JOB],
    )
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == 2 + len(ON_BY_DEFAULT)
    for dep in deployments:
        spec = dep["spec"]["template"]["spec"]
        assert spec["nodeSelector"][nodes.REAL_NODE_LABEL] == "true"
        assert any(t["key"] == nodes.REAL_NODE_LABEL for t in spec["tolerations"])
        container = spec["containers"][0]
        assert container["image"].endswith(":dev")
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://192.0.2.2:4317"
    job_args = _deployment(docs, "steward-controller-job")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--take-unmanaged" in job_args and "--no-take-unmanaged" not in job_args


def test_a_controller_beside_upstream_keeps_its_flags() -> None:
    docs = pods.manifests(
        _rendered(), otlp_endpoint="http://x:4317", kcm_controllers="*", registry=[JOB]
    )
    job_args = _deployment(docs, "steward-controller-job")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--no-take-unmanaged" in job_args and "--take-unmanaged" not in job_args


def test_the_cluster_keys_go_to_their_one_controller_each(tmp_path: Path) -> None:
    """The signing CA, the service-account key and the CA bundle are Secrets of their
    own, from the cluster's PKI, each mounted by one Deployment; no TLS certificate is
    issued under their names."""
    from steward.cluster.pki import CertificateAuthority

    pki = tmp_path / "pki"
    ca = CertificateAuthority(pki)
    (pki / "sa.key").write_text("service-account key")
    docs = pods.manifests(
        _rendered(), otlp_endpoint="http://x:4317", kcm_controllers="*", registry=[JOB]
    )
    keys = {s["metadata"]["name"]: s for s in pods.key_secrets(docs, pki)}
    assert set(keys) == set(pods.KEY_SECRETS)
    signing = keys["steward-cluster-signing"]
    assert signing["type"] == "kubernetes.io/tls"
    assert base64.b64decode(signing["data"]["tls.key"]) == ca.pair.key.read_bytes()
    assert base64.b64decode(keys["steward-service-account-key"]["data"]["sa.key"]) == (
        b"service-account key"
    )
    assert base64.b64decode(keys["steward-root-ca"]["data"]["ca.crt"]) == (
        ca.pair.cert.read_bytes()
    )
    mounted_by = {
        name: [
            d["metadata"]["name"]
            for d in docs
            if d["kind"] == "Deployment" and name in pods._secret_names(d)
        ]
        for name in pods.KEY_SECRETS
    }
    assert mounted_by == {
        "steward-cluster-signing": ["steward-controller-csrsigning"],
        "steward-service-account-key": ["steward-controller-serviceaccount-token"],
        "steward-root-ca": ["steward-controller-root-ca-cert-publisher"],
    }
    issued = {s["metadata"]["name"] for s in pods.tls_secrets(docs, ca, tmp_path / "tls")}
    assert not issued & set(pods.KEY_SECRETS)


def test_tls_secrets_serve_the_service_names(tmp_path: Path) -> None:
    from cryptography import x509

    from steward.cluster.pki import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    docs = pods.manifests(
        _rendered(), otlp_endpoint="http://x:4317", kcm_controllers="*", registry=[JOB]
    )
    secrets = {s["metadata"]["name"]: s for s in pods.tls_secrets(docs, ca, tmp_path / "tls")}
    assert set(secrets) == {
        "steward-informer-tls",
        "steward-manager-tls",
        *(f"steward-controller-{name}-tls" for name in ON_BY_DEFAULT),
    }
    assert "steward-controller-daemonset-tls" in secrets
    assert "steward-controller-horizontalpodautoscaling-tls" in secrets
    cert = x509.load_pem_x509_certificate(
        (tmp_path / "tls" / "steward-informer-tls" / "tls.crt").read_bytes()
    )
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "steward-informer.steward.svc" in names.get_values_for_type(x509.DNSName)
    client = x509.load_pem_x509_certificate(
        (tmp_path / "tls" / "steward-controller-job-tls" / "tls.crt").read_bytes()
    )
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usage
    assert secrets["steward-informer-tls"]["type"] == "kubernetes.io/tls"


def test_self_hosted_steward_starts_with_nothing_to_hand_over() -> None:
    """Steward's static core starts every controller's pods: the manager starts with
    every controller enabled (no ``--controllers``), each Deployment of the overlay keeps
    one replica, and controllers register as standbys (a restarted pod finds its
    predecessor's lease running)."""
    docs = pods.manifests(
        _rendered(), otlp_endpoint="http://x:4317", kcm_controllers=WITHOUT_STEWARDS, registry=[JOB]
    )
    replicas = {
        d["metadata"]["name"]: d["spec"]["replicas"] for d in docs if d["kind"] == "Deployment"
    }
    assert set(replicas.values()) == {1}
    manager = _deployment(docs, "steward-manager")["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in manager["args"] if a.startswith("--controllers")], manager["args"]
    job_args = _deployment(docs, "steward-controller-job")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--standby" in job_args


def test_endpointslice_controller_has_slices_of_its_own_only_beside_upstreams() -> None:
    """Beside upstream's endpointslice-controller, Steward's writes slices of its own
    managed-by value (the manifest's flag); where upstream's is off the flag goes (its
    definition's flags for running alone), it writes upstream's value, its default, and
    deletes the slices it wrote under its own value before the hand-over."""
    (slices,) = [c for c in steward_controllers() if c.name == "endpointslice"]
    own = "--managed-by=endpointslice-controller.steward.io"
    for kcm, expected in ((WITHOUT_STEWARDS, False), ("*", True)):
        docs = pods.manifests(
            _rendered(), otlp_endpoint="http://x:4317", kcm_controllers=kcm, registry=[slices]
        )
        args = _deployment(docs, "steward-controller-endpointslice")["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
        assert (own in args) is expected, (kcm, args)
        replace = "--replace-managed-by=endpointslice-controller.steward.io"
        assert (replace in args) is not expected, (kcm, args)
        assert "--standby" in args


@pytest.mark.parametrize("name", ["daemonset", "horizontalpodautoscaling"])
def test_controller_without_beside_flags_runs_alone_as_a_standby(name: str) -> None:
    """Self-hosted, Steward's DaemonSet and HorizontalPodAutoscaler controllers register as
    standbys like the others, one replica, with no flags of running beside upstream's."""
    (controller,) = [c for c in steward_controllers() if c.name == name]
    assert controller.beside_upstream is None
    docs = pods.manifests(
        _rendered(),
        otlp_endpoint="http://x:4317",
        kcm_controllers=WITHOUT_STEWARDS,
        registry=[controller],
    )
    dep = _deployment(docs, f"steward-controller-{name}")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--standby" and args.count("--standby") == 1, args
    assert dep["spec"]["replicas"] == 1


def test_every_registry_is_loopbacks_discard_port(tmp_path: Path) -> None:
    """Images are imported, never pulled: a pull of a missing image (e2e's specs pull
    ``gcr.io/...:nonexistent`` on purpose) must not reach for the network."""
    node = _plan(tmp_path, 1)[0]
    conf = nodes.write_node_files(node).read_text()
    certs = node.directory / "containerd" / "certs.d"
    assert f'config_path = "{certs}"' in conf
    for host in ("_default", "docker.io", "gcr.io", "registry.k8s.io"):
        text = (certs / host / "hosts.toml").read_text()
        assert 'server = "http://127.0.0.1:9"' in text


class _Flaky:
    """A manager that answers GetController with ``codes`` in turn, then a record."""

    def __init__(self, codes: list[grpc.StatusCode]) -> None:
        self.codes = codes
        self.calls = 0

    def get_controller(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.calls += 1
        if self.codes:
            context.abort(self.codes.pop(0), "not now")
        return manager_pb2.GetControllerResponse(
            controller=manager_pb2.Controller(name=request.name)
        )


def _serve(servicer: _Flaky) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    method = grpc.unary_unary_rpc_method_handler(
        servicer.get_controller,
        request_deserializer=manager_pb2.GetControllerRequest.FromString,
        response_serializer=manager_pb2.GetControllerResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "steward.v1.ManagerService", {"GetController": method}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class _Plain:
    def sync_channel(self, address: str) -> grpc.Channel:
        return grpc.insecure_channel(address)


def test_manager_calls_retry_a_manager_that_is_not_there_or_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A manager that is not the leader or restarting (UNAVAILABLE) or that answered too
    late (DEADLINE_EXCEEDED) is asked again; any other refusal is an error at once."""
    flaky = _Flaky([grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
    server, address = _serve(flaky)
    monkeypatch.setattr(pods, "manager_security", lambda cluster: _Plain())
    monkeypatch.setattr(pods, "manager_address", lambda cluster: address)
    try:
        request = manager_pb2.GetControllerRequest(name="job")
        reply = pods.manager_call(None, "GetController", request, timeout=30)
        assert reply.controller.name == "job" and flaky.calls == 3
        flaky.codes = [grpc.StatusCode.PERMISSION_DENIED]
        with pytest.raises(pods.PodsError, match="PERMISSION_DENIED"):
            pods.manager_call(None, "GetController", request, timeout=30)
        assert flaky.calls == 4
    finally:
        server.stop(None)


def test_a_static_core_port_taken_on_any_address_is_refused() -> None:
    """The static core listens on every address of the node: a port something listens on
    is refused before anything is written, naming the component; free ones pass."""
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        number = taken.getsockname()[1]
        ports = {"informer": static_core.HostPorts(metrics=number, health=number + 1)}
        with pytest.raises(pods.PodsError, match=rf"port {number} of Steward's static informer"):
            pods._ports_free(ports)
    pods._ports_free({"informer": static_core.HostPorts(metrics=number, health=number)})
