"""Steward's core as the kubelet's static pods: the part of Steward that no controller has
to recreate.

Steward's services are Deployments, and Steward's own ReplicaSet and Deployment
controllers are among them. Were every pod of the ReplicaSet controller deleted at once,
nothing would create their replacements: only that controller creates a ReplicaSet's
pods. Self-hosted control planes broke that circle long ago by running the control plane
as static pods, which the kubelet keeps alive from files on its node (kubeadm's
``/etc/kubernetes/manifests``). Steward does the same for its **core**
(:data:`CORE`): the informer, the manager and the ReplicaSet and Deployment controllers.
Everything else stays a Deployment, whose pods the static ReplicaSet and Deployment
controllers recreate.

# What a static pod of the core is
Rendered from the same base manifests as the Deployments (:func:`static_pods`), with the
same image, command, probes, resources and container security context
(``runAsNonRoot`` as 65532, no privilege escalation, every capability dropped,
``RuntimeDefault`` seccomp, read-only root file system), changed where a static pod must
differ:

- **No dependency on the cluster's network services.** ``hostNetwork: true`` as
  kubeadm's control-plane pods: they listen on the node's addresses at fixed ports
  (:data:`DEFAULT_PORTS`), the controllers reach the informer and the manager at
  ``127.0.0.1``, and each reaches kube-apiserver at the address its kubeconfig names.
  No Service, EndpointSlice, kube-proxy rule, CNI plugin or DNS name is on the path, so
  none of them has to recover first. Health endpoints listen on ``127.0.0.1`` only and
  the kubelet probes them there.
- **Credentials from the node's disk.** A static pod may not use a ServiceAccount, a
  Secret or a projected token (the kubelet cannot resolve API objects for it). Each
  component mounts a host directory (``<host dir>/<component>``, read-only) holding its
  kubeconfig (a client certificate for its user, ``steward:informer``,
  ``steward:manager``, ``steward:controller:<name>``) and its TLS files (``tls.crt``,
  ``tls.key``, ``ca.crt``), the way kubeadm gives kube-controller-manager
  ``controller-manager.conf``. Their users are bound to the same ClusterRoles as the
  ServiceAccounts (:func:`user_bindings`). The files must be readable by UID 65532.
- **Namespace ``kube-system``**, like kubeadm's static pods: host networking is outside
  the ``restricted`` and ``baseline`` Pod Security levels that Steward's own namespace
  enforces, and the API server would refuse the mirror pods there. The manager still
  keeps its Leases in ``steward`` (``--namespace=steward``).
- ``priorityClassName: system-node-critical``.

# One instance per control-plane node
The static core is the only instance of those four components: a static pod runs on each
control-plane node whose kubelet has the manifests, and the manager's registry treats them
as it treats a Deployment's replicas. Managers elect a leader through their Lease; the
controllers register with ``--standby``, so the first one to register is active and the
others (another node's, or a restarted process whose predecessor's lease still runs)
wait as standbys. Running a Deployment of the same controller beside its static pods would
add nothing the static ones lack, and would need the very controllers it backs up; the
Deployments of the core are therefore left out (:func:`deployed`).

# The rest reaches the core at the control-plane address
The controllers that stay Deployments reach the informer and the manager at
``<control-plane address>:<port>`` (``--informer``, ``--manager``), as every kubelet
reaches kube-apiserver at the control-plane endpoint: with one control-plane node, its
address; with several, an address that reaches them all (a virtual IP or a load
balancer; the manager's non-leaders answer UNAVAILABLE and callers retry, so a balancer
whose health check is the gRPC health of ``steward.v1.ManagerService`` sends them to the
leader at once). The serving certificates must name that address (and ``127.0.0.1``).
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]

CORE = ("informer", "manager", "controller-replicaset", "controller-deployment")
"""The components the kubelet keeps alive: without them Steward cannot recreate a pod of
its own (the informer and the manager serve every controller; the ReplicaSet controller
creates pods, the Deployment controller ReplicaSets)."""

NAMESPACE = "kube-system"
"""Where the static pods (their mirror pods) live."""

STEWARD_NAMESPACE = "steward"
"""Steward's own namespace: the Deployments, and the manager's Leases."""

DEFAULT_HOST_DIR = "/etc/steward"
"""Where each component's credentials lie on a control-plane node (``<dir>/<component>``)."""

STATIC_LABEL = "steward.io/static"
"""Label of every static pod of the core (value ``"true"``)."""

CREDENTIALS = {
    "informer": "/etc/steward/tls",
    "manager": "/etc/steward/tls",
    "controller-replicaset": "/var/run/secrets/steward.io",
    "controller-deployment": "/var/run/secrets/steward.io",
}
"""Where each container reads its credentials: the same paths as in its Deployment, so
that the TLS variables stay as they are; ``kubeconfig`` beside them."""


