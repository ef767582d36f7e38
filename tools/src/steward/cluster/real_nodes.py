"""The real nodes' steps in the cluster's life: started after kwok, drained and undone at down."""

from __future__ import annotations

import base64
import functools
import secrets
import time
from pathlib import Path

import yaml

from steward.cluster import admin, binaries, nodes, pki, rbac
from steward.cluster.certificates import client_kubeconfig
from steward.cluster.config import ClusterConfig
from steward.cluster.errors import ClusterError
from steward.cluster.identities import COREDNS_USER, KUBELET_CLIENT_USER
from steward.cluster.progress import Progress
from steward.cluster.startup import Probe, Spec, failure, launch, run
from steward.cluster.state import SERVICE_CIDR, ClusterState

FOOTPRINT = "host-footprint.json"
"""What real nodes may change on the machine, as it was before (see steward.cluster.nodes)."""


def claim_machine(state: ClusterState) -> None:
    """Before anything changes the machine: take it, and record what ``down`` puts back."""
    d = state.directory
    nodes.claim_machine(d)
    nodes.HostFootprint.take(d, state.real_nodes).save(d / FOOTPRINT)


def start(
    state: ClusterState,
    config: ClusterConfig,
    paths: dict[str, Path],
    ca: pki.CertificateAuthority,
    out: Progress,
) -> None:
    """containerd and a kubelet per real node, each waited on until its node is
    Ready; then kube-proxy and CoreDNS (see :mod:`steward.cluster.nodes`)."""
    d = state.directory
    p = state.ports
    timeout = config.start_timeout
    _bind_node_components(state)
    footprint = nodes.HostFootprint.load(d / FOOTPRINT)
    if footprint is None:
        raise ClusterError(f"{d / FOOTPRINT} is missing: the machine was not claimed")
    rules = nodes.cluster_rules(d, service_cidr=SERVICE_CIDR)
    nodes.add_cluster_rules(footprint, rules, d / FOOTPRINT)
    # Steward's archive (with --steward-pods) holds the pause image too.
    archives = list(config.node_images) or [_sandbox_archive(paths, out)]
    for node in state.real_nodes:
        started = time.monotonic()
        conf = nodes.write_node_files(node)
        node.kubelet_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        nodes.make_cgroups(node)
        name = f"containerd-{node.name}"
        launch(state, name, [nodes.CONTAINERD, "--config", str(conf)], config)
        nodes.wait_for_socket(node.containerd_socket, "ctr", timeout, state.process(name).alive)
        for archive in archives:
            nodes.import_images(node, archive, out)
        user = f"system:node:{node.name}"
        kubeconfig = node.directory / "kubelet.kubeconfig"
        if config.node_bootstrap:
            # The kubelet writes its kubeconfig itself once its first certificate is
            # issued, and rotates that certificate (kubelet-client-current.pem).
            credentials = [
                f"--bootstrap-kubeconfig={bootstrap_kubeconfig(state, ca, node.directory)}",
                f"--kubeconfig={kubeconfig}",
            ]
        else:
            client_kubeconfig(
                state, ca, f"node-{node.name}", user, orgs=("system:nodes",), path=kubeconfig
            )
            credentials = [f"--kubeconfig={kubeconfig}"]
        serving = ca.issue(
            f"node-{node.name}-serving",
            node.name,
            dns=(node.name,),
            ips=(state.host,),
            server=True,
        )
        kubelet_config = nodes.write_yaml(
            node.directory / "kubelet.yaml",
            nodes.kubelet_config(
                node,
                node_ip=state.host,
                ca=ca.pair.cert,
                serving=(serving.cert, serving.key),
                tainted=config.real_node_taint,
                rotate=config.node_bootstrap,
            ),
        )
        launch(
            state,
            f"kubelet-{node.name}",
            [
                str(paths["kubelet"]),
                f"--config={kubelet_config}",
                *credentials,
                f"--hostname-override={node.name}",
                f"--node-ip={state.host}",
                f"--node-labels={nodes.REAL_NODE_LABEL}=true",
                f"--root-dir={node.kubelet_root}",
                f"--cert-dir={node.directory / 'pki'}",
                "--v=1",
            ],
            config,
        )
        _wait_ready(state, node.name, timeout, out)
        out.say(f"real node {node.name} Ready {time.monotonic() - started:.1f}s after start")

    proxy_config = nodes.write_yaml(
        d / "kube-proxy.yaml",
        nodes.kube_proxy_config(
            kubeconfig=client_kubeconfig(state, ca, "kube-proxy", "system:kube-proxy"),
            node=state.real_nodes[0],
            healthz_port=p["kube_proxy_healthz"],
            metrics_port=p["kube_proxy_metrics"],
        ),
    )
    proxy = [str(paths["kube-proxy"]), f"--config={proxy_config}"]
    healthz = f"http://127.0.0.1:{p['kube_proxy_healthz']}/healthz"
    run(state, Spec("kube-proxy", proxy, Probe(healthz)), config, out)
    corefile = d / "Corefile"
    corefile.write_text(
        nodes.corefile(
            node_ip=state.host,
            kubeconfig=client_kubeconfig(state, ca, "coredns", COREDNS_USER),
            health_port=p["coredns_health"],
            ready_port=p["coredns_ready"],
        )
    )
    coredns = [str(paths["coredns"]), "-conf", str(corefile)]
    ready = f"http://127.0.0.1:{p['coredns_ready']}/ready"
    run(state, Spec("coredns", coredns, Probe(ready)), config, out)


BOOTSTRAP_GROUP = "system:bootstrappers"
"""The group every bootstrap token authenticates in (``system:bootstrap:<token id>``)."""

