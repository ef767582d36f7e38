"""Steward deployed as pods on the local control plane's real nodes, as its users deploy it.

Its core — the informer, the manager and the ReplicaSet and Deployment controllers — runs
as the first real node's static pods (:mod:`steward.static_core`): the kubelet keeps them
alive from files in its ``staticPodPath``, with host networking and credentials from the
node's disk, so that no set of deleted pods can leave Steward unable to recreate its own.
The other controllers are the ``local`` overlay's Deployments
(``steward deploy render --overlay local``), whose pods the static ReplicaSet and
Deployment controllers create and recreate; they reach the informer and the manager at
the control-plane address (the real node's, :attr:`ClusterState.host`) and the ports of
:data:`steward.static_core.DEFAULT_PORTS`. Changed only where this cluster differs from a
user's:

- every Deployment's pod asks for a real node (node selector and toleration of
  :data:`steward.cluster.nodes.REAL_NODE_LABEL`), so that kwok's nodes keep the workloads;
- every service exports its spans to the cluster's own Jaeger, which also holds
  kube-apiserver's, so that a Job's trace reads as one story;
- a controller whose upstream counterpart kube-controller-manager does not run gets the
  flags its definition declares for running alone (the Job controller's
  ``--take-unmanaged``) in place of those for running beside upstream;
- every controller registers with ``--standby``, as in the production overlay.

# Boot, with nothing to hand over
kube-controller-manager runs none of the controllers Steward has from the start. The
static core starts as soon as the kubelet runs (its images are imported first) and needs
nothing but kube-apiserver: it dials IP addresses only, so it waits on no Service,
EndpointSlice, kube-proxy rule or DNS name. Once it runs, the Deployments are applied and
the static ReplicaSet and Deployment controllers create their pods.

# What Steward's recovery depends on, and what recovers each
- **kube-apiserver, etcd**: the control plane's processes (kubeadm: static pods); nothing
  of Steward's.
- **the kubelet and containerd**: the machine's processes; a static pod's container
  outlives a restarted kubelet or containerd (runc's shim keeps it), and the kubelet
  restarts a container that died, with its back-off.
- **the informer and the manager**: static pods, restarted by the kubelet; the
  controllers' connections retry until they are back (a controller keeps reconciling
  from its cache meanwhile; its lease at the manager is renewed by the next manager
  leader, which loads the Leases it finds).
- **Leases**: the manager's (leadership) and each controller's are API objects; a lease
  whose holder died expires by its duration, with no one else's help.
- **Services, EndpointSlices, kube-proxy, DNS**: not on any path of Steward's own: the
  controllers dial ``127.0.0.1`` (static) or the control-plane address (Deployments).
- **the ReplicaSet and Deployment controllers**: static pods; every other controller's
  pods are recreated by them.

The TLS Secrets the Deployments name (``steward-controller-<name>-tls``) are
``kubernetes.io/tls`` Secrets with ``ca.crt``, as cert-manager writes them, issued by the
cluster CA (client certificates); the static core's files are written to
``<node dir>/steward/<component>/`` (:func:`install_credentials`).
Everything else — ServiceAccounts, RBAC, projected tokens, probes, Pod Security
``restricted`` — is the overlay's own.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc
import yaml

from steward import deploy, static_core
from steward.cluster import nodes
from steward.cluster.errors import ClusterError
from steward.cluster.identities import MONITORING_GROUP
from steward.cluster.pki import CertificateAuthority
from steward.cluster.progress import Progress
from steward.cluster.registry import RegisteredController, steward_controllers, upstream_runs
from steward.cluster.state import port_free
from steward.security import ClientSecurity
from steward.v1 import manager_pb2, manager_pb2_grpc

Doc = dict[str, Any]

NAMESPACE = "steward"
"""The namespace the manifests put everything in."""


MANAGER_PORT = static_core.DEFAULT_PORTS["manager"].grpc
"""The manager's gRPC port on the control-plane node."""

STATIC_UID = 65532
"""The user the images run as: owner of the static core's credential files."""


class PodsError(ClusterError):
    """Steward's pods could not be deployed or did not become Ready."""


