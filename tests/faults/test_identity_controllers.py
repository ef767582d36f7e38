"""The identity and certificate controllers SIGKILLed, and the informer restarted, in the
middle of their work.

Steward's informer, manager and controllers run as processes (``stack.py``, one stack for
the module, each case leaving an active instance of every controller behind) against a
control plane of this module's own whose kube-controller-manager runs neither its
serviceaccount, root-ca-cert-publisher, csrapproving nor csrsigning controller.

- Namespaces: a burst of namespaces is made; once Steward's serviceaccount and
  root-ca-cert-publisher controllers are serving it (some namespace has its account) the
  fault strikes (both controllers SIGKILLed, or the informer restarted), more namespaces
  are made while it lasts, then every namespace must end with exactly the ServiceAccount
  ``default`` and the ConfigMap ``kube-root-ca.crt`` holding the cluster's CA, as the
  same burst ends under upstream's controllers on the session ``cluster``. A controller
  that lost its queue with its process, or does not sync what exists when it starts (or
  when its informer comes back), leaves namespaces without them.
- CSRs: kube-apiserver client CSRs made and approved by the test as an admin; once the
  signer has issued some it is SIGKILLed, the rest are approved while it is down, and a
  successor takes over. Every CSR must end issued once (a watch records each certificate
  it ever carried), never Failed, its certificate valid, of the CA and with the subject
  asked for, as the same CSRs end under upstream's signer on the session ``cluster``.
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from kubernetes import client, config, watch

from steward.cluster import LocalCluster
from steward.kube import ConflictError, KubeClient, NotFoundError
from tests.conftest import local_cluster
from tests.controllers.harness import admin_kube, in_parallel
from tests.controllers.identity.csr import (
    APISERVER_CLIENT,
    CSR_PATH,
    ca_certificate,
    certificate_snapshot,
    conditions,
    csr_body,
    ec_key,
    request_pem,
    signing_flags,
)
from tests.faults.stack import Faults, faults_running
from tests.polling import wait_for

pytestmark = pytest.mark.integration

NAMESPACES = 60
"""Namespaces of a burst: the first two thirds before the fault, the rest during it."""
CSRS = 30
"""CSRs of a case: the first two thirds approved before the signer is killed."""
WITHIN = 90.0
ROOT_CA = "kube-root-ca.crt"

NamespaceState = tuple[tuple[str, ...], tuple[str, ...], str]
"""One namespace's end: its ServiceAccounts' names, its ConfigMaps' names, and what
``kube-root-ca.crt`` holds (``<the cluster CA>`` when exactly the cluster's CA)."""


@pytest.fixture(scope="module")
def id_fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of this module's own without upstream's serviceaccount,
    root-ca-cert-publisher, csrapproving and csrsigning controllers (no nodes)."""
    yield from local_cluster(
        tmp_path_factory,
        "id-faults",
        nodes=0,
        controllers="*,-serviceaccount,-root-ca-cert-publisher,-csrapproving,-csrsigning",
    )


@pytest.fixture(scope="module")
def admin(id_fault_cluster: LocalCluster) -> Iterator[KubeClient]:
    yield from admin_kube(id_fault_cluster, "id-fault-test", workers=8)


@pytest.fixture(scope="module")
def upstream_admin(cluster: LocalCluster) -> Iterator[KubeClient]:
    yield from admin_kube(cluster, "id-fault-test", workers=8)


# Namespaces ------------------------------------------------------------------------------
def ca_text(plane: LocalCluster) -> str:
    return (plane.directory / "pki" / "ca.crt").read_text()


def make_namespaces(kube: KubeClient, names: list[str]) -> None:
    in_parallel(
        lambda ns: kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}),
        names,
    )


def drop_namespaces(kube: KubeClient, names: list[str]) -> None:
    def drop(ns: str) -> None:
        with contextlib.suppress(NotFoundError, ConflictError):
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")

    in_parallel(drop, names)


def served(kube: KubeClient, names: list[str], ca: str) -> dict[str, NamespaceState]:
    """Each of ``names``' state (two cluster-wide lists: one read of each kind)."""
    wanted = set(names)
    accounts: dict[str, list[str]] = {ns: [] for ns in names}
    for sa in kube.request("GET", "/api/v1/serviceaccounts").get("items") or ():
        if sa["metadata"]["namespace"] in wanted:
            accounts[sa["metadata"]["namespace"]].append(sa["metadata"]["name"])
    maps: dict[str, list[str]] = {ns: [] for ns in names}
    published: dict[str, str] = {ns: "" for ns in names}
    for cm in kube.request("GET", "/api/v1/configmaps").get("items") or ():
        ns = cm["metadata"]["namespace"]
        if ns not in wanted:
            continue
        maps[ns].append(cm["metadata"]["name"])
        if cm["metadata"]["name"] == ROOT_CA:
            data = cm.get("data") or {}
            annotated = bool(
                (cm["metadata"].get("annotations") or {}).get("kubernetes.io/description")
            )
            published[ns] = ("<the cluster CA>" if data == {"ca.crt": ca} else repr(data)) + (
                " annotated" if annotated else ""
            )
    return {
        ns: (tuple(sorted(accounts[ns])), tuple(sorted(maps[ns])), published[ns]) for ns in names
    }


def settled(kube: KubeClient, names: list[str], ca: str) -> Counter[NamespaceState] | None:
    """The end state (how many namespaces end in each state) once every namespace has
    an account and a published CA, else None."""
    states = served(kube, names, ca)
    if any(not sas or ROOT_CA not in cms for sas, cms, _ in states.values()):
        return None
    return Counter(states.values())


def end_state(kube: KubeClient, names: list[str], ca: str, what: str) -> Counter[NamespaceState]:
    """:func:`settled`, awaited, and still the same a second later (a late second
    account or a rewritten CA would show)."""
    end: Counter[NamespaceState] = wait_for(lambda: settled(kube, names, ca), what, WITHIN)
    time.sleep(1.0)
    assert settled(kube, names, ca) == end, f"{what}: changed after settling"
    return end


def with_account(kube: KubeClient, names: list[str]) -> int:
    wanted = set(names)
    return sum(
        1
        for sa in kube.request("GET", "/api/v1/serviceaccounts").get("items") or ()
        if sa["metadata"]["namespace"] in wanted and sa["metadata"]["name"] == "default"
    )


def burst_names(prefix: str) -> list[str]:
    tag = uuid.uuid4().hex[:5]
    return [f"{prefix}-{tag}-{i:02d}" for i in range(NAMESPACES)]


@pytest.fixture(scope="module")
def expected_namespaces(
    upstream_admin: KubeClient, cluster: LocalCluster
) -> Counter[NamespaceState]:
    """The end of a burst under upstream's controllers, no fault."""
    names = burst_names("id-fault-up")
    try:
        make_namespaces(upstream_admin, names)
        return end_state(
            upstream_admin, names, ca_text(cluster), "upstream's accounts and CA everywhere"
        )
    finally:
        drop_namespaces(upstream_admin, names)


IDENTITY = ("serviceaccount", "root-ca-cert-publisher")


def controller_flags(plane: LocalCluster, kind: str) -> list[str]:
    """Upstream's one worker for the identity controllers; the publisher given the
    cluster's CA file, as kube-controller-manager's ``--root-ca-file``; the signer the
    cluster's CA and key, as kube-controller-manager's ``--cluster-signing-*-file``."""
    if kind == "csrsigning":
        return list(signing_flags(plane))
    flags = ["--workers=1"]
    if kind == "root-ca-cert-publisher":
        flags.append(f"--root-ca-file={plane.directory / 'pki' / 'ca.crt'}")
    return flags


@pytest.fixture(scope="module")
def faults(
    id_fault_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Faults]:
    yield from faults_running(
        id_fault_cluster,
        tmp_path_factory.mktemp("id-faults-logs"),
        (*IDENTITY, "csrsigning"),
        lambda kind: controller_flags(id_fault_cluster, kind),
    )


def burst_until_served(kube: KubeClient, names: list[str]) -> tuple[list[str], int]:
    """Make the burst's first two thirds and wait until the controller has served some
    and not all of them; returns the rest of the burst and how many were served."""
    first, rest = names[: NAMESPACES * 2 // 3], names[NAMESPACES * 2 // 3 :]
    make_namespaces(kube, first)
    count = wait_for(lambda: with_account(kube, first), "the burst being served", WITHIN)
    assert count < len(first), "the burst was served before the fault could strike"
    return rest, count


def test_identity_controllers_sigkill_mid_burst(
    faults: Faults,
    admin: KubeClient,
    id_fault_cluster: LocalCluster,
    expected_namespaces: Counter[NamespaceState],
) -> None:
    names = burst_names("id-fault-kill")
    try:
        rest, served_at_kill = burst_until_served(admin, names)
        for kind in IDENTITY:
            faults.kill(kind)
        killed = time.monotonic()
        make_namespaces(admin, rest)
        for kind in IDENTITY:
            faults.replace(kind)
        end = end_state(
            admin, names, ca_text(id_fault_cluster), "accounts and CA everywhere after the SIGKILL"
        )
        assert end == expected_namespaces
        faults.check_exits()
        print(
            f"serviceaccount, root-ca-cert-publisher SIGKILLed with {served_at_kill} of "
            f"{len(names) - len(rest)} namespaces served: settled "
            f"{time.monotonic() - killed:.1f}s later"
        )
    finally:
        drop_namespaces(admin, names)


def test_informer_restart_mid_burst(
    faults: Faults,
    admin: KubeClient,
    id_fault_cluster: LocalCluster,
    expected_namespaces: Counter[NamespaceState],
) -> None:
    stack = faults.stack
    names = burst_names("id-fault-inf")
    try:
        rest, served_at_kill = burst_until_served(admin, names)
        assert stack.informer is not None
        stack.informer.kill()
        killed = time.monotonic()
        make_namespaces(admin, rest)
        stack.informer.start()
        stack.wait_serving(stack.informer, stack.informer_address)
        end = end_state(
            admin,
            names,
            ca_text(id_fault_cluster),
            "accounts and CA everywhere after the informer's restart",
        )
        assert end == expected_namespaces
        # The controllers kept running through the informer's restart.
        faults.check_exits()
        print(
            f"informer restarted with {served_at_kill} of {len(names) - len(rest)} "
            f"namespaces served: settled {time.monotonic() - killed:.1f}s later"
        )
    finally:
        drop_namespaces(admin, names)


# CSRs ------------------------------------------------------------------------------------
@dataclass
class CsrRecord:
    """What a watch of a set of CSRs saw: each CSR's distinct certificates in the order
    they appeared, and which CSRs ever carried a Failed condition."""

    names: set[str]
    certificates: dict[str, list[str]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)


@contextlib.contextmanager
def watching_csrs(plane: LocalCluster, names: set[str]) -> Iterator[CsrRecord]:
    """Record every change of the CSRs ``names`` from now until the block ends."""
    record = CsrRecord(names)
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    certificates = client.CertificatesV1Api(api)
    start = certificates.list_certificate_signing_request().metadata.resource_version
    stopper = watch.Watch()
    ready = threading.Event()

    def run() -> None:
        ready.set()
        with contextlib.suppress(Exception):  # the connection closed at the end
            for event in stopper.stream(
                certificates.list_certificate_signing_request,
                resource_version=start,
                timeout_seconds=300,
            ):
                csr = event["object"]
                name = csr.metadata.name
                if name not in names or csr.status is None:
                    continue
                cert = csr.status.certificate or ""
                seen = record.certificates.setdefault(name, [])
                if cert and cert not in seen:
                    seen.append(cert)
                if any(c.type == "Failed" for c in csr.status.conditions or ()):
                    record.failed.add(name)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield record
    finally:
        stopper.stop()
        api.close()


@dataclass(frozen=True)
class CsrMaterial:
    names: list[str]
    bodies: list[dict[str, Any]]
    subjects: list[str]


def csr_material(prefix: str) -> CsrMaterial:
    tag = uuid.uuid4().hex[:5]
    names, bodies, subjects = [], [], []
    for i in range(CSRS):
        name = f"{prefix}-{tag}-{i:02d}"
        cn = f"user-{i:02d}"
        orgs = (f"team-{i % 3}",)
        pem = request_pem(ec_key(), cn, orgs)
        names.append(name)
        bodies.append(csr_body(name, pem, APISERVER_CLIENT, ["client auth"], 3600))
        subjects.append(f"CN={cn},O={orgs[0]}")
    return CsrMaterial(names, bodies, subjects)


def approve(kube: KubeClient, name: str) -> None:
    """Add the admin's Approved condition through the approval subresource."""
    for _ in range(10):
        csr = kube.request("GET", f"{CSR_PATH}/{name}")
        csr.setdefault("status", {})["conditions"] = [
            *((csr.get("status") or {}).get("conditions") or ()),
            {"type": "Approved", "status": "True", "reason": "ByTest", "message": "by the test"},
        ]
        try:
            kube.request("PUT", f"{CSR_PATH}/{name}/approval", csr)
            return
        except ConflictError:
            continue
    raise AssertionError(f"could not approve {name}")


def csrs(kube: KubeClient, names: list[str]) -> dict[str, dict[str, Any]]:
    wanted = set(names)
    return {
        c["metadata"]["name"]: c
        for c in kube.request("GET", CSR_PATH).get("items") or ()
        if c["metadata"]["name"] in wanted
    }


def issued(kube: KubeClient, names: list[str]) -> int:
    return sum(1 for c in csrs(kube, names).values() if (c.get("status") or {}).get("certificate"))


def csr_end(kube: KubeClient, m: CsrMaterial, ca: x509.Certificate) -> list[tuple[Any, ...]] | None:
    """Each CSR's end (in the order made) once all are issued or Failed, else None:
    its conditions, how many certificates its PEM holds, whether the subject is the one
    asked for, and what the certificate says (:func:`certificate_snapshot`)."""
    found = csrs(kube, m.names)
    ends: list[tuple[Any, ...]] = []
    for name, subject in zip(m.names, m.subjects, strict=True):
        csr = found.get(name)
        if csr is None:
            return None
        status = csr.get("status") or {}
        kinds = {c[0] for c in conditions(csr)}
        if not status.get("certificate") and "Failed" not in kinds:
            return None
        if not status.get("certificate"):
            ends.append((conditions(csr),))
            continue
        pem = base64.b64decode(status["certificate"])
        certificates = x509.load_pem_x509_certificates(pem)
        if not of_ca(certificates[0], ca):
            ends.append((conditions(csr), "not signed by the cluster's CA"))
            continue
        snap = certificate_snapshot(csr, ca)
        ends.append(
            (
                conditions(csr),
                len(certificates),
                snap["subject_text"] == subject,
                sorted(snap.items()),
            )
        )
    return ends


def of_ca(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ``ca`` signed ``cert`` (checked here: :func:`certificate_snapshot` expects
    a certificate of the CA)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def drop_csrs(kube: KubeClient, names: list[str]) -> None:
    def drop(name: str) -> None:
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"{CSR_PATH}/{name}")

    in_parallel(drop, names)


def create_csrs(kube: KubeClient, m: CsrMaterial) -> None:
    in_parallel(lambda body: kube.request("POST", CSR_PATH, body), m.bodies)


def approve_all(kube: KubeClient, names: list[str]) -> None:
    in_parallel(lambda name: approve(kube, name), names)


def check_record(record: CsrRecord, names: list[str]) -> None:
    """The watch saw every CSR get one certificate and keep it, and none Failed."""
    wait_for(lambda: all(record.certificates.get(n) for n in names), "the watch to see all", 30)
    assert not record.failed, f"Failed at some point: {sorted(record.failed)}"
    many = {n: len(c) for n, c in record.certificates.items() if len(c) != 1}
    assert not many, f"not exactly one certificate seen: {many}"
    assert set(record.certificates) == set(names)


@pytest.fixture(scope="module")
def expected_csrs(upstream_admin: KubeClient, cluster: LocalCluster) -> list[tuple[Any, ...]]:
    """The same CSRs' end under upstream's signer, no fault."""
    m = csr_material("id-fault-up")
    try:
        with watching_csrs(cluster, set(m.names)) as record:
            create_csrs(upstream_admin, m)
            approve_all(upstream_admin, m.names)
            end: list[tuple[Any, ...]] = wait_for(
                lambda: csr_end(upstream_admin, m, ca_certificate(cluster)),
                "upstream's signer to issue every CSR",
                WITHIN,
            )
            check_record(record, m.names)
        return end
    finally:
        drop_csrs(upstream_admin, m.names)


def test_signer_sigkill_mid_issuing(
    faults: Faults,
    id_fault_cluster: LocalCluster,
    admin: KubeClient,
    expected_csrs: list[tuple[Any, ...]],
) -> None:
    plane = id_fault_cluster
    m = csr_material("id-fault")
    first, rest = m.names[: CSRS * 2 // 3], m.names[CSRS * 2 // 3 :]
    try:
        with watching_csrs(plane, set(m.names)) as record:
            create_csrs(admin, m)

            # Approved one by one while the signer issues, so that it dies between them.
            def approve_first() -> None:
                for name in first:
                    approve(admin, name)

            approving = threading.Thread(target=approve_first)
            approving.start()
            wait_for(lambda: issued(admin, m.names) >= 3, "the signer issuing", WITHIN)
            faults.kill("csrsigning")
            killed = time.monotonic()
            approving.join(WITHIN)
            at_kill = issued(admin, m.names)
            approve_all(admin, rest)
            faults.replace("csrsigning")
            end = wait_for(
                lambda: csr_end(admin, m, ca_certificate(plane)),
                "every CSR issued or Failed after the SIGKILL",
                WITHIN,
            )
            check_record(record, m.names)
        assert end == expected_csrs
        faults.check_exits()
        print(
            f"csrsigning SIGKILLed with {at_kill} of {len(first)} approved CSRs issued "
            f"(and {len(rest)} approved after): "
            f"all issued {time.monotonic() - killed:.1f}s later"
        )
    finally:
        drop_csrs(admin, m.names)
