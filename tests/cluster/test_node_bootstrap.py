"""A real node joins by TLS bootstrap through Steward's certificate controllers, and
rotates its client certificate through them.

The cluster runs Steward's ``csrapproving``, ``csrsigning`` and ``csrcleaner`` (and
kube-controller-manager without its own of those names); its one real node's kubelet
holds only a bootstrap token. The kubelet asks for a client certificate with a
CertificateSigningRequest, which Steward's approver approves after a SubjectAccessReview
(bootstrappers may ask for node client certificates) and Steward's signer issues from
the cluster CA; the node turns Ready with it. Certificates are short-lived
(``--cluster-signing-duration=3m``), so the kubelet soon asks again, now as the node
itself (``selfnodeclient``): that request too is approved and signed by Steward, the
kubelet switches to the new certificate, and the node stays Ready. Needs root and the
real nodes' packages (``make node-packages``).
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.progress import Progress
from tests.conftest import require_real_nodes

pytestmark = pytest.mark.integration

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CSR_CONTROLLERS = ("csrapproving", "csrsigning", "csrcleaner")
ROTATION_WITHIN = 300.0
"""Seconds to wait for the kubelet's second request: with a 3-minute certificate
backdated 5 minutes, the kubelet's rotation deadline (70 to 90 percent of the 8-minute
lifetime) is at most about 1.5 minutes after issue (a deadline, not a measurement)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_real_nodes()
    cfg = ClusterConfig(
        name=f"steward-test-bootstrap-{os.getpid()}",
        state_dir=tmp_path_factory.mktemp("bootstrap-cluster"),
        nodes=0,
        real_nodes=1,
        steward=True,
        steward_controllers=CSR_CONTROLLERS,
        node_bootstrap=True,
        cluster_signing_duration="3m",
        die_with_parent=True,
    )
    up = LocalCluster.up(cfg, progress=Progress(interval=15.0))
    try:
        yield up
    finally:
        if (up.directory / "state.json").exists():
            up.down(progress=Progress(quiet=True))


def node_csrs(cluster: LocalCluster, node: str) -> list[dict[str, Any]]:
    """The kubelet client CertificateSigningRequests for ``node``, oldest first."""
    items = cluster.api("GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests")["items"]
    mine = [
        csr
        for csr in items
        if csr["spec"]["signerName"] == KUBELET_CLIENT_SIGNER
        and _requested_cn(csr) == f"system:node:{node}"
    ]
    return sorted(mine, key=lambda c: c["metadata"]["creationTimestamp"])


def _requested_cn(csr: dict[str, Any]) -> str:
    request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
    return str(request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def issued(csr: dict[str, Any]) -> x509.Certificate | None:
    data = (csr.get("status") or {}).get("certificate")
    return x509.load_pem_x509_certificate(base64.b64decode(data)) if data else None


def approval(csr: dict[str, Any]) -> tuple[str, str, str] | None:
    for c in (csr.get("status") or {}).get("conditions") or []:
        if c["type"] == "Approved":
            return c["status"], c.get("reason", ""), c.get("message", "")
    return None


def check_signed_by_ca(cluster: LocalCluster, cert: x509.Certificate, node: str) -> None:
    ca = x509.load_pem_x509_certificate((cluster.directory / "pki" / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)  # the CA's signature over it
    subject = cert.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{node}"
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:nodes"
    ]
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    # 3 minutes asked for, backdated 5 minutes (a short-lived certificate keeps its end).
    assert 7.5 * 60 <= lifetime.total_seconds() <= 8.5 * 60, lifetime


def node_ready(cluster: LocalCluster, node: str) -> bool:
    obj = cluster.api("GET", f"/api/v1/nodes/{node}")
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def test_the_node_joins_with_a_certificate_steward_approved_and_signed(
    cluster: LocalCluster,
) -> None:
    node = cluster.state.real_nodes[0].name
    kcm = next(p for p in cluster.state.processes if p.name == "kube-controller-manager")
    flag = next(a for a in kcm.argv if a.startswith("--controllers="))
    for name in CSR_CONTROLLERS:  # upstream's are off: only Steward's can have acted
        assert f"-{name}" in flag.split("=", 1)[1].split(","), flag
    assert node_ready(cluster, node)
    first = node_csrs(cluster, node)[0]
    assert first["spec"]["username"].startswith("system:bootstrap:"), first["spec"]
    assert approval(first) == (
        "True",
        "AutoApproved",
        "Auto approving kubelet client certificate after SubjectAccessReview.",
    )
    cert = issued(first)
    assert cert is not None, first.get("status")
    check_signed_by_ca(cluster, cert, node)


def test_the_node_rotates_its_certificate_through_steward_and_stays_ready(
    cluster: LocalCluster,
) -> None:
    node = cluster.state.real_nodes[0].name
    deadline = time.monotonic() + ROTATION_WITHIN
    renewal: dict[str, Any] | None = None
    while renewal is None:
        renewals = [
            c
            for c in node_csrs(cluster, node)
            if c["spec"]["username"] == f"system:node:{node}" and issued(c) is not None
        ]
        renewal = renewals[0] if renewals else None
        assert renewal is not None or time.monotonic() < deadline, [
            (c["spec"]["username"], c.get("status")) for c in node_csrs(cluster, node)
        ]
        if renewal is None:
            time.sleep(2)
    assert approval(renewal) == (
        "True",
        "AutoApproved",
        "Auto approving self kubelet client certificate after SubjectAccessReview.",
    )
    cert = issued(renewal)
    assert cert is not None
    check_signed_by_ca(cluster, cert, node)
    # The kubelet takes the renewed certificate (or a later one) and keeps its node Ready.
    current = cluster.state.real_nodes[0].directory / "pki" / "kubelet-client-current.pem"
    while True:
        in_use = x509.load_pem_x509_certificates(current.read_bytes())[0]
        if in_use.not_valid_before_utc >= cert.not_valid_before_utc:
            break
        assert time.monotonic() < deadline + 60, "the kubelet kept its first certificate"
        time.sleep(2)
    check_signed_by_ca(cluster, in_use, node)
    time.sleep(15)  # a few node status reports (every 10 s) with the new certificate
    assert node_ready(cluster, node)