def _container(deployment: Doc) -> Doc:
    containers: list[Doc] = deployment["spec"]["template"]["spec"]["containers"]
    return containers[0]


def manifests(
    docs: Iterable[Doc],
    *,
    otlp_endpoint: str,
    kcm_controllers: str,
    registry: Iterable[RegisteredController] | None = None,
    tag: str = "dev",
) -> list[Doc]:
    """The rendered overlay ``docs``, changed for this cluster (see the module docs)."""
    by_deployment = {
        f"steward-controller-{c.name}": c
        for c in (registry if registry is not None else steward_controllers())
    }
    result = []
    for doc in docs:
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        if doc.get("kind") == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), nodes.REAL_NODE_LABEL: "true"}
            pod["tolerations"] = [
                *(pod.get("tolerations") or []),
                {
                    "key": nodes.REAL_NODE_LABEL,
                    "operator": "Equal",
                    "value": "true",
                    "effect": "NoSchedule",
                },
            ]
            container = _container(doc)
            image = container["image"]
            if ":" not in image.rsplit("/", 1)[-1]:
                container["image"] = f"{image}:{tag}"
            env = container.setdefault("env", [])
            env[:] = [e for e in env if e.get("name") != "OTEL_EXPORTER_OTLP_ENDPOINT"]
            env.append({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": otlp_endpoint})
            name = doc["metadata"]["name"]
            controller = by_deployment.get(name)
            if controller is not None and "--standby" not in container.get("args", []):
                # As in the production overlay: a second replica, or a new pod of a rolling
                # update, waits as the standby instead of being refused.
                container["args"] = [*container.get("args", []), "--standby"]
            if controller is not None and not upstream_runs(kcm_controllers, controller.name):
                beside = set(controller.beside_upstream or ())
                args = [a for a in container.get("args", []) if a not in beside]
                container["args"] = [*args, *(a for a in controller.alone if a not in args)]
        result.append(doc)
    return result


def tls_secrets(docs: Iterable[Doc], ca: CertificateAuthority, workdir: Path) -> list[Doc]:
    """The TLS Secrets the Deployments of ``docs`` mount: serving certificates for those
    a Service selects (its in-cluster names), client certificates for the others."""
    docs = list(docs)
    services = [d for d in docs if d.get("kind") == "Service"]
    secrets = []
    for deployment in (d for d in docs if d.get("kind") == "Deployment"):
        name = deployment["metadata"]["name"]
        labels = deployment["spec"]["template"]["metadata"].get("labels") or {}
        selecting = [
            s["metadata"]["name"]
            for s in services
            if s["spec"].get("selector")
            and all(labels.get(k) == v for k, v in s["spec"]["selector"].items())
        ]
        for secret_name in _secret_names(deployment):
            if secret_name in KEY_SECRETS:
                continue  # the cluster's own keys (key_secrets)
            into = workdir / secret_name
            into.mkdir(parents=True, exist_ok=True)
            if selecting:
                dns = []
                for svc in selecting:
                    dns += [
                        svc,
                        f"{svc}.{NAMESPACE}",
                        f"{svc}.{NAMESPACE}.svc",
                        f"{svc}.{NAMESPACE}.svc.{nodes.CLUSTER_DOMAIN}",
                    ]
                pair = ca.issue("tls", name, server=True, dns=tuple(dns), directory=into)
            else:
                pair = ca.issue("tls", name, client=True, directory=into)
            secrets.append(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "kubernetes.io/tls",
                    "metadata": {"name": secret_name, "namespace": NAMESPACE},
                    "data": {
                        "tls.crt": _b64(pair.cert),
                        "tls.key": _b64(pair.key),
                        "ca.crt": _b64(ca.pair.cert),
                    },
                }
            )
    return secrets


KEY_SECRETS = {
    "steward-cluster-signing": ("kubernetes.io/tls", {"tls.crt": "ca.crt", "tls.key": "ca.key"}),
    "steward-service-account-key": ("Opaque", {"sa.key": "sa.key"}),
    "steward-root-ca": ("Opaque", {"ca.crt": "ca.crt"}),
}
"""The Secrets of the cluster's keys that the deploy base mounts into one controller's
pod each, as an operator makes them (deploy/README.md): name → (type, key → file of the
cluster's PKI directory). The signing CA for the CertificateSigningRequest signer, the
service-account signing key for the token controller, the CA bundle for the root CA
publisher."""


def key_secrets(docs: Iterable[Doc], pki: Path) -> list[Doc]:
    """The Secrets of :data:`KEY_SECRETS` that the Deployments of ``docs`` mount, from
    the cluster's PKI directory ``pki``."""
    mounted = {n for d in docs if d.get("kind") == "Deployment" for n in _secret_names(d)}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": kind,
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {key: _b64(pki / file) for key, file in files.items()},
        }
        for name, (kind, files) in KEY_SECRETS.items()
        if name in mounted
    ]


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _secret_names(deployment: Doc) -> list[str]:
    names = []
    for volume in deployment["spec"]["template"]["spec"].get("volumes") or []:
        if "secret" in volume:
            names.append(volume["secret"]["secretName"])
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                names.append(source["secret"]["name"])
    return names


