"""The certificates and kubeconfigs of the cluster's components, issued by its CA."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import yaml

from steward.cluster import pki
from steward.cluster.identities import (
    FRONT_PROXY_USER,
    KUBELET_CLIENT_USER,
    MONITORING_GROUP,
    STEWARD_IDENTITIES,
)
from steward.cluster.progress import Progress
from steward.cluster.state import LOOPBACK, SERVICE_IP, ClusterState

LOCAL_NAMES = ("localhost",)
"""The DNS names of every loopback serving certificate."""


@dataclass(frozen=True)
class Certificates:
    """What the control plane's components present and trust (``<state dir>/pki``)."""

    ca: pki.CertificateAuthority
    etcd_server: pki.KeyPair
    etcd_client: pki.KeyPair
    """kube-apiserver's client certificate towards etcd."""
    apiserver: pki.KeyPair
    kubelet_client: pki.KeyPair
    """kube-apiserver's client certificate towards the kubelets (logs, exec, port-forward)."""
    service_account: pki.KeyPair
    front_proxy_ca: pki.KeyPair
    front_proxy: pki.KeyPair
    controller_manager: pki.KeyPair
    """kube-controller-manager's serving certificate (as the others below)."""
    scheduler: pki.KeyPair
    kwok: pki.KeyPair
    kubeconfigs: dict[str, Path]
    """The kubeconfigs of kube-controller-manager, kube-scheduler and kwok, by name."""


def issue(state: ClusterState, out: Progress) -> Certificates:
    """A new CA and every certificate of the control plane; the admin kubeconfig and
    those of Steward's components (:data:`STEWARD_IDENTITIES`) and of upstream's."""
    d = state.directory
    out.say(f"generating PKI in {d / 'pki'}")
    ca = pki.CertificateAuthority(d / "pki")

    def serving(name: str, common_name: str, *, client: bool = False) -> pki.KeyPair:
        return ca.issue(
            name, common_name, dns=LOCAL_NAMES, ips=(LOOPBACK,), server=True, client=client
        )

    front_proxy_ca, front_proxy = pki.front_proxy(d / "pki" / "front-proxy", FRONT_PROXY_USER)
    certs = Certificates(
        ca=ca,
        etcd_server=serving("etcd-server", "etcd", client=True),
        etcd_client=ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client", client=True),
        apiserver=ca.issue(
            "apiserver",
            "kube-apiserver",
            dns=(
                *LOCAL_NAMES,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=tuple(dict.fromkeys((LOOPBACK, state.host, SERVICE_IP))),
            server=True,
        ),
        kubelet_client=ca.issue("apiserver-kubelet-client", KUBELET_CLIENT_USER, client=True),
        service_account=pki.service_account_keys(d / "pki"),
        front_proxy_ca=front_proxy_ca.pair,
        front_proxy=front_proxy,
        controller_manager=serving("kube-controller-manager-serving", "kube-controller-manager"),
        scheduler=serving("kube-scheduler-serving", "kube-scheduler"),
        kwok=serving("kwok-serving", "kwok"),
        kubeconfigs={
            "kube-controller-manager": client_kubeconfig(
                state, ca, "kube-controller-manager", "system:kube-controller-manager"
            ),
            "kube-scheduler": client_kubeconfig(
                state, ca, "kube-scheduler", "system:kube-scheduler"
            ),
            # kwok plays every kubelet and the node lease holder; it acts as cluster admin.
            "kwok": client_kubeconfig(state, ca, "kwok", "steward:kwok", orgs=("system:masters",)),
        },
    )
    client_kubeconfig(
        state, ca, "admin", "steward-admin", orgs=("system:masters",), path=state.kubeconfig
    )
    # Steward's informer and manager serve mTLS with this; their callers' client
    # certificates are the component certificates below, signed by the same CA.
    serving("steward-serving", "steward")
    # Steward's components: one user each, all in system:monitoring (see
    # MONITORING_GROUP), with access only through the RBAC applied once kube-apiserver
    # is ready.
    for component, user in STEWARD_IDENTITIES.items():
        client_kubeconfig(
            state,
            ca,
            component,
            user,
            orgs=(MONITORING_GROUP,),
            path=state.component_kubeconfig(component),
        )
    return certs


def client_kubeconfig(
    state: ClusterState,
    ca: pki.CertificateAuthority,
    name: str,
    user: str,
    *,
    orgs: tuple[str, ...] = (),
    path: Path | None = None,
) -> Path:
    """Issue the client certificate ``<name>.crt`` of ``user`` (in groups ``orgs``) and
    write a kubeconfig with it, ``path`` or ``<state dir>/<name>.kubeconfig``."""
    identity = ca.issue(name, user, orgs=orgs, client=True)
    return _write_kubeconfig(
        state, path or state.directory / f"{name}.kubeconfig", ca.pair.cert, identity, user
    )


def _write_kubeconfig(
    state: ClusterState, path: Path, ca: Path, client: pki.KeyPair, user: str
) -> Path:
    """A kubeconfig (mode 0600) of ``user`` with ``client``'s certificate for the cluster."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    name = state.name
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": state.server, "certificate-authority-data": b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client.cert),
                    "client-key-data": b64(client.key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
