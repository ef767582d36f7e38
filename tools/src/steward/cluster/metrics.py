"""The resource metrics plane: metrics-server and Steward's metrics adapter, as APIServices."""

from __future__ import annotations

import base64
from pathlib import Path

from steward.cluster import admin, pki, rbac
from steward.cluster.certificates import client_kubeconfig
from steward.cluster.config import ClusterConfig
from steward.cluster.errors import ClusterError
from steward.cluster.identities import METRICS_ADAPTER_USER, METRICS_SERVER_USER
from steward.cluster.progress import Progress
from steward.cluster.startup import launch, poll, secure_serving
from steward.cluster.state import LOOPBACK, ClusterState

METRICS_COMPONENTS = ("metrics-server", "metrics-adapter")
"""The metrics pipeline's components (:attr:`ClusterConfig.metrics`), started once the
simulated nodes are Ready: metrics-server (``metrics.k8s.io``) and Steward's metrics
adapter (``custom.metrics.k8s.io``, ``external.metrics.k8s.io``)."""

METRIC_RESOLUTION = "10s"
"""metrics-server's ``--metric-resolution``: how often it scrapes every node, the shortest
v0.8.0 allows. A new usage shows in the metrics API after one or two scrapes."""


def start(
    state: ClusterState,
    config: ClusterConfig,
    paths: dict[str, Path],
    ca: pki.CertificateAuthority,
    out: Progress,
) -> None:
    """metrics-server as its own identity (:data:`METRICS_SERVER_USER`), scraping
    every node's kubelet: kwok's simulated ones, and the real nodes' kubelets, which
    serve ``/metrics/resource`` on the node address with a serving certificate of the
    cluster CA naming that address, and take metrics-server's client certificate (of
    the same CA) and authorize it by SubjectAccessReview (``nodes/metrics``, granted
    by ``system:metrics-server``). Registered as the APIService
    ``v1beta1.metrics.k8s.io`` and waited on until the API answers through
    kube-apiserver; so is Steward's metrics adapter (:func:`_start_adapter`)."""
    port = state.ports["metrics_server"]
    kubeconfig = client_kubeconfig(state, ca, "metrics-server", METRICS_SERVER_USER)
    serving = _serving(ca, "metrics-server")
    _bind_metrics_server(state)
    launch(
        state,
        "metrics-server",
        [
            str(paths["metrics-server"]),
            f"--kubeconfig={kubeconfig}",
            *secure_serving(kubeconfig, port, serving),
            # kwok serves every simulated kubelet on its own port at the node's
            # InternalIP (loopback), a real node's kubelet on its port at the
            # machine's own address (its InternalIP, --node-ip); both with a serving
            # certificate of the cluster CA, so no --kubelet-insecure-tls.
            "--kubelet-preferred-address-types=InternalIP",
            "--kubelet-use-node-status-port",
            f"--kubelet-certificate-authority={ca.pair.cert}",
            f"--metric-resolution={METRIC_RESOLUTION}",
            # Must stay under 90% of the resolution.
            "--kubelet-request-timeout=5s",
            "--v=1",
        ],
        config,
    )
    _register_api_service(state, "metrics-server", port, "metrics.k8s.io", "v1beta1")
    _start_adapter(state, config, paths, ca)
    timeout = config.start_timeout
    _wait_api(state, "metrics-server", "/apis/metrics.k8s.io/v1beta1/nodes", timeout, out)
    for api in ("custom.metrics.k8s.io/v1beta2", "external.metrics.k8s.io/v1beta1"):
        _wait_api(state, "metrics-adapter", f"/apis/{api}", timeout, out)


def _start_adapter(
    state: ClusterState,
    config: ClusterConfig,
    paths: dict[str, Path],
    ca: pki.CertificateAuthority,
) -> None:
    """Steward's metrics adapter as :data:`METRICS_ADAPTER_USER`, registered as the
    APIServices ``v1beta2.custom.metrics.k8s.io`` and
    ``v1beta1.external.metrics.k8s.io`` (waited on by the caller)."""
    port = state.ports["metrics_adapter"]
    user = METRICS_ADAPTER_USER
    kubeconfig = client_kubeconfig(state, ca, "metrics-adapter", user)
    serving = _serving(ca, "metrics-adapter")
    rbac.create_cluster_role(
        state, user, [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}]
    )
    rbac.bind_user(state, name=user, role=user, user=user)
    _bind_aggregated_server(state, user)
    launch(
        state,
        "metrics-adapter",
        [
            str(paths["metrics-adapter"]),
            f"--lister-kubeconfig={kubeconfig}",
            *secure_serving(kubeconfig, port, serving),
            "--v=1",
        ],
        config,
    )
    for group, version in (
        ("custom.metrics.k8s.io", "v1beta2"),
        ("external.metrics.k8s.io", "v1beta1"),
    ):
        _register_api_service(state, "metrics-adapter", port, group, version)


