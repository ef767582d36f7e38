"""Fixtures and scenarios of the CSR controllers' tests (csrapproving, csrsigning,
csrcleaner).

``csr_controllers`` runs Steward's three controllers against ``id_cluster`` (where
kube-controller-manager runs none of its own CSR controllers), each as its own identity
with only its RBAC of ``deploy/rbac/``, the signer given that cluster's CA
(``--cluster-signing-cert-file``/``--cluster-signing-key-file``, as kube-controller-manager
has it on the session's ``cluster``).

# Scenarios
Each scenario (:data:`SCENARIOS`) makes the same CertificateSigningRequests (the same keys
and requests, made once by the caller) on one side, acts as a requester or an admin
would (impersonating a bootstrapping kubelet, approving, denying), waits for the point it
is about and returns a :data:`Snapshot`: each CSR's conditions (type, status, reason,
message) and, when issued, what its certificate says (:func:`certificate_snapshot`:
subject and issuer, extensions byte for byte but the authority key identifier's value,
signature algorithm, key, validity as lengths). Names, uids, timestamps and certificate
bytes are left out. Both sides must give the same snapshot.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from steward.cluster import LocalCluster
from steward.controllers.certificates.approving import CONTROLLER as APPROVING
from steward.controllers.certificates.cleaner import CONTROLLER as CLEANER
from steward.controllers.certificates.signing import CONTROLLER as SIGNING
from steward.kube import ApiStatusError, ConflictError, KubeClient, NotFoundError
from tests.controllers.harness import (
    Starter,
    controllers,
    eventually,
    in_loop_informer,
    stays,
    upstream_kube,
)
from tests.controllers.identity.kcm import controller_manager

__all__ = ["Starter", "eventually", "stays", "upstream_kube"]

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
NODECLIENT_ROLE = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
SELFNODECLIENT_ROLE = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
BOOTSTRAPPER_ROLE = "system:node-bootstrapper"
"""Upstream's bootstrap ClusterRoles: who may have a node client CSR approved, have their
own approved, and create CSRs at all."""
WITHIN = 60.0
"""Seconds a side may take to reach a scenario's point (a deadline, not a measurement)."""
KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
CLIENT_USAGES = ["digital signature", "key encipherment", "client auth"]

Snapshot = dict[str, Any]


# The controllers ----------------------------------------------------------------------------
def ca_files(plane: LocalCluster) -> tuple[Path, Path]:
    """The cluster's CA certificate and key (what kube-controller-manager signs with)."""
    return plane.directory / "pki" / "ca.crt", plane.directory / "pki" / "ca.key"


def ca_certificate(plane: LocalCluster) -> x509.Certificate:
    return x509.load_pem_x509_certificate(ca_files(plane)[0].read_bytes())


def signing_flags(plane: LocalCluster) -> tuple[str, ...]:
    cert, key = ca_files(plane)
    return (f"--cluster-signing-cert-file={cert}", f"--cluster-signing-key-file={key}")


@dataclass
class CsrControllers:
    """The three controllers' starters (each already started once)."""

    approving: Starter
    signing: Starter
    cleaner: Starter


@contextlib.asynccontextmanager
async def running_controllers(
    plane: LocalCluster, *, signing: tuple[str, ...] | None = None
) -> AsyncIterator[CsrControllers]:
    """Steward's three CSR controllers on ``plane``, each as its own identity, sharing an
    informer; the signer with ``signing`` flags (default: the plane's CA)."""
    flags = signing_flags(plane) if signing is None else signing

    def identity(name: str) -> Path:
        return plane.component_kubeconfig(f"controller-{name}")

    async with (
        in_loop_informer(plane) as informer,
        controllers(APPROVING, identity("csrapproving"), informer, workers=2) as approving,
        controllers(SIGNING, identity("csrsigning"), informer, workers=2) as signer,
        controllers(CLEANER, identity("csrcleaner"), informer, workers=1) as cleaner,
    ):
        approving.start()
        signer.start(*flags)
        cleaner.start()
        yield CsrControllers(approving, signer, cleaner)


@pytest_asyncio.fixture
async def csr_controllers(id_cluster: LocalCluster) -> AsyncIterator[CsrControllers]:
    """Steward's three CSR controllers running on ``id_cluster`` for one test."""
    async with running_controllers(id_cluster) as running:
        yield running


@pytest.fixture
def suffix() -> str:
    """A name part for one test's cluster-wide objects, the same on both sides."""
    return uuid.uuid4().hex[:6]


