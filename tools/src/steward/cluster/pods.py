"""Steward deployed as pods on the local control plane's real nodes, as its users deploy it.

The manifests are the ``local`` overlay (``steward deploy render --overlay local``),
changed only where this cluster differs from a user's:

- every pod asks for a real node (node selector and toleration of
  :data:`steward.cluster.nodes.REAL_NODE_LABEL`), so that kwok's nodes keep the workloads;
- every service exports its spans to the cluster's own Jaeger, which also holds
  kube-apiserver's, so that a Job's trace reads as one story;
- a controller whose upstream counterpart kube-controller-manager does not run gets the
  flags its definition declares for running alone (the Job controller's
  ``--take-unmanaged``) in place of those for running beside upstream;
- the services the others cannot heal without run two replicas (:data:`SELF_HEALING`),
  and every controller registers with ``--standby``, as in the production overlay.

# Bootstrap and hand-over
Steward's own services are Deployments, and Steward's ReplicaSet and Deployment
controllers are among them: they cannot create their own first pods. So, as a
self-hosted control plane boots, upstream's controllers start them: kube-controller-manager
first runs every controller, and Steward's manager starts with the controllers Steward
takes over disabled (``--controllers=*,-deployment,...``), so that they register but do
not reconcile. Once every Steward pod is Ready, kube-controller-manager restarts without
those controllers and the manager enables Steward's (``EnableController``, recorded in
each controller's Lease, so a restarted manager keeps it). From then on Steward keeps
its own pods too: a deleted pod is replaced by Steward's ReplicaSet controller, which
needs a live informer and manager to do so; that is why those (and the ReplicaSet
controller itself) run two replicas here, as in the production overlay. The Endpoints
controller is handed over like the others and runs one replica: kube-proxy routes the
informer's and the manager's Services by EndpointSlices, not Endpoints, so neither the
boot nor a replaced pod waits on it.

The EndpointSlice controller is not handed over: upstream's endpointslice-controller
stays on (:data:`~steward.cluster.config.KEPT_WHEN_SELF_HOSTED`) and Steward's
runs beside it from the start, one replica, each writing its own slices of every Service
(managed by ``endpointslice-controller.k8s.io`` and ``endpointslice-controller.steward.io``;
kube-proxy routes by both, the same endpoints). Steward's pods reach the informer and the
manager through those Services. Were Steward's the only slices, a new manager leader
(the manager's Service lists its leader alone as ready) would be reachable only once
Steward's EndpointSlice controller had written it there, and that controller may write
only while it holds its lease at the manager: losing the leader would cut Steward off
for good. Upstream's slices keep the path to the manager independent of Steward.

The DaemonSet controller is handed over like the others and runs one replica. No
DaemonSet takes part in the boot (Steward's services are Deployments; kube-proxy and
CoreDNS run as processes of the node), so nothing of it waits on that controller; once
handed over, a DaemonSet's pod for the real node runs there as any pod does.

The HorizontalPodAutoscaler controller is handed over like the others and runs one
replica. Steward's own Deployments have no HPA, so nothing of the boot waits on it; once
handed over, it scales the targets of the cluster's HPAs, reading their metrics through
kube-apiserver's aggregation layer as upstream's does.

The TLS Secrets the manifests name (``steward-informer-tls``, ``steward-manager-tls``,
``steward-controller-<name>-tls``) are ``kubernetes.io/tls`` Secrets with ``ca.crt``, as
cert-manager writes them, issued by the cluster CA: serving certificates for the
informer's and the manager's Service names, client certificates for the controllers.
Everything else — ServiceAccounts, RBAC, projected tokens, probes, Pod Security
``restricted`` — is the overlay's own.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
import yaml

from steward import deploy
from steward.cluster import nodes
from steward.cluster.errors import ClusterError
from steward.cluster.pki import CertificateAuthority
from steward.cluster.progress import Progress
from steward.cluster.registry import RegisteredController, steward_controllers, upstream_runs
from steward.security import ClientSecurity
from steward.v1 import manager_pb2, manager_pb2_grpc

Doc = dict[str, Any]

NAMESPACE = "steward"
"""The namespace the manifests put everything in."""


SELF_HEALING = {
    "steward-informer": 2,
    "steward-manager": 2,
    "steward-controller-replicaset": 2,
}
"""Replicas of the services a self-hosted Steward needs alive to replace any of its pods."""

LEADER_READY = frozenset({"steward-manager"})
"""Services whose readiness is leadership: of their replicas only the leader is Ready
(the Service sends callers to it), the others stand by."""

MANAGER_PORT = 50062


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
    bootstrap_disabled: Iterable[str] = (),
) -> list[Doc]:
    """The rendered overlay ``docs``, changed for this cluster (see the module docs);
    the manager starts with the controllers ``bootstrap_disabled`` disabled."""
    disabled = list(bootstrap_disabled)
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
            if name in SELF_HEALING:
                doc["spec"]["replicas"] = SELF_HEALING[name]
            if name == "steward-manager" and disabled:
                args = [a for a in container.get("args", []) if not a.startswith("--controllers")]
                container["args"] = [
                    *args,
                    "--controllers=" + ",".join(["*", *(f"-{n}" for n in disabled)]),
                ]
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


def deploy_pods(
    cluster: Any,
    *,
    final_controllers: str,
    restart_upstream: Callable[[str], None],
    out: Progress,
    timeout: float = 300.0,
    tag: str = "dev",
) -> list[Doc]:
    """Deploy Steward as pods into ``cluster`` (a :class:`LocalCluster` with a real node
    whose containerd has Steward's images), wait until every Deployment is available,
    then hand over (see the module docs): ``restart_upstream(final_controllers)``
    restarts kube-controller-manager with its final ``--controllers``, and Steward's
    controllers that upstream then does not run are enabled and waited on until active.
    Returns the applied manifests."""
    taken = [c.name for c in steward_controllers() if not upstream_runs(final_controllers, c.name)]
    rendered = [d for d in yaml.safe_load_all(deploy.render("local")) if d]
    docs = manifests(
        rendered,
        otlp_endpoint=cluster.otlp_endpoint,
        kcm_controllers=final_controllers,
        tag=tag,
        bootstrap_disabled=taken,
    )
    ca = CertificateAuthority.load(cluster.directory / "pki")
    secrets = tls_secrets(docs, ca, cluster.directory / "pods-tls")
    namespaces = [d for d in docs if d.get("kind") == "Namespace"]
    rest = [d for d in docs if d.get("kind") != "Namespace"]
    started = time.monotonic()
    out.say(f"deploying Steward as pods ({len(rest)} objects, overlay local)")
    kubectl_apply(cluster.kubeconfig, namespaces)
    _wait_service_account(cluster, out, timeout)
    kubectl_apply(cluster.kubeconfig, secrets)
    kubectl_apply(cluster.kubeconfig, rest)
    wait_available(cluster, [d for d in docs if d.get("kind") == "Deployment"], out, timeout)
    out.say(f"Steward's pods are Ready {time.monotonic() - started:.1f}s after the apply")
    if taken:
        out.say(f"handing {', '.join(taken)} over from kube-controller-manager to Steward")
        restart_upstream(final_controllers)
        for name in taken:
            enable(cluster, name, timeout=timeout, out=out)
    out.say(f"Steward runs as pods, {time.monotonic() - started:.1f}s after the apply")
    return docs


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
    """The manager Service's ClusterIP and port (kube-proxy routes it on this machine)."""
    svc = cluster.api("GET", f"/api/v1/namespaces/{NAMESPACE}/services/steward-manager")
    return f"{svc['spec']['clusterIP']}:{MANAGER_PORT}"


def manager_call(cluster: Any, method: str, request: Any, *, timeout: float = 60.0) -> Any:
    """One unary call to the manager's leader: a replica that is not the leader answers
    UNAVAILABLE, and each new connection may reach another, so it is retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with manager_security(cluster).sync_channel(manager_address(cluster)) as channel:
                stub = manager_pb2_grpc.ManagerServiceStub(channel)
                return getattr(stub, method)(request, timeout=10)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            if code is not grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise PodsError(f"manager {method}: {err}") from err
        time.sleep(0.5)


def enable(cluster: Any, name: str, *, timeout: float, out: Progress) -> None:
    """Enable Steward's controller ``name`` in the manager and wait until an instance is
    active."""
    manager_call(cluster, "EnableController", manager_pb2.EnableControllerRequest(name=name))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = manager_call(cluster, "GetController", manager_pb2.GetControllerRequest(name=name))
        if reply.controller.state == manager_pb2.CONTROLLER_STATE_ACTIVE:
            out.say(f"Steward's {name} controller is active ({reply.controller.holder})")
            return
        out.tick(f"waiting for Steward's {name} controller to become active")
        time.sleep(0.5)
    raise PodsError(f"Steward's {name} controller was not active {timeout:.0f}s after enabling")


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
    names = [d["metadata"]["name"] for d in deployments]
    deadline = time.monotonic() + timeout
    pending = names
    while time.monotonic() < deadline:
        pending = []
        for name in names:
            dep = cluster.api(
                "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}", ok=(200, 404)
            )
            want = (dep.get("spec") or {}).get("replicas", 1)
            st = dep.get("status") or {}
            available = 1 if name in LEADER_READY else want
            if not (
                st.get("observedGeneration") == (dep.get("metadata") or {}).get("generation")
                and st.get("updatedReplicas") == want
                and st.get("replicas") == want
                and (st.get("availableReplicas") or 0) >= available
            ):
                pending.append(name)
        if not pending:
            return
        out.tick(f"waiting for {len(pending)} of Steward's Deployments: {', '.join(pending)}")
        time.sleep(1.0)
    raise PodsError(
        f"Steward's Deployments not available after {timeout:.0f}s: {', '.join(pending)}\n"
        + pod_report(cluster)
    )


def pod_report(cluster: Any) -> str:
    """One line per pod in Steward's namespace: phase, node, container states."""
    listing = cluster.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
    lines = []
    for pod in listing.get("items", []):
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        states = [json.dumps(s.get("state") or {}) for s in statuses]
        lines.append(
            f"  {pod['metadata']['name']}: {pod['status'].get('phase')} on "
            f"{pod['spec'].get('nodeName')} {' '.join(states)}"
        )
    return "\n".join(lines) or "  (no pods)"
