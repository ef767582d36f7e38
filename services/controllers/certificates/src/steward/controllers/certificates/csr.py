"""What the three CertificateSigningRequest controllers share: the type, its conditions,
the request parsed as upstream reads it, the per-signer validation, and the certificate a
request is issued.

Everything here is pure (no I/O): the controllers read and write, these functions decide.

# The request as upstream sees it
Upstream parses ``spec.request`` with Go's ``crypto/x509``, whose view of a request is not
the DER's: the subject is a ``pkix.Name`` (organizations, units, ... in the order they
appear; the *last* common name; attribute types outside ``2.5.4.*`` are not kept) and the
subject alternative names are four lists (DNS, e-mail, IP, URI). :func:`parse_request`
gives the same view, so that the validations (upstream's ``ValidateKubeletClientCSR`` and
friends) and the issued certificate agree with upstream's.

# The certificate
:func:`build_certificate` issues what upstream's ``PermissiveSigningPolicy`` and Go's
``x509.CreateCertificate`` would: a random 128-bit serial; the subject re-encoded from the
parsed name in Go's order (country, province, locality, street, postal code,
organization, unit, common name, serial number; each multi-valued attribute one RDN; a
value a PrintableString when its characters allow, else a UTF8String); notBefore five
minutes back, notAfter ``duration`` on (five minutes less for durations of 8 h or more),
never past the CA's own notAfter; the extensions in Go's order: key usage (critical),
extended key usage (in Go's order), basic constraints CA:FALSE (critical), the authority
key identifier (the CA's subject key identifier, unless self-issued), the requested SANs
(critical when the subject is empty). Every other requested extension is dropped.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import re
import secrets
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from steward.runtime.resources import Resource

CSRS = Resource(
    "certificates.k8s.io",
    "v1",
    "certificatesigningrequests",
    "CertificateSigningRequest",
    namespaced=False,
)
"""CertificateSigningRequests (cluster-scoped)."""

KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBE_APISERVER_CLIENT_KUBELET = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
LEGACY_UNKNOWN = "kubernetes.io/legacy-unknown"
SIGNERS = (KUBELET_SERVING, KUBE_APISERVER_CLIENT_KUBELET, KUBE_APISERVER_CLIENT, LEGACY_UNKNOWN)
"""Upstream's four built-in signers, in the order kube-controller-manager starts them."""

APPROVED = "Approved"
DENIED = "Denied"
FAILED = "Failed"

BACKDATE = datetime.timedelta(minutes=5)
"""How far back notBefore is set (upstream's ``Backdate``)."""
SHORT = datetime.timedelta(hours=8)
"""Below this a certificate's notAfter is not backdated (upstream's ``Short``)."""
MIN_DURATION = datetime.timedelta(minutes=10)
"""The shortest duration honoured from ``spec.expirationSeconds`` (twice the backdate)."""
DEFAULT_DURATION = datetime.timedelta(days=365)
"""``--cluster-signing-duration``'s default (8760h)."""


class RequestError(ValueError):
    """``spec.request`` is not a certificate request upstream could parse."""


class ValidationError(ValueError):
    """The request is not one the signer (or the approver's recognizer) accepts; the text
    is upstream's."""


class SigningError(ValueError):
    """The certificate cannot be issued (the text is upstream's where it has one)."""


