"""kube-controller-manager: its spec, and its restart with other ``--controllers``."""

from __future__ import annotations

from pathlib import Path

from steward.cluster.admin import ssl_context
from steward.cluster.certificates import Certificates
from steward.cluster.config import ClusterConfig
from steward.cluster.registry import upstream_runs
from steward.cluster.startup import Probe, Spec, says_ok, secure_serving
from steward.cluster.state import LOOPBACK, ClusterState

NAME = "kube-controller-manager"

CLUSTER_FLAGS = ("--node-monitor-grace-period=5m",)
"""The local control plane's settings of controllers, before :attr:`ClusterConfig.kcm_flags`
(a later flag wins); Steward's controllers that declare one get it too
(:func:`steward.cluster.services.shared_flags`). kwok renews the simulated nodes' Leases;
on a loaded two-core machine a renewal can be late by more than the default 50 s, and the
node lifecycle controller would then mark every node and pod not ready (kwok never readies
a running pod again). Simulated nodes do not fail."""


def probe(state: ClusterState) -> Probe:
    """Healthy once ``/healthz`` says ``ok``."""
    return Probe(
        f"https://{LOOPBACK}:{state.ports['controller_manager']}/healthz",
        ssl_context(state.pki_file("ca.crt"), None),
        says_ok,
    )


def spec(state: ClusterState, binary: Path, certs: Certificates, config: ClusterConfig) -> Spec:
    """kube-controller-manager with the controllers :attr:`ClusterConfig.controllers`
    names, and the client limits and extra flags of ``config``."""
    kubeconfig = certs.kubeconfigs[NAME]
    ca = certs.ca.pair
    return Spec(
        NAME,
        [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            *secure_serving(
                kubeconfig, state.ports["controller_manager"], certs.controller_manager
            ),
            f"--controllers={config.kcm_controllers()}",
            # Its tokens controller starts whenever it has the key, whatever
            # --controllers says (upstream's "special handling"): without the key when
            # its serviceaccount-token is off, so that only Steward's fills the Secrets.
            *(
                [f"--service-account-private-key-file={certs.service_account.key}"]
                if upstream_runs(config.kcm_controllers(), "serviceaccount-token")
                else []
            ),
            f"--root-ca-file={ca.cert}",
            f"--cluster-signing-cert-file={ca.cert}",
            f"--cluster-signing-key-file={ca.key}",
            *(
                [f"--cluster-signing-duration={config.cluster_signing_duration}"]
                if config.cluster_signing_duration
                else []
            ),
            "--use-service-account-credentials=true",
            f"--kube-api-qps={config.kube_api_qps:g}",
            f"--kube-api-burst={config.kube_api_burst}",
            *(
                [f"--kube-api-content-type={config.kube_api_content_type}"]
                if config.kube_api_content_type
                else []
            ),
            "--leader-elect=false",
            *CLUSTER_FLAGS,
            *config.kcm_flags,
            "--v=1",
        ],
        probe(state),
    )
