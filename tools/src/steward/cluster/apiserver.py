"""kube-apiserver: its spec, with its tracing and audit configuration."""

from __future__ import annotations

from pathlib import Path

import yaml

from steward.cluster import etcd
from steward.cluster.admin import admin_context
from steward.cluster.certificates import Certificates
from steward.cluster.config import ClusterConfig
from steward.cluster.identities import FRONT_PROXY_USER
from steward.cluster.startup import Probe, Spec, says_ok
from steward.cluster.state import SERVICE_CIDR, ClusterState


def spec(state: ClusterState, binary: Path, certs: Certificates, config: ClusterConfig) -> Spec:
    """kube-apiserver on the cluster's host, every span sent to the cluster's Jaeger,
    ready once ``/readyz`` says ``ok`` to the admin."""
    d = state.directory
    ca = certs.ca.pair.cert
    return Spec(
        "kube-apiserver",
        [
            str(binary),
            f"--etcd-servers={etcd.client_url(state)}",
            f"--etcd-cafile={ca}",
            f"--etcd-certfile={certs.etcd_client.cert}",
            f"--etcd-keyfile={certs.etcd_client.key}",
            f"--bind-address={state.host}",
            f"--advertise-address={state.host}",
            # The kubernetes Service may not point at loopback: without real nodes
            # nothing needs it; with them it points at the machine's address.
            f"--endpoint-reconciler-type={'lease' if state.real_nodes else 'none'}",
            f"--secure-port={state.ports['apiserver']}",
            f"--tls-cert-file={certs.apiserver.cert}",
            f"--tls-private-key-file={certs.apiserver.key}",
            f"--client-ca-file={ca}",
            f"--cert-dir={d / 'pki' / 'generated'}",
            # Node: each kubelet (system:node:<name>) reaches only its own node's
            # objects, NodeRestriction keeps it from writing others'.
            "--authorization-mode=Node,RBAC",
            # Bootstrap tokens (kube-system Secrets) authenticate joining kubelets.
            "--enable-bootstrap-token-auth=true",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={certs.kubelet_client.cert}",
            f"--kubelet-client-key={certs.kubelet_client.key}",
            f"--kubelet-certificate-authority={ca}",
            # Its node proxy refuses loopback; kubelets serve on the node address.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={certs.service_account.cert}",
            f"--service-account-signing-key-file={certs.service_account.key}",
            f"--tracing-config-file={_tracing_config(state)}",
            # The aggregation layer: kube-apiserver proxies an APIService's group to
            # its server as the front proxy, naming the caller in these headers.
            f"--requestheader-client-ca-file={certs.front_proxy_ca.cert}",
            f"--requestheader-allowed-names={FRONT_PROXY_USER}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={certs.front_proxy.cert}",
            f"--proxy-client-key-file={certs.front_proxy.key}",
            *(_audit_args(d) if config.audit_log else ()),
            "--profiling=false",
            "--v=1",
        ],
        Probe(f"{state.server}/readyz", admin_context(state), says_ok),
    )


def _tracing_config(state: ClusterState) -> Path:
    """Every request traced, its spans sent to the cluster's Jaeger."""
    path = state.directory / "apiserver-tracing.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "TracingConfiguration",
                "endpoint": f"{state.host}:{state.ports['jaeger_otlp_grpc']}",
                "samplingRatePerMillion": 1_000_000,
            }
        )
    )
    return path


def _audit_args(d: Path) -> list[str]:
    """kube-apiserver's flags for :attr:`ClusterConfig.audit_log`: Metadata-level events
    of every caller but the load (admin), kwok, the scheduler and the API server itself,
    in batches (so the log adds little to the API server's own work)."""
    policy = d / "audit-policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [
                    {
                        "level": "None",
                        "users": [
                            "steward-admin",
                            "steward:kwok",
                            "system:kube-scheduler",
                            "system:apiserver",
                        ],
                    },
                    {"level": "None", "nonResourceURLs": ["/*"]},
                    {"level": "Metadata"},
                ],
            }
        )
    )
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={d / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=batch",
        "--audit-log-batch-max-wait=1s",
        "--audit-log-maxbackup=0",
    ]
