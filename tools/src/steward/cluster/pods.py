"""Steward deployed as pods on the local control plane's real nodes, as its users deploy it.

The manifests are the ``local`` overlay (``steward deploy render --overlay local``),
changed only where this cluster differs from a user's:

- every pod asks for a real node (node selector and toleration of
  :data:`steward.cluster.nodes.REAL_NODE_LABEL`), so that kwok's nodes keep the workloads;
- every service exports its spans to the cluster's own Jaeger, which also holds
  kube-apiserver's, so that a Job's trace reads as one story;
- a controller whose upstream counterpart kube-controller-manager does not run gets the
  flags its definition declares for running alone (the Job controller's
  ``--take-unmanaged``) in place of those for running beside upstream.

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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from steward import deploy
from steward.cluster import nodes
from steward.cluster.errors import ClusterError
from steward.cluster.pki import CertificateAuthority
from steward.cluster.progress import Progress
from steward.cluster.registry import RegisteredController, steward_controllers

Doc = dict[str, Any]

NAMESPACE = "steward"
"""The namespace the manifests put everything in."""


class PodsError(ClusterError):
    """Steward's pods could not be deployed or did not become Ready."""


def _upstream_runs(controllers: str, name: str) -> bool:
    entries = [e.strip() for e in controllers.split(",")]
    if f"-{name}" in entries:
        return False
    return name in entries or "*" in entries


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
            controller = by_deployment.get(doc["metadata"]["name"])
            if controller is not None and not _upstream_runs(kcm_controllers, controller.name):
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
    out: Progress,
    timeout: float = 300.0,
    tag: str = "dev",
) -> list[Doc]:
    """Deploy Steward as pods into ``cluster`` (a :class:`LocalCluster` with a real node
    whose containerd has Steward's images) and wait until every Deployment is available.
    Returns the applied manifests."""
    rendered = [d for d in yaml.safe_load_all(deploy.render("local")) if d]
    docs = manifests(
        rendered,
        otlp_endpoint=cluster.otlp_endpoint,
        kcm_controllers=cluster.state.controllers,
        tag=tag,
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
    return docs


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
            if not (
                st.get("observedGeneration") == (dep.get("metadata") or {}).get("generation")
                and st.get("updatedReplicas") == want
                and st.get("availableReplicas") == want
                and not st.get("unavailableReplicas")
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
