"""kube-scheduler: its spec."""

from __future__ import annotations

from pathlib import Path

from steward.cluster.admin import ssl_context
from steward.cluster.certificates import Certificates
from steward.cluster.startup import Probe, Spec, says_ok, secure_serving
from steward.cluster.state import LOOPBACK, ClusterState


def spec(state: ClusterState, binary: Path, certs: Certificates) -> Spec:
    """kube-scheduler without leader election, healthy once ``/healthz`` says ``ok``."""
    kubeconfig = certs.kubeconfigs["kube-scheduler"]
    port = state.ports["scheduler"]
    return Spec(
        "kube-scheduler",
        [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            *secure_serving(kubeconfig, port, certs.scheduler),
            "--leader-elect=false",
            "--v=1",
        ],
        Probe(f"https://{LOOPBACK}:{port}/healthz", ssl_context(certs.ca.pair.cert, None), says_ok),
    )