def kubectl_apply(kubeconfig: Path, docs: Iterable[Doc]) -> str:
    """``kubectl apply`` of ``docs`` as the cluster admin; returns kubectl's output."""
    text = yaml.safe_dump_all(list(docs), sort_keys=False)
    done = subprocess.run(
        [deploy.find_kubectl(), "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise PodsError(f"kubectl apply failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


def install_credentials(
    state: Any,
    ca: CertificateAuthority,
    host_dir: Path,
    *,
    control_plane: str,
) -> None:
    """Write each static component's credentials into ``<host_dir>/<component>/``, as an
    operator does on a control-plane node: ``kubeconfig`` (its user's client
    certificate, :meth:`ClusterState.component_kubeconfig`), ``ca.crt`` (the cluster CA)
    and ``tls.crt``/``tls.key`` — a serving certificate for the informer and the manager
    (their Service names, ``control_plane`` and ``127.0.0.1``), a client certificate of
    the component's user for the controllers. Readable by the images' user only."""
    host_dir.mkdir(parents=True, exist_ok=True)
    host_dir.chmod(0o755)
    for component in static_core.CORE:
        into = host_dir / component
        into.mkdir(exist_ok=True)
        work = into / ".issue"
        work.mkdir(exist_ok=True)
        if component in ("informer", "manager"):
            service = f"steward-{component}"
            dns = tuple(
                f"{service}{suffix}"
                for suffix in (
                    "",
                    f".{NAMESPACE}",
                    f".{NAMESPACE}.svc",
                    f".{NAMESPACE}.svc.{nodes.CLUSTER_DOMAIN}",
                )
            )
            pair = ca.issue(
                "tls",
                service,
                dns=dns,
                ips=(control_plane, "127.0.0.1"),
                server=True,
                directory=work,
            )
        else:
            pair = ca.issue(
                "tls",
                static_core.user_of(component),
                orgs=(MONITORING_GROUP,),
                client=True,
                directory=work,
            )
        files = {
            "tls.crt": pair.cert.read_bytes(),
            "tls.key": pair.key.read_bytes(),
            "ca.crt": ca.pair.cert.read_bytes(),
            "kubeconfig": state.component_kubeconfig(component).read_bytes(),
        }
        shutil.rmtree(work)
        for name, data in files.items():
            path = into / name
            path.write_bytes(data)
            os.chown(path, STATIC_UID, STATIC_UID)
            path.chmod(0o400)
        os.chown(into, STATIC_UID, STATIC_UID)
        into.chmod(0o500)


def _ports_free(ports: Mapping[str, static_core.HostPorts]) -> None:
    """Refuse to start a static core whose ports are taken on this machine (it listens
    on every address of the node)."""
    for component, port in ports.items():
        for number in (port.grpc, port.metrics, port.health):
            if number is not None and not port_free(number, "0.0.0.0", reuse=True):  # noqa: S104
                raise PodsError(
                    f"port {number} of Steward's static {component} is taken on this "
                    "machine; stop what listens there"
                )


def deploy_pods(
    cluster: Any,
    *,
    out: Progress,
    timeout: float = 300.0,
    tag: str = "dev",
) -> list[Doc]:
    """Deploy Steward as pods into ``cluster`` (a :class:`LocalCluster` with a real node
    whose containerd has Steward's images): the static core on the first real node,
    waited on until its mirror pods are Ready, then the Deployments of the other
    controllers, waited on until available, and every controller until active at the
    manager (see the module docs). Returns the manifests: the applied ones, then the
    static pods."""
    state = cluster.state
    node = state.real_nodes[0]
    ports = static_core.DEFAULT_PORTS
    rendered = [d for d in yaml.safe_load_all(deploy.render("local")) if d]
    docs = manifests(
        rendered, otlp_endpoint=cluster.otlp_endpoint, kcm_controllers=state.controllers, tag=tag
    )
    static = static_core.static_pods(docs, host_dir=str(node.directory / "steward"), ports=ports)
    rest = [
        *static_core.deployed(docs, control_plane=state.host, ports=ports),
        *static_core.user_bindings(docs),
    ]
    ca = CertificateAuthority.load(cluster.directory / "pki")
    secrets = [
        *tls_secrets(rest, ca, cluster.directory / "pods-tls"),
        *key_secrets(rest, cluster.directory / "pki"),
    ]
    started = time.monotonic()
    _ports_free(ports)
    install_credentials(state, ca, node.directory / "steward", control_plane=state.host)
    for filename, pod in static.items():
        (node.static_pods / filename).write_text(yaml.safe_dump(pod, sort_keys=False))
    out.say(f"Steward's core: {len(static)} static pods on {node.name}")
    namespaces = [d for d in rest if d.get("kind") == "Namespace"]
    others = [d for d in rest if d.get("kind") != "Namespace"]
    kubectl_apply(cluster.kubeconfig, namespaces)
    if upstream_runs(state.controllers, "serviceaccount"):
        # Else Steward's serviceaccount controller, deployed below, makes it; Steward's
        # own pods run under ServiceAccounts of their own.
        _wait_service_account(cluster, out, timeout)
    kubectl_apply(cluster.kubeconfig, secrets)
    wait_static(cluster, node.name, list(static.values()), out, timeout)
    out.say(f"Steward's core is Ready {time.monotonic() - started:.1f}s after its files")
    out.say(f"deploying the other controllers ({len(others)} objects, overlay local)")
    kubectl_apply(cluster.kubeconfig, others)
    wait_available(cluster, [d for d in others if d.get("kind") == "Deployment"], out, timeout)
    deployed = {d["metadata"]["name"] for d in docs if d.get("kind") == "Deployment"}
    for controller in steward_controllers():
        if f"steward-controller-{controller.name}" in deployed:
            wait_active(cluster, controller.name, timeout=timeout, out=out)
    out.say(f"Steward runs as pods, {time.monotonic() - started:.1f}s after its files")
    return [*rest, *static.values()]


def wait_static(cluster: Any, node: str, pods: list[Doc], out: Progress, timeout: float) -> None:
    """Wait until the mirror pod of each static pod of ``pods`` on ``node`` is Ready (a
    static pod's mirror is named ``<name>-<node>``)."""
    names = [f"{p['metadata']['name']}-{node}" for p in pods]

    def not_ready(name: str) -> bool:
        pod = cluster.api(
            "GET", f"/api/v1/namespaces/{static_core.NAMESPACE}/pods/{name}", ok=(200, 404)
        )
        conditions = (pod.get("status") or {}).get("conditions") or []
        return not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    pending = _wait_for_each(names, not_ready, "Steward's static core", out, timeout)
    if pending:
        raise PodsError(
            f"Steward's static pods not Ready after {timeout:.0f}s: {', '.join(pending)}\n"
            + pod_report(cluster, static_core.NAMESPACE)
        )


def _wait_for_each(
    names: list[str], pending: Callable[[str], bool], what: str, out: Progress, timeout: float
) -> list[str]:
    """Poll every second until ``pending(name)`` is false for each of ``names`` or
    ``timeout`` passes; the names still pending (none: all done)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [name for name in names if pending(name)]
        if not left or time.monotonic() >= deadline:
            return left
        out.tick(f"waiting for {what}: {', '.join(left)}")
        time.sleep(1.0)


def manager_security(cluster: Any) -> ClientSecurity:
    """mTLS to Steward's manager pods as the cluster admin, checking the serving
    certificate for the manager's Service name."""
    pki = cluster.directory / "pki"
    return ClientSecurity(
        ca_file=str(pki / "ca.crt"),
        cert_file=str(pki / "admin.crt"),
        key_file=str(pki / "admin.key"),
        server_name=f"steward-manager.{NAMESPACE}.svc",
    )


def manager_address(cluster: Any) -> str:
    """The static manager's address: the control-plane node's, its host port."""
    return f"{cluster.state.host}:{MANAGER_PORT}"


RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""What :func:`manager_call` retries: a manager that is not the leader, is restarting or
is not up yet (UNAVAILABLE), or one that did not answer in time."""


def manager_call(cluster: Any, method: str, request: Any, *, timeout: float = 60.0) -> Any:
    """One unary call to the manager's leader, retried on :data:`RETRIED` until
    ``timeout`` seconds have passed in all (each attempt gets at most 10 s of them)."""
    deadline = time.monotonic() + timeout
    while True:
        attempt = max(0.5, min(10.0, deadline - time.monotonic()))
        try:
            with manager_security(cluster).sync_channel(manager_address(cluster)) as channel:
                stub = manager_pb2_grpc.ManagerServiceStub(channel)
                return getattr(stub, method)(request, timeout=attempt)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            if code not in RETRIED or time.monotonic() > deadline:
                raise PodsError(f"manager {method}: {err}") from err
        time.sleep(0.5)


def wait_active(cluster: Any, name: str, *, timeout: float, out: Progress) -> None:
    """Wait until an instance of Steward's controller ``name`` is active at the manager."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = manager_call(cluster, "GetController", manager_pb2.GetControllerRequest(name=name))
        if reply.controller.state == manager_pb2.CONTROLLER_STATE_ACTIVE:
            out.say(f"Steward's {name} controller is active ({reply.controller.holder})")
            return
        out.tick(f"waiting for Steward's {name} controller to become active")
        time.sleep(0.5)
    raise PodsError(f"Steward's {name} controller was not active after {timeout:.0f}s")


def _wait_service_account(cluster: Any, out: Progress, timeout: float) -> None:
    """The namespace's default ServiceAccount (pods are refused until it exists)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sa = cluster.api(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default", ok=(200, 404)
        )
        if sa.get("kind") == "ServiceAccount":
            return
        out.tick("waiting for the namespace's default ServiceAccount")
        time.sleep(0.2)
    raise PodsError(f"no default ServiceAccount in {NAMESPACE} after {timeout:.0f}s")


def wait_available(cluster: Any, deployments: list[Doc], out: Progress, timeout: float) -> None:
    """Wait until each Deployment has all its replicas updated and available."""

    def not_available(name: str) -> bool:
        dep = cluster.api(
            "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}", ok=(200, 404)
        )
        want = (dep.get("spec") or {}).get("replicas", 1)
        st = dep.get("status") or {}
        return not (
            st.get("observedGeneration") == (dep.get("metadata") or {}).get("generation")
            and st.get("updatedReplicas") == want
            and st.get("replicas") == want
            and (st.get("availableReplicas") or 0) >= want
        )

    names = [d["metadata"]["name"] for d in deployments]
    pending = _wait_for_each(names, not_available, "Steward's Deployments", out, timeout)
    if pending:
        raise PodsError(
            f"Steward's Deployments not available after {timeout:.0f}s: {', '.join(pending)}\n"
            + pod_report(cluster)
        )


def pod_report(cluster: Any, namespace: str = NAMESPACE) -> str:
    """One line per pod in ``namespace`` (Steward's): phase, node, container states."""
    listing = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods")
    lines = []
    for pod in listing.get("items", []):
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        states = [json.dumps(s.get("state") or {}) for s in statuses]
        lines.append(
            f"  {pod['metadata']['name']}: {pod['status'].get('phase')} on "
            f"{pod['spec'].get('nodeName')} {' '.join(states)}"
        )
    return "\n".join(lines) or "  (no pods)"