# Keys and requests ---------------------------------------------------------------------------
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def ec_p384_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP384R1())


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def request_pem(
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    cn: str,
    orgs: tuple[str, ...] = (),
    *,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    emails: tuple[str, ...] = (),
    uris: tuple[str, ...] = (),
    cn_first: bool = False,
) -> bytes:
    """A PEM certificate request (``cn_first``: the CN before the organizations, the
    order Go re-encodes away)."""
    import ipaddress

    org_attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    cn_attr = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name(cn_attr + org_attrs if cn_first else org_attrs + cn_attr)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    sans += [x509.RFC822Name(e) for e in emails]
    sans += [x509.UniformResourceIdentifier(u) for u in uris]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_body(
    name: str,
    pem: bytes,
    signer: str,
    usages: list[str],
    expiration: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "request": base64.b64encode(pem).decode(),
        "signerName": signer,
        "usages": usages,
    }
    if expiration is not None:
        spec["expirationSeconds"] = expiration
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }


# Reads and writes ---------------------------------------------------------------------------
async def call(kube: KubeClient, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    """One request on a thread (the controllers share the test's event loop)."""
    return await asyncio.to_thread(lambda: kube.request(method, path, body, **kw))


def impersonating(user: str, group: str) -> dict[str, str]:
    return {"Impersonate-User": user, "Impersonate-Group": group}


def get_csr(kube: KubeClient, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", f"{CSR_PATH}/{name}")
    except NotFoundError:
        return None


def delete_csr(kube: KubeClient, name: str) -> None:
    with contextlib.suppress(NotFoundError):
        kube.request("DELETE", f"{CSR_PATH}/{name}")


def ago(delta: datetime.timedelta) -> str:
    return (datetime.datetime.now(datetime.UTC) - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


async def add_condition(
    kube: KubeClient,
    name: str,
    kind: str,
    *,
    reason: str = "ByTest",
    message: str = "by the test",
    updated: str | None = None,
    subresource: str = "approval",
) -> dict[str, Any]:
    """Append a condition through ``subresource`` (``approval`` for Approved/Denied,
    ``status`` for Failed), its lastUpdateTime ``updated`` when given."""
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
    }
    if updated is not None:
        condition["lastUpdateTime"] = updated
    for _ in range(10):
        csr = await call(kube, "GET", f"{CSR_PATH}/{name}")
        status = csr.setdefault("status", {})
        status["conditions"] = [*(status.get("conditions") or ()), condition]
        try:
            return await call(kube, "PUT", f"{CSR_PATH}/{name}/{subresource}", csr)  # type: ignore[no-any-return]
        except ConflictError:
            continue
    raise AssertionError(f"could not add {kind} to {name}")


async def set_certificate(kube: KubeClient, name: str, pem: bytes) -> None:
    """Write ``status.certificate`` as a signer would."""
    csr = await call(kube, "GET", f"{CSR_PATH}/{name}")
    csr.setdefault("status", {})["certificate"] = base64.b64encode(pem).decode()
    await call(kube, "PUT", f"{CSR_PATH}/{name}/status", csr)


def self_signed(
    key: ec.EllipticCurvePrivateKey,
    cn: str,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


@contextlib.contextmanager
def bound(
    kube: KubeClient, name: str, role: str, *, user: str = "", group: str = ""
) -> Iterator[None]:
    """A ClusterRoleBinding of ``role`` to ``user`` or ``group`` while the block runs."""
    subject = {"kind": "User", "name": user} if user else {"kind": "Group", "name": group}
    subject["apiGroup"] = "rbac.authorization.k8s.io"
    body = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }
    kube.request("POST", BINDINGS, body)
    try:
        yield
    finally:
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"{BINDINGS}/{name}")


async def create_as(
    kube: KubeClient, body: dict[str, Any], user: str, group: str
) -> dict[str, Any]:
    """Create a CSR as ``user`` in ``group`` (the admin impersonating them), again while
    a fresh binding is not yet in the authorizer's cache."""
    deadline = time.monotonic() + WITHIN
    while True:
        try:
            return await call(kube, "POST", CSR_PATH, body, headers=impersonating(user, group))  # type: ignore[no-any-return]
        except ApiStatusError as err:
            if err.status != 403 or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.25)


# Waiting ------------------------------------------------------------------------------------
def condition_types(csr: dict[str, Any] | None) -> set[str]:
    return {c.get("type", "") for c in ((csr or {}).get("status") or {}).get("conditions") or ()}