@dataclass(frozen=True)
class HostPorts:
    """A static component's ports on the node: gRPC (the informer and the manager only),
    Prometheus metrics, and the kubelet's health probes (on 127.0.0.1)."""

    metrics: int
    health: int
    grpc: int | None = None


DEFAULT_PORTS: Mapping[str, HostPorts] = {
    "informer": HostPorts(grpc=10361, metrics=10371, health=10381),
    "manager": HostPorts(grpc=10362, metrics=10372, health=10382),
    "controller-replicaset": HostPorts(metrics=10373, health=10383),
    "controller-deployment": HostPorts(metrics=10374, health=10384),
}
"""Below Linux's ephemeral port range (32768 and up), beside the control plane's own
(kubelet 10250, kube-controller-manager 10257, kube-scheduler 10259)."""


class StaticCoreError(Exception):
    """The manifests given lack what the static core is made from."""


def _deployment_name(component: str) -> str:
    return f"steward-{component}"


def _find_deployment(docs: Iterable[Doc], component: str) -> Doc:
    name = _deployment_name(component)
    for doc in docs:
        if doc and doc.get("kind") == "Deployment" and doc["metadata"]["name"] == name:
            return doc
    raise StaticCoreError(f"no Deployment {name} in the manifests")


def _set_arg(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag=value`` in place of any ``flag=...`` (added when absent)."""
    out = [a for a in args if not a.startswith(f"{flag}=")]
    return [*out, f"{flag}={value}"]


def _set_env(env: list[Doc], name: str, value: str) -> list[Doc]:
    return [*(e for e in env if e.get("name") != name), {"name": name, "value": value}]


def static_pods(
    docs: Iterable[Doc],
    *,
    host_dir: str = DEFAULT_HOST_DIR,
    ports: Mapping[str, HostPorts] = DEFAULT_PORTS,
) -> dict[str, Doc]:
    """The static pod of each component of :data:`CORE`, made from its Deployment in the
    rendered manifests ``docs`` (see the module's documentation), by file name
    (``steward-<component>.yaml``)."""
    docs = list(docs)
    pods = {}
    for component in CORE:
        deployment = _find_deployment(docs, component)
        template = copy.deepcopy(deployment["spec"]["template"])
        spec = template["spec"]
        port = ports[component]
        spec.pop("serviceAccountName", None)
        spec.pop("serviceAccount", None)
        spec["automountServiceAccountToken"] = False
        spec["enableServiceLinks"] = False
        spec["hostNetwork"] = True
        # No cluster DNS on the way: every address a core component dials is an IP.
        spec["dnsPolicy"] = "Default"
        spec["priorityClassName"] = "system-node-critical"
        # A static pod runs where its file is: no scheduling constraints.
        for field in ("affinity", "topologySpreadConstraints", "nodeSelector", "tolerations"):
            spec.pop(field, None)
        # fsGroup changes nothing on a host directory: its files are made readable by
        # UID 65532 on the node.
        (spec.get("securityContext") or {}).pop("fsGroup", None)
        container = spec["containers"][0]
        mount = CREDENTIALS[component]
        args = list(container.get("args") or [])
        env = list(container.get("env") or [])
        env = [e for e in env if e.get("name") != "STEWARD_TOKEN_FILE"]
        if component in ("informer", "manager"):
            assert port.grpc is not None
            args = _set_arg(args, "--listen", f"0.0.0.0:{port.grpc}")
            args = _set_arg(args, "--metrics-listen", f"0.0.0.0:{port.metrics}")
            args = _set_arg(args, "--health-listen", f"127.0.0.1:{port.health}")
            if component == "manager":
                args = _set_arg(args, "--advertise", f"$(POD_IP):{port.grpc}")
                args = _set_arg(args, "--namespace", STEWARD_NAMESPACE)
        else:
            informer, manager = ports["informer"].grpc, ports["manager"].grpc
            args = _set_arg(args, "--informer", f"127.0.0.1:{informer}")
            args = _set_arg(args, "--manager", f"127.0.0.1:{manager}")
            args = _set_arg(args, "--metrics", f"0.0.0.0:{port.metrics}")
            env = _set_env(env, "STEWARD_HEALTH_LISTEN", f"127.0.0.1:{port.health}")
        args = _set_arg(args, "--kubeconfig", f"{mount}/kubeconfig")
        container["args"] = args
        container["env"] = env
        numbers = {"grpc": port.grpc, "metrics": port.metrics, "health": port.health}
        container["ports"] = [
            {"name": name, "containerPort": number}
            for name, number in numbers.items()
            if number is not None
        ]
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            get = (container.get(probe) or {}).get("httpGet")
            if get is not None:
                get["host"] = "127.0.0.1"
                get["port"] = port.health
        mounts = list(container.get("volumeMounts") or [])
        replaced = {m["name"] for m in mounts if m["mountPath"] == mount}
        container["volumeMounts"] = [m for m in mounts if m["mountPath"] != mount] + [
            {"name": "steward-credentials", "mountPath": mount, "readOnly": True}
        ]
        spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] not in replaced] + [
            {
                "name": "steward-credentials",
                "hostPath": {"path": f"{host_dir}/{component}", "type": "Directory"},
            }
        ]
        labels = {**(template.get("metadata") or {}).get("labels", {}), STATIC_LABEL: "true"}
        pods[f"{_deployment_name(component)}.yaml"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": _deployment_name(component),
                "namespace": NAMESPACE,
                "labels": labels,
            },
            "spec": spec,
        }
    return pods


_ADDRESS = re.compile(r"^[0-9A-Za-z.:\[\]-]+$")


def deployed(
    docs: Iterable[Doc],
    *,
    control_plane: str,
    ports: Mapping[str, HostPorts] = DEFAULT_PORTS,
) -> list[Doc]:
    """The manifests ``docs`` for a cluster whose core is static: without the core's
    Deployments, ServiceAccounts, bindings, Services and ingress NetworkPolicies, and with
    every other controller reaching the informer and the manager at ``control_plane`` (an
    IP address, or a name the nodes resolve without the cluster's DNS), which the
    controllers' egress NetworkPolicy allows (to that address alone when it is an IP)."""
    if not _ADDRESS.match(control_plane):
        raise StaticCoreError(f"not an address: {control_plane!r}")
    core_names = {_deployment_name(c) for c in CORE}
    host = control_plane
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(control_plane.strip("[]")).version == 6:
            host = f"[{control_plane.strip('[]')}]"  # host:port needs the brackets
    informer = f"{host}:{ports['informer'].grpc}"
    manager = f"{host}:{ports['manager'].grpc}"
    out = []
    for doc in docs:
        if not doc:
            continue
        kind = doc.get("kind")
        name = (doc.get("metadata") or {}).get("name")
        if kind in ("Deployment", "ServiceAccount", "Service", "PodDisruptionBudget") and (
            name in core_names
        ):
            continue
        if kind in ("ClusterRoleBinding", "RoleBinding") and name in core_names:
            continue
        if kind == "NetworkPolicy" and name in CORE_INGRESS_POLICIES:
            continue  # the core's pods are not in this namespace (host network)
        doc = copy.deepcopy(doc)
        if kind == "NetworkPolicy" and name == CONTROLLERS_EGRESS_POLICY:
            doc["spec"]["egress"] = [_egress_to_core(control_plane, ports)]
        if kind == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            args = list(container.get("args") or [])
            if any(a.startswith("--informer=") for a in args):
                args = _set_arg(args, "--informer", informer)
                args = _set_arg(args, "--manager", manager)
                container["args"] = args
        out.append(doc)
    return out


CORE_INGRESS_POLICIES = ("steward-informer-ingress", "steward-manager-ingress")
"""The overlay's NetworkPolicies letting controllers in to the informer's and the
manager's pods; a static core is on the host network, which no NetworkPolicy selects."""
CONTROLLERS_EGRESS_POLICY = "steward-controllers-egress"
"""The overlay's NetworkPolicy letting the controllers' pods out to the informer and the
manager: with a static core, to the control-plane address and the core's ports."""


def _egress_to_core(control_plane: str, ports: Mapping[str, HostPorts]) -> Doc:
    """The egress rule to the informer's and the manager's ports at ``control_plane``:
    to that address alone when it is an IP (a NetworkPolicy cannot name a host)."""
    rule: Doc = {
        "ports": [
            {"protocol": "TCP", "port": ports["informer"].grpc},
            {"protocol": "TCP", "port": ports["manager"].grpc},
        ]
    }
    try:
        address = ipaddress.ip_address(control_plane.strip("[]"))
    except ValueError:
        return rule
    rule["to"] = [{"ipBlock": {"cidr": f"{address}/{address.max_prefixlen}"}}]
    return rule


def user_bindings(docs: Iterable[Doc]) -> list[Doc]:
    """The bindings of the core's ServiceAccounts in ``docs``, made for the users the
    static pods authenticate as (``steward:<component>`` with ``:`` for ``-``), under
    the names ``<binding>-static``."""
    core_names = {_deployment_name(c): c for c in CORE}
    out = []
    for doc in docs:
        if not doc or doc.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        component = core_names.get(doc["metadata"]["name"])
        if component is None:
            continue
        binding = copy.deepcopy(doc)
        binding["metadata"]["name"] = f"{doc['metadata']['name']}-static"
        binding["subjects"] = [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": user_of(component),
            }
        ]
        out.append(binding)
    return out


def user_of(component: str) -> str:
    """The user a core component authenticates as: ``steward:informer``,
    ``steward:controller:replicaset``."""
    return "steward:" + component.replace("controller-", "controller:")