def _serving(ca: pki.CertificateAuthority, service: str) -> pki.KeyPair:
    """The serving certificate of the aggregated server behind Service ``service``."""
    return ca.issue(
        f"{service}-serving",
        service,
        dns=("localhost", *service_names(service)),
        ips=(LOOPBACK,),
        server=True,
    )


def _bind_metrics_server(state: ClusterState) -> None:
    """metrics-server's RBAC, as upstream's manifests give it (to its user here, not a
    service account): ``system:metrics-server`` (nodes, pods, nodes/metrics),
    ``system:auth-delegator``, ``extension-apiserver-authentication-reader`` in
    kube-system (:func:`_bind_aggregated_server`), and
    ``system:aggregated-metrics-reader``, which the bootstrap view, edit and admin
    roles take in."""
    rbac.create_cluster_role(
        state,
        "system:metrics-server",
        [
            {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
            {
                "apiGroups": [""],
                "resources": ["pods", "nodes"],
                "verbs": ["get", "list", "watch"],
            },
        ],
    )
    rbac.create_cluster_role(
        state,
        "system:aggregated-metrics-reader",
        [
            {
                "apiGroups": ["metrics.k8s.io"],
                "resources": ["pods", "nodes"],
                "verbs": ["get", "list", "watch"],
            }
        ],
        labels={
            f"rbac.authorization.k8s.io/aggregate-to-{role}": "true"
            for role in ("view", "edit", "admin")
        },
    )
    user = METRICS_SERVER_USER
    rbac.bind_user(state, name="system:metrics-server", role="system:metrics-server", user=user)
    _bind_aggregated_server(state, user)


def _bind_aggregated_server(state: ClusterState, user: str) -> None:
    """What every aggregated API server's ``user`` needs: token and access reviews
    (``system:auth-delegator``) and the front proxy's CA and header names, which
    kube-apiserver publishes in kube-system's ConfigMap
    ``extension-apiserver-authentication`` (Role
    ``extension-apiserver-authentication-reader``)."""
    rbac.bind_user(state, name=f"{user}:auth-delegator", role="system:auth-delegator", user=user)
    admin.create(
        state,
        f"{rbac.API}/namespaces/kube-system/rolebindings",
        {
            "apiVersion": f"{rbac.GROUP}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{user}:auth-reader", "namespace": "kube-system"},
            "roleRef": {
                "apiGroup": rbac.GROUP,
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
            "subjects": [rbac.user_subject(user)],
        },
    )


def _register_api_service(
    state: ClusterState, service: str, port: int, group: str, version: str
) -> None:
    """APIService ``<version>.<group>`` served by the process listening on loopback
    ``port``, behind a Service ``<service>`` in kube-system of type ExternalName.

    kube-apiserver reaches an APIService's server through its Service: a ClusterIP
    Service would need endpoints, and endpoints may not hold a loopback address; an
    ExternalName Service is dialled at its name and the APIService's port as they
    are. The server's certificate must name ``<service>.kube-system.svc`` (the name
    the aggregator verifies) and be signed by the cluster CA (the ``caBundle``)."""
    admin.create(
        state,
        "/api/v1/namespaces/kube-system/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": "kube-system"},
            "spec": {
                "type": "ExternalName",
                "externalName": LOOPBACK,
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        },
    )
    ca_bundle = base64.b64encode(state.pki_file("ca.crt").read_bytes()).decode()
    admin.create(
        state,
        "/apis/apiregistration.k8s.io/v1/apiservices",
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.{group}"},
            "spec": {
                "group": group,
                "version": version,
                "service": {"name": service, "namespace": "kube-system", "port": port},
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    )


def _wait_api(state: ClusterState, name: str, path: str, timeout: float, out: Progress) -> None:
    """Wait until kube-apiserver answers ``path`` (an aggregated API served by
    component ``name``) with 200."""
    last = ""

    def served() -> bool:
        nonlocal last
        try:
            admin.request(state, "GET", path)
        except (ClusterError, OSError) as err:
            last = str(err)
            return False
        return True

    poll(
        state,
        name,
        f"{path} through kube-apiserver",
        served,
        timeout=timeout,
        out=out,
        interval=0.5,
        done="serving",
        late=lambda: f"was not served at {path} after {timeout:.0f}s ({last[:300]})",
    )


def service_names(service: str, namespace: str = "kube-system") -> tuple[str, ...]:
    """The DNS names of a Service, the one kube-apiserver's aggregator verifies first."""
    return (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")