NODE_BOOTSTRAP_BINDINGS = (
    ("steward:node-bootstrapper", "system:node-bootstrapper", BOOTSTRAP_GROUP),
    (
        "steward:node-autoapprove-bootstrap",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        BOOTSTRAP_GROUP,
    ),
    (
        "steward:node-autoapprove-certificate-rotation",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    ),
)
"""What a cluster operator binds for TLS bootstrap, as kubeadm does: bootstrappers may
ask for certificates and have their node client requests approved, nodes may renew
their own (name, bootstrap ClusterRole, group)."""


def bootstrap_kubeconfig(state: ClusterState, ca: pki.CertificateAuthority, into: Path) -> Path:
    """A new bootstrap token (a ``bootstrap.kubernetes.io/token`` Secret in kube-system,
    valid for an hour, for authentication only) and a kubeconfig with it, written to
    ``into/bootstrap.kubeconfig`` (mode 0600); the bindings of
    :data:`NODE_BOOTSTRAP_BINDINGS` are made if missing."""
    for name, role, group in NODE_BOOTSTRAP_BINDINGS:
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
        }
        admin.create(state, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    token_id = "".join(secrets.choice(alphabet) for _ in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _ in range(16))
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    admin.create(
        state,
        "/api/v1/namespaces/kube-system/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
            "stringData": {
                "token-id": token_id,
                "token-secret": token_secret,
                "expiration": expires,
                "usage-bootstrap-authentication": "true",
                "description": "a real node's TLS bootstrap (steward.cluster.real_nodes)",
            },
        },
    )
    path = into / "bootstrap.kubeconfig"
    ca_data = base64.b64encode(ca.pair.cert.read_bytes()).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": state.name,
                        "cluster": {"server": state.server, "certificate-authority-data": ca_data},
                    }
                ],
                "users": [{"name": "bootstrap", "user": {"token": f"{token_id}.{token_secret}"}}],
                "contexts": [
                    {"name": state.name, "context": {"cluster": state.name, "user": "bootstrap"}}
                ],
                "current-context": state.name,
            },
            sort_keys=False,
        )
    )
    path.chmod(0o600)
    return path


def _sandbox_archive(paths: dict[str, Path], out: Progress) -> Path:
    """The OCI archive of the pause image (:data:`nodes.SANDBOX_IMAGE`)."""
    from steward import images  # the image builder lives beside the cluster tools

    return images.build_pause_archive(paths["pause"], out=out)


def _bind_node_components(state: ClusterState) -> None:
    """RBAC of the node components: kube-proxy (bootstrap ``system:node-proxier``),
    CoreDNS (reads Services, EndpointSlices, namespaces and pods) and kube-apiserver's
    kubelet client (bootstrap ``system:kubelet-api-admin``). The kubelets need none:
    the Node authorizer judges them."""
    rbac.create_cluster_role(
        state,
        COREDNS_USER,
        [
            {
                "apiGroups": [""],
                "resources": ["services", "namespaces", "pods", "endpoints"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
        ],
    )
    for user, role in (
        ("system:kube-proxy", "system:node-proxier"),
        (COREDNS_USER, COREDNS_USER),
        (KUBELET_CLIENT_USER, "system:kubelet-api-admin"),
    ):
        rbac.bind_user(state, name=user, role=role, user=user)


def _wait_ready(state: ClusterState, name: str, timeout: float, out: Progress) -> None:
    """Wait until the kubelet of real node ``name`` made its node Ready."""
    started = time.monotonic()
    kubelet = state.process(f"kubelet-{name}")
    while True:
        node = admin.request(state, "GET", f"/api/v1/nodes/{name}", ok=(200, 404))
        if node.get("kind") == "Node" and nodes.node_ready(node):
            return
        if not kubelet.alive():
            raise failure(state, f"kubelet-{name}", "exited before its node was Ready")
        waited = time.monotonic() - started
        if waited > timeout:
            raise failure(state, f"kubelet-{name}", f"left its node not Ready for {waited:.0f}s")
        out.tick(f"waiting for real node {name} to be Ready: {waited:.0f}s")
        time.sleep(0.5)


def cordon_and_drain(state: ClusterState, out: Progress) -> None:
    """Before the processes stop: no new pod on the real nodes, then their pods
    deleted and waited on, so that their kubelets stop the containers and release
    their network. Skipped when kube-apiserver no longer answers."""
    real = state.real_nodes
    kubelets = [r for r in state.processes if r.name.startswith("kubelet-")]
    if not any(r.alive() for r in kubelets):
        return
    api = functools.partial(admin.request, state)
    try:
        for node in real:
            api(
                "PATCH",
                f"/api/v1/nodes/{node.name}",
                {"spec": {"unschedulable": True}},
                ok=(200, 404),
            )
        nodes.drain(api, real, timeout=30.0, out=out)
    except (ClusterError, OSError) as err:
        out.say(f"could not drain the real nodes ({err}); their containers are killed")


def restore_host(state: ClusterState, out: Progress) -> None:
    """After every process stopped: put the machine back as it was (sysctls, mounts,
    cgroups, bridges, kube-proxy's and the CNI plugin's rules, directories)."""
    footprint = nodes.HostFootprint.load(state.directory / FOOTPRINT)
    if footprint is None:
        nodes.release_machine(state.directory)
        return
    proxy = binaries.TOOLS["kube-proxy"].cached()
    problems = nodes.restore_host(
        state.real_nodes,
        footprint,
        kube_proxy=proxy if proxy.is_file() else None,
        out=out,
    )
    for problem in problems:
        out.say(f"warning: {problem}")
    if not problems:
        nodes.release_machine(state.directory)
        out.say("the machine is as it was before the real nodes started")