async def until_issued(kube: KubeClient, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        csr = get_csr(kube, name)
        return csr if ((csr or {}).get("status") or {}).get("certificate") else None

    return await eventually(check, f"CSR {name} issued", WITHIN)  # type: ignore[no-any-return]


async def until_condition(kube: KubeClient, name: str, kind: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        csr = get_csr(kube, name)
        return csr if kind in condition_types(csr) else None

    return await eventually(check, f"CSR {name} {kind}", WITHIN)  # type: ignore[no-any-return]


async def until_gone(kube: KubeClient, name: str, within: float = WITHIN) -> None:
    await eventually(lambda: get_csr(kube, name) is None, f"CSR {name} deleted", within)


# Snapshots ----------------------------------------------------------------------------------
def conditions(csr: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [
        (c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", ""))
        for c in (csr.get("status") or {}).get("conditions") or ()
    ]


def issued_certificate(csr: dict[str, Any]) -> x509.Certificate:
    pem = base64.b64decode(csr["status"]["certificate"])
    return x509.load_pem_x509_certificate(pem)


def certificate_snapshot(csr: dict[str, Any], ca: x509.Certificate) -> Snapshot:
    """What the issued certificate says, comparable across two clusters: the CA's own
    identity (its key identifier, its expiry) replaced by whether it is the CA's."""
    cert = issued_certificate(csr)
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    extensions = []
    for ext in cert.extensions:
        value = ext.value
        der = value.value if isinstance(value, x509.UnrecognizedExtension) else value.public_bytes()
        if isinstance(value, x509.AuthorityKeyIdentifier):
            der = b"<the CA's key identifier>" if value.key_identifier == ca_ski else der
        extensions.append((ext.oid.dotted_string, ext.critical, der.hex()))
    created = datetime.datetime.strptime(
        csr["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"
    ).replace(tzinfo=datetime.UTC)
    not_before, not_after = cert.not_valid_before_utc, cert.not_valid_after_utc
    capped = not_after == ca.not_valid_after_utc
    request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
    return {
        "version": cert.version.name,
        "subject": cert.subject.public_bytes().hex(),
        "subject_text": cert.subject.rfc4514_string(),
        "issuer_is_ca": cert.issuer.public_bytes() == ca.subject.public_bytes(),
        "verified_by_ca": _verifies(cert, ca),
        "signature": cert.signature_algorithm_oid.dotted_string,
        "key_is_requested": cert.public_key() == request.public_key(),
        "serial_bits_at_most_128": 0 < cert.serial_number < 2**128,
        "extensions": extensions,
        "backdated_minutes": round((created - not_before).total_seconds() / 60),
        "capped_at_ca_expiry": capped,
        "lifetime_seconds": None if capped else (not_after - not_before).total_seconds(),
    }


def _verifies(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def snapshot(csr: dict[str, Any], ca: x509.Certificate) -> Snapshot:
    found: Snapshot = {"conditions": conditions(csr)}
    if (csr.get("status") or {}).get("certificate"):
        found["certificate"] = certificate_snapshot(csr, ca)
    return found


# Scenarios ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Material:
    """What a scenario makes on either side: names, requests and the certificates a test
    writes as a signer would, made once."""

    suffix: str
    requests: dict[str, bytes]
    certificates: dict[str, bytes] = field(default_factory=dict)


Scenario = Callable[[KubeClient, x509.Certificate, Material], Awaitable[dict[str, Snapshot]]]


def kubelet_bootstrap_material(suffix: str) -> Material:
    return Material(
        suffix,
        {
            "node": request_pem(ec_key(), f"system:node:node-{suffix}", ("system:nodes",)),
            "self": request_pem(
                rsa_key(), f"system:node:self-{suffix}", ("system:nodes",), cn_first=True
            ),
            "wrong-org": request_pem(ec_key(), f"system:node:node-{suffix}", ("system:masters",)),
            "wrong-cn": request_pem(ec_key(), f"node-{suffix}", ("system:nodes",)),
        },
    )


async def kubelet_bootstrap(
    kube: KubeClient, ca: x509.Certificate, m: Material
) -> dict[str, Snapshot]:
    """A bootstrapping kubelet (a user of group ``system:bootstrappers``, allowed
    ``nodeclient``) and a node (``system:nodes``, allowed ``selfnodeclient`` for its own
    name) each ask for a client certificate: both approved (with the two recognizers'
    messages) and issued. Two requests the bootstrapper makes with the wrong organization
    or common name are neither approved nor issued."""
    s = m.suffix
    boot_user, boot_group = f"system:bootstrap:{s}", f"system:bootstrappers:steward-{s}"
    node_user = f"system:node:self-{s}"
    names = {k: f"csr-{k}-{s}" for k in m.requests}
    with contextlib.ExitStack() as stack:
        for binding, role, who in (
            (f"csr-boot-create-{s}", BOOTSTRAPPER_ROLE, {"group": boot_group}),
            (f"csr-boot-nodeclient-{s}", NODECLIENT_ROLE, {"group": boot_group}),
            (f"csr-self-create-{s}", BOOTSTRAPPER_ROLE, {"user": node_user}),
            (f"csr-self-selfnodeclient-{s}", SELFNODECLIENT_ROLE, {"user": node_user}),
        ):
            stack.enter_context(bound(kube, binding, role, **who))
        try:
            for key in ("wrong-org", "wrong-cn", "node"):
                body = csr_body(names[key], m.requests[key], KUBELET_CLIENT, CLIENT_USAGES)
                await create_as(kube, body, boot_user, boot_group)
            body = csr_body(names["self"], m.requests["self"], KUBELET_CLIENT, CLIENT_USAGES)
            await create_as(kube, body, node_user, "system:nodes")
            issued = {k: await until_issued(kube, names[k]) for k in ("node", "self")}
            # Made before the approved ones, so looked at before them: left pending.
            await stays(
                lambda: (
                    not any(
                        condition_types(get_csr(kube, names[k])) for k in ("wrong-org", "wrong-cn")
                    )
                ),
                "the invalid requests pending",
                2.0,
            )
            found = {k: snapshot(csr, ca) for k, csr in issued.items()}
            for k in ("wrong-org", "wrong-cn"):
                found[k] = snapshot(get_csr(kube, names[k]) or {}, ca)
            return found
        finally:
            for name in names.values():
                delete_csr(kube, name)


def granted_later_material(suffix: str) -> Material:
    return Material(
        suffix,
        {
            "node": request_pem(ec_key(), f"system:node:later-{suffix}", ("system:nodes",)),
            "self": request_pem(ec_key(), f"system:node:self-later-{suffix}", ("system:nodes",)),
        },
    )


async def granted_later(kube: KubeClient, ca: x509.Certificate, m: Material) -> dict[str, Snapshot]:
    """A bootstrapping kubelet and a node ask for client certificates while allowed to
    create CSRs but neither ``nodeclient`` nor ``selfnodeclient``: the reviews say no and
    both stay pending (upstream's approver retries them with backoff; no change of the CSR
    follows). Then bindings grant the two permissions: both are approved (each with its
    recognizer's message) and issued, with nothing else done to the CSRs."""
    s = m.suffix
    boot_user, boot_group = f"system:bootstrap:later-{s}", f"system:bootstrappers:later-{s}"
    node_user = f"system:node:self-later-{s}"
    names = {k: f"csr-later-{k}-{s}" for k in m.requests}
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            bound(kube, f"csr-later-boot-create-{s}", BOOTSTRAPPER_ROLE, group=boot_group)
        )
        stack.enter_context(
            bound(kube, f"csr-later-self-create-{s}", BOOTSTRAPPER_ROLE, user=node_user)
        )
        try:
            body = csr_body(names["node"], m.requests["node"], KUBELET_CLIENT, CLIENT_USAGES)
            await create_as(kube, body, boot_user, boot_group)
            body = csr_body(names["self"], m.requests["self"], KUBELET_CLIENT, CLIENT_USAGES)
            await create_as(kube, body, node_user, "system:nodes")
            await stays(
                lambda: not any(condition_types(get_csr(kube, n)) for n in names.values()),
                "both requests pending while the reviews say no",
                2.0,
            )
            found = {f"{k}-refused": snapshot(get_csr(kube, n) or {}, ca) for k, n in names.items()}
            stack.enter_context(
                bound(kube, f"csr-later-boot-nodeclient-{s}", NODECLIENT_ROLE, group=boot_group)
            )
            stack.enter_context(
                bound(kube, f"csr-later-self-client-{s}", SELFNODECLIENT_ROLE, user=node_user)
            )
            for k, name in names.items():
                found[k] = snapshot(await until_issued(kube, name), ca)
            return found
        finally:
            for name in names.values():
                delete_csr(kube, name)


def client_material(suffix: str) -> Material:
    return Material(
        suffix,
        {
            "short": request_pem(ec_key(), f"user-{suffix}", ("team-a", "team-b")),
            "default": request_pem(rsa_key(), f"user-default-{suffix}"),
            "server-usage": request_pem(ec_key(), f"user-bad-{suffix}"),
            "serving": request_pem(
                ec_key(),
                f"system:node:serve-{suffix}",
                ("system:nodes",),
                dns=("serve.example", "node.local"),
                ips=("10.0.0.7", "::1"),
            ),
            "denied": request_pem(ec_key(), f"user-denied-{suffix}"),
            "kubelet-bad-org": request_pem(
                ec_key(), f"system:node:bad-{suffix}", ("system:masters",)
            ),
            # Every kind of SAN, URIs and e-mails first: Go writes DNS, e-mail, IP, URI.
            "all-sans": request_pem(
                ec_p384_key(),
                f"user_sans {suffix}",
                ("b-org", "a-org"),
                uris=("spiffe://cluster.local/ns/x/sa/y",),
                emails=("someone@example.com",),
                ips=("192.0.2.1",),
                dns=("z.example", "a.example"),
            ),
        },
    )


async def approved_by_admin(
    kube: KubeClient, ca: x509.Certificate, m: Material
) -> dict[str, Snapshot]:
    """Requests an admin approves: a kube-apiserver client certificate for an hour
    (issued for an hour, not backdated at its end), one without expirationSeconds (the
    signing duration, capped at the CA's expiry), one asking for ``server auth`` too
    (Failed: ``SignerValidationFailure``), a kubelet serving certificate with DNS and IP
    SANs (issued with them); and one the admin denies (never issued)."""
    s = m.suffix
    names = {k: f"csr-{k}-{s}" for k in m.requests}
    bodies = {
        "short": csr_body(
            names["short"], m.requests["short"], APISERVER_CLIENT, ["client auth"], 3600
        ),
        "default": csr_body(
            names["default"], m.requests["default"], APISERVER_CLIENT, CLIENT_USAGES
        ),
        "server-usage": csr_body(
            names["server-usage"],
            m.requests["server-usage"],
            APISERVER_CLIENT,
            ["client auth", "server auth"],
        ),
        "serving": csr_body(
            names["serving"],
            m.requests["serving"],
            KUBELET_SERVING,
            ["digital signature", "server auth"],
        ),
        "denied": csr_body(
            names["denied"], m.requests["denied"], APISERVER_CLIENT, ["client auth"]
        ),
        "kubelet-bad-org": csr_body(
            names["kubelet-bad-org"], m.requests["kubelet-bad-org"], KUBELET_CLIENT, CLIENT_USAGES
        ),
        "all-sans": csr_body(
            names["all-sans"],
            m.requests["all-sans"],
            APISERVER_CLIENT,
            ["key encipherment", "client auth", "digital signature"],
            7200,
        ),
    }
    try:
        for key, body in bodies.items():
            await call(kube, "POST", CSR_PATH, body)
            kind = "Denied" if key == "denied" else "Approved"
            await add_condition(kube, names[key], kind)
        found = {}
        for key in ("short", "default", "serving", "all-sans"):
            found[key] = snapshot(await until_issued(kube, names[key]), ca)
        # The signing duration (a year), unless the CA expires sooner: which one depends
        # on the CA's age, not on the signer; the two sides' CAs differ in age.
        default = found["default"]["certificate"]
        default["year_or_ca_expiry"] = default.pop("capped_at_ca_expiry") or (
            default.pop("lifetime_seconds") == 365 * 24 * 3600
        )
        default.pop("lifetime_seconds", None)
        found["server-usage"] = snapshot(
            await until_condition(kube, names["server-usage"], "Failed"), ca
        )
        found["denied"] = snapshot(get_csr(kube, names["denied"]) or {}, ca)
        bad = await until_condition(kube, names["kubelet-bad-org"], "Failed")
        found["kubelet-bad-org"] = snapshot(bad, ca)
        return found
    finally:
        for name in names.values():
            delete_csr(kube, name)


SERVING_USAGES = ["digital signature", "server auth"]
USAGES_MESSAGE = "usages did not match [digital signature key encipherment server auth]"
SERVING_REFUSED: dict[str, str] = {
    "org-masters": "subject organization is not system:nodes",
    "org-two": "subject organization is not system:nodes",
    "org-none": "subject organization is not system:nodes",
    "org-and-no-san": "subject organization is not system:nodes",
    "no-san": "DNS or IP subjectAltName is required",
    "email": "Email subjectAltNames are not allowed",
    "uri": "URI subjectAltNames are not allowed",
    "email-and-uri": "Email subjectAltNames are not allowed",
    "usage-client": USAGES_MESSAGE,
    "usage-no-server": USAGES_MESSAGE,
    "cn": "subject common name does not begin with system:node:",
    "cn-and-usage": USAGES_MESSAGE,
}
"""The kubelet-serving requests upstream's signer refuses (``ValidateKubeletServingCSR``,
pkg/apis/certificates/helpers.go) and its message for each: the first rule broken, in
its order (organization, a DNS or IP SAN, no e-mail SAN, no URI SAN, usages, common
name; the kubelet-client signer looks at the common name before the usages)."""


def serving_refused_material(suffix: str) -> Material:
    node = f"system:node:srv-{suffix}"
    nodes = ("system:nodes",)
    dns = ("srv.example",)
    return Material(
        suffix,
        {
            "org-masters": request_pem(ec_key(), node, ("system:masters",), dns=dns),
            "org-two": request_pem(ec_key(), node, ("system:nodes", "extra"), dns=dns),
            "org-none": request_pem(ec_key(), node, dns=dns),
            "org-and-no-san": request_pem(ec_key(), node, ("system:masters",)),
            "no-san": request_pem(ec_key(), node, nodes),
            "email": request_pem(ec_key(), node, nodes, dns=dns, emails=("n@example.com",)),
            "uri": request_pem(ec_key(), node, nodes, ips=("10.0.0.8",), uris=("spiffe://x/y",)),
            "email-and-uri": request_pem(
                ec_key(), node, nodes, dns=dns, emails=("n@example.com",), uris=("spiffe://x/y",)
            ),
            "usage-client": request_pem(ec_key(), node, nodes, dns=dns),
            "usage-no-server": request_pem(rsa_key(), node, nodes, dns=dns),
            "cn": request_pem(ec_key(), f"srv-{suffix}", nodes, dns=dns),
            "cn-and-usage": request_pem(ec_key(), f"srv-{suffix}", nodes, dns=dns),
            # The boundary of the common name rule: a prefix and nothing after it passes.
            "bare-prefix": request_pem(ec_key(), "system:node:", nodes, ips=("10.0.0.9",)),
        },
    )


async def serving_refused(
    kube: KubeClient, ca: x509.Certificate, m: Material
) -> dict[str, Snapshot]:
    """Kubelet serving certificates an admin approves, each breaking one or two of the
    signer's rules (:data:`SERVING_REFUSED`): each Failed, with the reason and message of
    the first rule broken, and never issued; and one whose common name is the bare
    ``system:node:`` prefix, issued."""
    s = m.suffix
    names = {k: f"csr-srv-{k}-{s}" for k in m.requests}
    usages = {
        "usage-client": [*SERVING_USAGES, "client auth"],
        "usage-no-server": ["digital signature", "key encipherment"],
        "cn-and-usage": [*SERVING_USAGES, "client auth"],
    }
    try:
        for key, pem in m.requests.items():
            body = csr_body(names[key], pem, KUBELET_SERVING, usages.get(key, SERVING_USAGES))
            await call(kube, "POST", CSR_PATH, body)
            await add_condition(kube, names[key], "Approved")
        found = {"bare-prefix": snapshot(await until_issued(kube, names["bare-prefix"]), ca)}
        for key in SERVING_REFUSED:
            found[key] = snapshot(await until_condition(kube, names[key], "Failed"), ca)
        return found
    finally:
        for name in names.values():
            delete_csr(kube, name)


APPROVED_BY_TEST = ("Approved", "True", "ByTest", "by the test")


def expect_kubelet_bootstrap(found: dict[str, Snapshot]) -> None:
    """What upstream's semantics fix of :func:`kubelet_bootstrap`, on either side."""
    message = "Auto approving {}kubelet client certificate after SubjectAccessReview."
    assert found["node"]["conditions"] == [("Approved", "True", "AutoApproved", message.format(""))]
    assert found["self"]["conditions"] == [
        ("Approved", "True", "AutoApproved", message.format("self "))
    ]
    for key in ("node", "self"):
        cert = found[key]["certificate"]
        assert cert["verified_by_ca"] and cert["key_is_requested"]
        assert cert["subject_text"].endswith(",O=system:nodes")
        assert cert["backdated_minutes"] == 5
    assert found["wrong-org"] == found["wrong-cn"] == {"conditions": []}


def expect_approved_by_admin(found: dict[str, Snapshot]) -> None:
    """What upstream's semantics fix of :func:`approved_by_admin`, on either side."""
    assert found["short"]["conditions"] == [APPROVED_BY_TEST]
    assert found["short"]["certificate"]["lifetime_seconds"] == 3600 + 300
    assert found["default"]["certificate"]["year_or_ca_expiry"]
    assert found["server-usage"]["conditions"] == [
        APPROVED_BY_TEST,
        (
            "Failed",
            "True",
            "SignerValidationFailure",
            "invalid usage for client certificate: server auth",
        ),
    ]
    assert "certificate" not in found["server-usage"]
    sans = [e for e in found["serving"]["certificate"]["extensions"] if e[0] == "2.5.29.17"]
    assert len(sans) == 1
    assert found["denied"] == {"conditions": [("Denied", "True", "ByTest", "by the test")]}
    assert found["kubelet-bad-org"]["conditions"][1] == (
        "Failed",
        "True",
        "SignerValidationFailure",
        "subject organization is not system:nodes",
    )
    assert found["all-sans"]["certificate"]["lifetime_seconds"] == 7200 + 300


def expect_granted_later(found: dict[str, Snapshot]) -> None:
    """What upstream's semantics fix of :func:`granted_later`, on either side."""
    message = "Auto approving {}kubelet client certificate after SubjectAccessReview."
    assert found["node-refused"] == found["self-refused"] == {"conditions": []}
    assert found["node"]["conditions"] == [("Approved", "True", "AutoApproved", message.format(""))]
    assert found["self"]["conditions"] == [
        ("Approved", "True", "AutoApproved", message.format("self "))
    ]
    assert found["node"]["certificate"]["verified_by_ca"]


def expect_serving_refused(found: dict[str, Snapshot]) -> None:
    """What upstream's semantics fix of :func:`serving_refused`, on either side."""
    for key, message in SERVING_REFUSED.items():
        failed = ("Failed", "True", "SignerValidationFailure", message)
        assert found[key] == {"conditions": [APPROVED_BY_TEST, failed]}, key
    bare = found["bare-prefix"]
    assert bare["conditions"] == [APPROVED_BY_TEST]
    assert bare["certificate"]["verified_by_ca"]


EXPECTED: dict[str, Callable[[dict[str, Snapshot]], None]] = {
    "kubelet_bootstrap": expect_kubelet_bootstrap,
    "granted_later": expect_granted_later,
    "approved_by_admin": expect_approved_by_admin,
    "serving_refused": expect_serving_refused,
}
"""Checks of each scenario's snapshots that hold on either side (so that two sides
agreeing on nothing happening fails)."""

SCENARIOS: dict[str, tuple[Callable[[str], Material], Scenario]] = {
    "kubelet_bootstrap": (kubelet_bootstrap_material, kubelet_bootstrap),
    "approved_by_admin": (client_material, approved_by_admin),
    "granted_later": (granted_later_material, granted_later),
    "serving_refused": (serving_refused_material, serving_refused),
}
"""Each scenario: what it makes (of the test's suffix) and what it does with it."""


# The cleaner against upstream's -----------------------------------------------------------
CUSTOM_SIGNER = "example.com/steward-test"
"""A signer no controller signs for: the test plays the signer."""
HOUR = datetime.timedelta(hours=1)
RECENT = datetime.timedelta(minutes=30)
"""How long ago a condition that must not count yet was updated (far from any deadline,
so that Steward's cleaner, which looks again at each CSR's deadline, does not reach it
during the test either)."""

CLEANER_CASES: dict[str, tuple[tuple[str, datetime.timedelta, str], ...]] = {
    # Upstream's rules in its order: a case past the rule's deadline and one short of it.
    "approved-issued-old": (("Approved", 2 * HOUR, "approval"), ("cert", HOUR, "valid")),
    "approved-issued-recent": (("Approved", RECENT, "approval"), ("cert", HOUR, "valid")),
    "denied-old": (("Denied", 2 * HOUR, "approval"),),
    "denied-recent": (("Denied", RECENT, "approval"),),
    "failed-old": (("Failed", 2 * HOUR, "status"),),
    "failed-recent": (("Failed", RECENT, "status"),),
    "approved-failed-old": (("Approved", RECENT, "approval"), ("Failed", 2 * HOUR, "status")),
    # Pending for more than 24 h cannot be made: creationTimestamp is the server's.
    "pending": (),
    "expired": (("Approved", datetime.timedelta(0), "approval"), ("cert", HOUR, "expired")),
    "approved-unissued-old": (("Approved", 25 * HOUR, "approval"),),
    "approved-unissued-recent": (("Approved", 2 * HOUR, "approval"),),
}
"""Each CSR of the cleaner's scenario: its conditions (type, how long ago updated,
through which subresource) and the certificate a test-played signer writes
(``valid``: for two days; ``expired``: a minute ago), in order. Every request is of
:data:`CUSTOM_SIGNER`, so no approver or signer on either side touches it."""
CLEANED = frozenset(
    {
        "approved-issued-old",
        "denied-old",
        "failed-old",
        "approved-failed-old",
        "expired",
        "approved-unissued-old",
    }
)
"""The cases upstream's rules delete (what a side is waited on for, then checked)."""


def cleaner_material(suffix: str) -> Material:
    key = ec_key()
    now = datetime.datetime.now(datetime.UTC)
    return Material(
        suffix,
        {case: request_pem(key, f"someone-{case}") for case in CLEANER_CASES},
        {
            "valid": self_signed(key, "x", now - HOUR, now + 48 * HOUR),
            "expired": self_signed(key, "x", now - 3 * HOUR, now - datetime.timedelta(minutes=1)),
        },
    )


def cleaner_snapshot(csr: dict[str, Any]) -> Snapshot:
    """What a remaining CSR holds, comparable across two clusters: its spec but for who
    made it (each cluster's admin), its conditions without their times (set relative to
    the moment each side wrote them), its certificate (the same bytes on both sides)."""
    spec = {
        k: v
        for k, v in (csr.get("spec") or {}).items()
        if k not in ("username", "uid", "groups", "extra")
    }
    status = csr.get("status") or {}
    return {
        "spec": spec,
        "conditions": conditions(csr),
        "certificate": status.get("certificate", ""),
        "labels": csr["metadata"].get("labels") or {},
        "annotations": csr["metadata"].get("annotations") or {},
        "finalizers": csr["metadata"].get("finalizers") or [],
    }


async def make_cleaner_cases(kube: KubeClient, m: Material) -> dict[str, str]:
    """The CSRs of :data:`CLEANER_CASES` on one side; their names by case."""
    names = {case: f"csr-clean-{case}-{m.suffix}" for case in CLEANER_CASES}

    async def make(case: str) -> None:
        body = csr_body(names[case], m.requests[case], CUSTOM_SIGNER, ["client auth"])
        await call(kube, "POST", CSR_PATH, body)
        for kind, age, how in CLEANER_CASES[case]:
            if kind == "cert":
                await set_certificate(kube, names[case], m.certificates[how])
            else:
                await add_condition(kube, names[case], kind, updated=ago(age), subresource=how)

    await asyncio.gather(*(make(case) for case in CLEANER_CASES))
    return names


async def after_cleaning(
    kube: KubeClient, m: Material, cleaner: contextlib.AbstractAsyncContextManager[Any]
) -> dict[str, Snapshot | None]:
    """The cases made, then ``cleaner`` started (upstream's sweeps at its start); once the
    cases upstream's rules delete are gone (or :data:`WITHIN` has passed) and nothing
    else went for two seconds more, each case's :func:`cleaner_snapshot` (None: deleted).
    The CSRs left are deleted at the end."""
    names = await make_cleaner_cases(kube, m)
    try:
        async with cleaner:

            def swept() -> bool:
                return all(get_csr(kube, names[case]) is None for case in CLEANED)

            with contextlib.suppress(AssertionError, pytest.fail.Exception):
                await eventually(swept, "the sweep", WITHIN)
            remaining = {case for case in names if get_csr(kube, names[case]) is not None}
            await stays(
                lambda: all(get_csr(kube, names[case]) is not None for case in remaining),
                "the CSRs left by the sweep",
                2.0,
            )
            found: dict[str, Snapshot | None] = {}
            for case, name in names.items():
                csr = get_csr(kube, name)
                found[case] = None if csr is None else cleaner_snapshot(csr)
            return found
    finally:
        for name in names.values():
            delete_csr(kube, name)


@contextlib.asynccontextmanager
async def upstream_cleaner(plane: LocalCluster, log: Path) -> AsyncIterator[None]:
    """Upstream's csrcleaner alone on ``plane`` (:func:`controller_manager`), started now
    and stopped after the block: it lists every CSR when it starts (then hourly). Its
    controllers start 2 to 4 s after its informers (``--controller-start-interval``):
    upstream's cleaner does not wait for its informer's first list, which would
    otherwise race the sweep at its start."""
    manager = controller_manager(plane, "csrcleaner", log, "--controller-start-interval=2s")
    manager.__enter__()  # here: the process dies with the thread that started it
    try:
        yield
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


@contextlib.asynccontextmanager
async def steward_cleaner(plane: LocalCluster) -> AsyncIterator[None]:
    """Steward's csrcleaner alone on ``plane``, as its own identity, started now."""
    async with (
        in_loop_informer(plane) as informer,
        controllers(
            CLEANER, plane.component_kubeconfig("controller-csrcleaner"), informer, workers=1
        ) as cleaner,
    ):
        cleaner.start()
        yield


def expect_cleaned(found: dict[str, Snapshot | None]) -> None:
    """What upstream's rules fix of :func:`after_cleaning`, on either side."""
    assert {case for case, snap in found.items() if snap is None} == CLEANED
    for case, snap in found.items():
        if snap is not None:
            assert len(snap["conditions"]) == len(
                [c for c in CLEANER_CASES[case] if c[0] != "cert"]
            )