# Conditions --------------------------------------------------------------------------------
def conditions(csr: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``status.conditions`` (empty when absent)."""
    return list((csr.get("status") or {}).get("conditions") or ())


def approval(csr: Mapping[str, Any]) -> tuple[bool, bool]:
    """(approved, denied): whether any condition of each type is present, whatever its
    status (upstream's ``GetCertApprovalCondition``)."""
    types = {c.get("type") for c in conditions(csr)}
    return APPROVED in types, DENIED in types


def is_approved(csr: Mapping[str, Any]) -> bool:
    """Approved and not denied (upstream's ``IsCertificateRequestApproved``)."""
    approved, denied = approval(csr)
    return approved and not denied


def has_true_condition(csr: Mapping[str, Any], kind: str) -> bool:
    """A condition of ``kind`` whose status is True or empty (upstream's
    ``HasTrueCondition``)."""
    return any(
        c.get("type") == kind and c.get("status", "") in ("", "True") for c in conditions(csr)
    )


def certificate_of(csr: Mapping[str, Any]) -> bytes:
    """``status.certificate`` decoded (empty when not issued)."""
    text = (csr.get("status") or {}).get("certificate") or ""
    try:
        return base64.b64decode(text)
    except (binascii.Error, ValueError):
        return b"?"  # present but not base64: issued all the same, as upstream's len() > 0


# The request ---------------------------------------------------------------------------------
_PEM = re.compile(rb"-----BEGIN ([^\r\n-]*)-----\r?\n(.*?)-----END \1-----", re.DOTALL)


def pem_blocks(data: bytes) -> list[tuple[str, bytes]]:
    """Every PEM block of ``data``: (type, DER), in order; blocks whose body is not base64
    are skipped, as Go's ``pem.Decode`` skips them."""
    found = []
    for match in _PEM.finditer(data):
        lines = [ln.strip() for ln in match.group(2).splitlines()]
        body = b"".join(ln for ln in lines if ln and b":" not in ln)  # headers dropped
        try:
            found.append((match.group(1).decode("ascii", "replace"), base64.b64decode(body)))
        except (binascii.Error, ValueError):
            continue
    return found


@dataclass(frozen=True)
class ParsedRequest:
    """A certificate request as Go's ``x509.CertificateRequest`` holds it."""

    csr: x509.CertificateSigningRequest
    subject: tuple[tuple[x509.ObjectIdentifier, tuple[str, ...]], ...]
    """The subject's kept attributes in Go's order: (type, values), empty values left out."""
    dns_names: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    ips: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...] = ()
    uris: tuple[str, ...] = ()
    values: dict[x509.ObjectIdentifier, tuple[str, ...]] = field(default_factory=dict)

    @property
    def organization(self) -> tuple[str, ...]:
        return self.values.get(NameOID.ORGANIZATION_NAME, ())

    @property
    def common_name(self) -> str:
        return (self.values.get(NameOID.COMMON_NAME) or ("",))[0]


_SLICES = (
    NameOID.COUNTRY_NAME,
    NameOID.STATE_OR_PROVINCE_NAME,
    NameOID.LOCALITY_NAME,
    NameOID.STREET_ADDRESS,
    NameOID.POSTAL_CODE,
    NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
)
"""pkix.Name's multi-valued fields, in the order ``ToRDNSequence`` writes them."""
_SINGLE = (NameOID.COMMON_NAME, NameOID.SERIAL_NUMBER)
"""pkix.Name's single-valued fields (the last value wins), written after the others."""


def parse_request(pem: bytes) -> ParsedRequest:
    """Upstream's ``ParseCSR``: the first PEM block must be a ``CERTIFICATE REQUEST``.

    Raises:
        RequestError: with upstream's text where it has one.
    """
    blocks = pem_blocks(pem)
    if not blocks or blocks[0][0] != "CERTIFICATE REQUEST":
        raise RequestError("PEM block type must be CERTIFICATE REQUEST")
    try:
        csr = x509.load_der_x509_csr(blocks[0][1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a country not two letters long
            names = list(csr.subject)
        sans = _requested_sans(csr)
    except ValueError as err:
        raise RequestError(f"x509: malformed certificate request: {err}") from err
    values: dict[x509.ObjectIdentifier, list[str]] = {}
    for attr in names:
        if not isinstance(attr.value, str):
            continue
        if attr.oid in _SLICES:
            values.setdefault(attr.oid, []).append(attr.value)
        elif attr.oid in _SINGLE:
            values[attr.oid] = [attr.value]  # the last wins
    subject = tuple(
        (oid, tuple(values[oid]))
        for oid in (*_SLICES, *_SINGLE)
        if values.get(oid) and (oid not in _SINGLE or values[oid][0])
    )
    return ParsedRequest(
        csr=csr,
        subject=subject,
        values={k: tuple(v) for k, v in values.items()},
        **sans,
    )


def _requested_sans(csr: x509.CertificateSigningRequest) -> dict[str, Any]:
    try:
        ext = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return {}
    ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for ip in ext.get_values_for_type(x509.IPAddress):
        if not isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
            continue  # a network, not an address: Go keeps none either
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # Go writes an IPv4-mapped address in 4 bytes
        ips.append(ip)
    return {
        "dns_names": tuple(ext.get_values_for_type(x509.DNSName)),
        "emails": tuple(ext.get_values_for_type(x509.RFC822Name)),
        "ips": tuple(ips),
        "uris": tuple(ext.get_values_for_type(x509.UniformResourceIdentifier)),
    }


# Validation --------------------------------------------------------------------------------
KUBELET_CLIENT_USAGES = frozenset({"digital signature", "key encipherment", "client auth"})
KUBELET_CLIENT_USAGES_NO_RSA = frozenset({"digital signature", "client auth"})
KUBELET_SERVING_USAGES = frozenset({"digital signature", "key encipherment", "server auth"})
KUBELET_SERVING_USAGES_NO_RSA = frozenset({"digital signature", "server auth"})


def _usages_text(usages: Iterable[str]) -> str:
    return "[" + " ".join(sorted(usages)) + "]"  # Go's %v of a sorted []string


def validate_kubelet_client(req: ParsedRequest, usages: Iterable[str]) -> None:
    """Upstream's ``ValidateKubeletClientCSR``: O exactly ``system:nodes``, no SANs, CN
    ``system:node:…``, usages exactly one of the two allowed sets (the key's type is not
    looked at).

    Raises:
        ValidationError: upstream's message.
    """
    if req.organization != ("system:nodes",):
        raise ValidationError("subject organization is not system:nodes")
    if req.dns_names:
        raise ValidationError("DNS subjectAltNames are not allowed")
    if req.emails:
        raise ValidationError("Email subjectAltNames are not allowed")
    if req.ips:
        raise ValidationError("IP subjectAltNames are not allowed")
    if req.uris:
        raise ValidationError("URI subjectAltNames are not allowed")
    if not req.common_name.startswith("system:node:"):
        raise ValidationError("subject common name does not begin with system:node:")
    wanted = frozenset(usages)
    if wanted not in (KUBELET_CLIENT_USAGES, KUBELET_CLIENT_USAGES_NO_RSA):
        raise ValidationError(f"usages did not match {_usages_text(KUBELET_CLIENT_USAGES)}")


def validate_kubelet_serving(req: ParsedRequest, usages: Iterable[str]) -> None:
    """Upstream's ``ValidateKubeletServingCSR``: O exactly ``system:nodes``, a DNS or IP
    SAN and no e-mail or URI one, usages one of the two allowed sets, CN
    ``system:node:…``.

    Raises:
        ValidationError: upstream's message.
    """
    if req.organization != ("system:nodes",):
        raise ValidationError("subject organization is not system:nodes")
    if not req.dns_names and not req.ips:
        raise ValidationError("DNS or IP subjectAltName is required")
    if req.emails:
        raise ValidationError("Email subjectAltNames are not allowed")
    if req.uris:
        raise ValidationError("URI subjectAltNames are not allowed")
    wanted = frozenset(usages)
    if wanted not in (KUBELET_SERVING_USAGES, KUBELET_SERVING_USAGES_NO_RSA):
        raise ValidationError(f"usages did not match {_usages_text(KUBELET_SERVING_USAGES)}")
    if not req.common_name.startswith("system:node:"):
        raise ValidationError("subject common name does not begin with system:node:")


def validate_apiserver_client(req: ParsedRequest, usages: Sequence[str]) -> None:
    """Upstream's ``validAPIServerClientUsages``: ``client auth`` required, besides it only
    ``digital signature`` and ``key encipherment``.

    Raises:
        ValidationError: upstream's message.
    """
    client = False
    for usage in usages:
        if usage in ("digital signature", "key encipherment"):
            continue
        if usage == "client auth":
            client = True
            continue
        raise ValidationError(f"invalid usage for client certificate: {usage}")
    if not client:
        raise ValidationError("missing required usage for client certificate: client auth")


def validate_legacy_unknown(req: ParsedRequest, usages: Sequence[str]) -> None:
    """No restriction (upstream keeps legacy-unknown as it was before v1)."""


VALIDATORS = {
    KUBELET_SERVING: validate_kubelet_serving,
    KUBE_APISERVER_CLIENT_KUBELET: validate_kubelet_client,
    KUBE_APISERVER_CLIENT: validate_apiserver_client,
    LEGACY_UNKNOWN: validate_legacy_unknown,
}
"""Each built-in signer's check of a request (upstream's ``isRequestForSignerFn``)."""


def is_node_client(csr: Mapping[str, Any], req: ParsedRequest) -> bool:
    """Upstream's ``isNodeClientCert``: the kubelet client signer and a valid kubelet
    client request."""
    spec = csr.get("spec") or {}
    if spec.get("signerName") != KUBE_APISERVER_CLIENT_KUBELET:
        return False
    try:
        validate_kubelet_client(req, spec.get("usages") or ())
    except ValidationError:
        return False
    return True


def is_self_node_client(csr: Mapping[str, Any], req: ParsedRequest) -> bool:
    """Upstream's ``isSelfNodeClientCert``: a node client request whose requester is the
    subject's common name."""
    if (csr.get("spec") or {}).get("username", "") != req.common_name:
        return False
    return is_node_client(csr, req)


# Durations -----------------------------------------------------------------------------------
def duration(
    max_duration: datetime.timedelta, expiration_seconds: int | None
) -> datetime.timedelta:
    """The certificate's lifetime (upstream's ``signer.duration``): the signing duration,
    or ``spec.expirationSeconds`` when shorter, but never under ten minutes."""
    if expiration_seconds is None:
        return max_duration
    requested = datetime.timedelta(seconds=expiration_seconds)
    if requested > max_duration:
        return max_duration
    if requested < MIN_DURATION:
        return MIN_DURATION
    return requested


def _go_time(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def validity(
    now: datetime.datetime, ttl: datetime.timedelta, signer_not_after: datetime.datetime
) -> tuple[datetime.datetime, datetime.datetime]:
    """(notBefore, notAfter) as upstream's ``PermissiveSigningPolicy``.

    Raises:
        SigningError: the CA has expired (upstream's messages).
    """
    not_before = now - BACKDATE
    not_after = now + ttl if ttl < SHORT else now + ttl - BACKDATE
    if not not_after < signer_not_after:
        not_after = signer_not_after
    if not not_before < signer_not_after:
        raise SigningError(f"the signer has expired: NotAfter={_go_time(signer_not_after)}")
    if not now < signer_not_after:
        raise SigningError(
            "refusing to sign a certificate that expired in the past: "
            f"NotAfter={_go_time(signer_not_after)}"
        )
    return not_before, not_after


# Usages --------------------------------------------------------------------------------------
KEY_USAGE_BITS = {
    "signing": 0,
    "digital signature": 0,
    "content commitment": 1,
    "key encipherment": 2,
    "data encipherment": 3,
    "key agreement": 4,
    "cert sign": 5,
    "crl sign": 6,
    "encipher only": 7,
    "decipher only": 8,
}
"""The key usages' bits (Go's ``x509.KeyUsage``: bit i is the BIT STRING's bit i)."""
EXT_KEY_USAGES: dict[str, tuple[int, x509.ObjectIdentifier]] = {
    "any": (0, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE),
    "server auth": (1, ExtendedKeyUsageOID.SERVER_AUTH),
    "client auth": (2, ExtendedKeyUsageOID.CLIENT_AUTH),
    "code signing": (3, ExtendedKeyUsageOID.CODE_SIGNING),
    "email protection": (4, ExtendedKeyUsageOID.EMAIL_PROTECTION),
    "s/mime": (4, ExtendedKeyUsageOID.EMAIL_PROTECTION),
    "ipsec end system": (5, x509.ObjectIdentifier("1.3.6.1.5.5.7.3.5")),
    "ipsec tunnel": (6, x509.ObjectIdentifier("1.3.6.1.5.5.7.3.6")),
    "ipsec user": (7, x509.ObjectIdentifier("1.3.6.1.5.5.7.3.7")),
    "timestamping": (8, ExtendedKeyUsageOID.TIME_STAMPING),
    "ocsp signing": (9, ExtendedKeyUsageOID.OCSP_SIGNING),
    "microsoft sgc": (10, x509.ObjectIdentifier("1.3.6.1.4.1.311.10.3.3")),
    "netscape sgc": (11, x509.ObjectIdentifier("2.16.840.1.113730.4.1")),
}
"""The extended key usages: (Go's ``x509.ExtKeyUsage`` value, which orders them; OID)."""


def key_usages(usages: Iterable[str]) -> tuple[int, tuple[x509.ObjectIdentifier, ...]]:
    """Upstream's ``keyUsagesFromStrings``: the key usage bits and the extended key usages
    (deduplicated, in Go's order).

    Raises:
        SigningError: a usage upstream does not know.
    """
    bits = 0
    extended: dict[int, x509.ObjectIdentifier] = {}
    unknown = []
    for usage in usages:
        if usage in KEY_USAGE_BITS:
            bits |= 1 << KEY_USAGE_BITS[usage]
        elif usage in EXT_KEY_USAGES:
            order, oid = EXT_KEY_USAGES[usage]
            extended[order] = oid
        else:
            unknown.append(usage)
    if unknown:
        quoted = " ".join(f'"{u}"' for u in unknown)
        raise SigningError(f"unrecognized usage values: [{quoted}]")
    return bits, tuple(extended[k] for k in sorted(extended))


def key_usage_der(bits: int) -> bytes:
    """The KeyUsage extension's value as Go writes it: a BIT STRING of one byte, or two
    when a bit above 7 is set, without trailing zero bits."""
    data = bytes(
        int(f"{(bits >> (8 * i)) & 0xFF:08b}"[::-1], 2) for i in range(2 if bits >> 8 else 1)
    )
    length = len(data) * 8
    for byte in reversed(data):
        if byte == 0:
            length -= 8
            continue
        length -= (byte & -byte).bit_length() - 1  # trailing zero bits of the last byte
        break
    unused = len(data) * 8 - length if length else 0
    if length == 0:
        data = b""
    return bytes([0x03, len(data) + 1, unused]) + data


# The certificate ----------------------------------------------------------------------------
_PRINTABLE = re.compile(r"[A-Za-z0-9'()+,\-./:=? ]*")


def _string_type(value: str) -> _ASN1Type:
    return _ASN1Type.PrintableString if _PRINTABLE.fullmatch(value) else _ASN1Type.UTF8String


def go_subject(req: ParsedRequest) -> x509.Name:
    """The subject as Go re-encodes the parsed name (see the module docs)."""
    with warnings.catch_warnings():
        # Not validated (cryptography warns of a country not two letters long): Go writes
        # whatever the request has.
        warnings.simplefilter("ignore", UserWarning)
        rdns = [
            x509.RelativeDistinguishedName(
                [x509.NameAttribute(oid, v, _type=_string_type(v), _validate=False) for v in values]
            )
            for oid, values in req.subject
        ]
    return x509.Name(rdns)


CertificateAuthorityKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass(frozen=True)
class Authority:
    """A signer's CA: its certificate and key."""

    certificate: x509.Certificate
    key: CertificateAuthorityKey

    def hash(self) -> hashes.SHA256 | hashes.SHA384 | hashes.SHA512 | None:
        """The signature's hash as Go picks it for the key."""
        if isinstance(self.key, ec.EllipticCurvePrivateKey):
            size = self.key.curve.key_size
            return (
                hashes.SHA512()
                if size > 384
                else hashes.SHA384()
                if size > 256
                else hashes.SHA256()
            )
        if isinstance(self.key, ed25519.Ed25519PrivateKey):
            return None
        return hashes.SHA256()


def load_authority(cert_pem: bytes, key_pem: bytes, name: str) -> Authority:
    """A CA from its files' content (upstream's ``caProvider.setCA``).

    Raises:
        SigningError: upstream's text (``name`` is the files' name).
    """
    certs = [der for kind, der in pem_blocks(cert_pem) if kind == "CERTIFICATE"]
    try:
        parsed = [x509.load_der_x509_certificate(der) for der in certs]
    except ValueError as err:
        raise SigningError(f"error reading CA cert file {name!r}: {err}") from err
    if len(parsed) != 1:
        raise SigningError(
            f"error reading CA cert file {name!r}: expected 1 certificate, found {len(parsed)}"
        )
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as err:
        raise SigningError(f"error reading CA key file {name!r}: {err}") from err
    if not isinstance(
        key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
    ):
        raise SigningError(
            f"error reading CA key file {name!r}: key did not implement crypto.Signer"
        )
    if key.public_key() != parsed[0].public_key():
        raise SigningError(
            f"error reading CA key file {name!r}: key does not match the certificate"
        )
    return Authority(parsed[0], key)


def build_certificate(
    ca: Authority,
    req: ParsedRequest,
    usages: Sequence[str],
    ttl: datetime.timedelta,
    now: datetime.datetime,
    serial: int | None = None,
) -> x509.Certificate:
    """The certificate upstream's signer issues for ``req`` (see the module docs).

    Raises:
        SigningError: the request's signature is bad, a usage unknown, the CA expired, or
            the key not one a certificate can carry.
    """
    if not req.csr.is_signature_valid:
        raise SigningError("unable to verify certificate request signature")
    bits, extended = key_usages(usages)
    now = now.replace(microsecond=0)
    ca_not_after = ca.certificate.not_valid_after_utc
    not_before, not_after = validity(now, ttl, ca_not_after)
    subject = go_subject(req)
    builder = (
        x509.CertificateBuilder()
        .serial_number(serial if serial is not None else secrets.randbelow(2**128 - 1) + 1)
        .issuer_name(ca.certificate.subject)
        .subject_name(subject)
        .public_key(req.csr.public_key())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )
    if bits:
        builder = builder.add_extension(
            x509.UnrecognizedExtension(ExtensionOID.KEY_USAGE, key_usage_der(bits)), critical=True
        )
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(extended)), critical=False)
    builder = builder.add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True
    )
    if subject.public_bytes() != ca.certificate.subject.public_bytes():
        try:
            ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        except x509.ExtensionNotFound:
            ski = None
        if ski is not None and ski.value.digest:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier(ski.value.digest, None, None), critical=False
            )
    sans: list[x509.GeneralName] = [
        *(x509.DNSName(d) for d in req.dns_names),
        *(x509.RFC822Name(e) for e in req.emails),
        *(x509.IPAddress(i) for i in req.ips),
        *(x509.UniformResourceIdentifier(u) for u in req.uris),
    ]
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(sans), critical=len(subject.rdns) == 0
        )
    try:
        return builder.sign(ca.key, ca.hash())
    except (ValueError, TypeError) as err:
        raise SigningError(f"failed to sign certificate: {err}") from err


def certificate_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)
