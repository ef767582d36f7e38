"""etcd, kube-apiserver's store: its spec, serving mTLS on loopback."""

from __future__ import annotations

import json
from pathlib import Path

from steward.cluster.admin import ssl_context
from steward.cluster.certificates import Certificates
from steward.cluster.startup import Probe, Spec
from steward.cluster.state import LOOPBACK, ClusterState


def client_url(state: ClusterState) -> str:
    return f"https://{LOOPBACK}:{state.ports['etcd_client']}"


def spec(state: ClusterState, binary: Path, certs: Certificates) -> Spec:
    """A single member that keeps its data in ``<state dir>/etcd-data`` without fsync,
    healthy once ``/health`` says so."""
    p = state.ports
    url = client_url(state)
    peer_url = f"http://{LOOPBACK}:{p['etcd_peer']}"
    return Spec(
        "etcd",
        [
            str(binary),
            "--name=steward",
            f"--data-dir={state.directory / 'etcd-data'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=steward={peer_url}",
            f"--listen-metrics-urls=http://{LOOPBACK}:{p['etcd_metrics']}",
            f"--cert-file={certs.etcd_server.cert}",
            f"--key-file={certs.etcd_server.key}",
            f"--trusted-ca-file={certs.ca.pair.cert}",
            "--client-cert-auth=true",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ],
        Probe(
            f"{url}/health",
            ssl_context(certs.ca.pair.cert, certs.etcd_client),
            lambda body: json.loads(body).get("health") == "true",
        ),
    )
