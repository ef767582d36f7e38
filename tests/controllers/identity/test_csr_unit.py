"""The CSR controllers' decisions, without a cluster: the request as Go parses it, the
node client and per-signer validations (upstream's tables), the usages, durations and
validity, the certificate built, the signing flags, the CA files read again, the
approver's review and the cleaner's rules."""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from steward.controllers.certificates import approving, cleaner, csr, signing
from steward.runtime.times import go_duration
from tests.controllers.identity.csr import ec_key, request_pem, rsa_key, self_signed

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
CLIENT = ["digital signature", "key encipherment", "client auth"]


def parsed(pem: bytes) -> csr.ParsedRequest:
    return csr.parse_request(pem)


def authority(days: float = 365, ski: bool = True) -> csr.Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(NOW - datetime.timedelta(days=1))
        .not_valid_after(NOW + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    if ski:
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    return csr.Authority(builder.sign(key, hashes.SHA256()), key)


# Parsing ------------------------------------------------------------------------------------
def test_parse_keeps_gos_view_of_the_subject() -> None:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "first"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "b"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "x@example.com"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "a"),
            x509.NameAttribute(NameOID.COMMON_NAME, "last"),
        ]
    )
    pem = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(name)
        .sign(ec_key(), hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    req = parsed(pem)
    assert req.organization == ("b", "a")  # in order, not sorted
    assert req.common_name == "last"  # the last CN wins
    # Go's order (O before CN), the e-mail attribute not kept (outside 2.5.4.*).
    assert csr.go_subject(req).rfc4514_string() == "CN=last,O=b+O=a"


def test_parse_refuses_what_is_not_a_certificate_request() -> None:
    cert = self_signed(ec_key(), "x", NOW, NOW + datetime.timedelta(days=1))
    with pytest.raises(csr.RequestError, match="PEM block type must be CERTIFICATE REQUEST"):
        parsed(cert)
    with pytest.raises(csr.RequestError, match="PEM block type"):
        parsed(b"not pem at all")
    with pytest.raises(csr.RequestError, match="malformed"):
        parsed(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")


def test_parse_reads_the_requested_sans() -> None:
    req = parsed(
        request_pem(ec_key(), "n", ("o",), dns=("a.example",), ips=("10.0.0.1", "::ffff:10.0.0.2"))
    )
    assert req.dns_names == ("a.example",)
    # An IPv4-mapped address is written in four bytes, as Go does.
    assert req.ips == (ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("10.0.0.2"))


# Node client validation: upstream's table (pkg/apis/certificates/helpers_test.go) ----------
NODE = "system:node:n1"
NODES = ("system:nodes",)


@pytest.mark.parametrize(
    ("cn", "orgs", "sans", "usages", "error"),
    [
        (NODE, NODES, {}, CLIENT, None),
        (NODE, NODES, {}, ["digital signature", "client auth"], None),  # no RSA
        (NODE, NODES, {}, ["client auth", "key encipherment", "digital signature"], None),
        (NODE, ("system:masters",), {}, CLIENT, "subject organization is not system:nodes"),
        (NODE, (), {}, CLIENT, "subject organization is not system:nodes"),
        (NODE, ("system:nodes", "other"), {}, CLIENT, "subject organization is not system:nodes"),
        ("node:n1", NODES, {}, CLIENT, "subject common name does not begin with system:node:"),
        (NODE, NODES, {"dns": ("a",)}, CLIENT, "DNS subjectAltNames are not allowed"),
        (NODE, NODES, {"ips": ("10.0.0.1",)}, CLIENT, "IP subjectAltNames are not allowed"),
        (NODE, NODES, {}, [*CLIENT, "server auth"], r"usages did not match \[client auth"),
        (NODE, NODES, {}, ["client auth"], "usages did not match"),
        (NODE, NODES, {}, ["key encipherment", "client auth"], "usages did not match"),
    ],
)
def test_kubelet_client_validation(
    cn: str, orgs: tuple[str, ...], sans: dict[str, Any], usages: list[str], error: str | None
) -> None:
    req = parsed(request_pem(ec_key(), cn, orgs, **sans))
    if error is None:
        csr.validate_kubelet_client(req, usages)
    else:
        with pytest.raises(csr.ValidationError, match=error):
            csr.validate_kubelet_client(req, usages)


def test_kubelet_client_validation_message_is_upstreams() -> None:
    req = parsed(request_pem(ec_key(), NODE, NODES))
    with pytest.raises(csr.ValidationError) as err:
        csr.validate_kubelet_client(req, ["client auth"])
    assert str(err.value) == "usages did not match [client auth digital signature key encipherment]"


def test_key_type_is_not_looked_at() -> None:
    """Upstream checks usages, not the key: an RSA key with the no-RSA usages passes."""
    req = parsed(request_pem(rsa_key(), NODE, NODES))
    csr.validate_kubelet_client(req, ["digital signature", "client auth"])


def _csr(req_pem: bytes, signer: str, usages: list[str], username: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": "c"},
        "spec": {
            "request": base64.b64encode(req_pem).decode(),
            "signerName": signer,
            "usages": usages,
            "username": username,
        },
    }


def test_recognizers() -> None:
    pem = request_pem(ec_key(), NODE, NODES)
    req = parsed(pem)
    kubelet = csr.KUBE_APISERVER_CLIENT_KUBELET
    assert csr.is_node_client(_csr(pem, kubelet, CLIENT), req)
    assert not csr.is_self_node_client(_csr(pem, kubelet, CLIENT, "system:bootstrap:x"), req)
    assert csr.is_self_node_client(_csr(pem, kubelet, CLIENT, NODE), req)
    # Another signer, or an invalid request: neither.
    assert not csr.is_node_client(_csr(pem, csr.KUBE_APISERVER_CLIENT, CLIENT), req)
    assert not csr.is_self_node_client(_csr(pem, kubelet, ["client auth"], NODE), req)


def test_review_carries_the_requester() -> None:
    body = _csr(request_pem(ec_key(), NODE, NODES), csr.KUBE_APISERVER_CLIENT_KUBELET, CLIENT, NODE)
    body["spec"].update(uid="u1", groups=["system:nodes"], extra={"k": ["v"]})
    sar = approving.review(body, approving.RECOGNIZERS[0])
    assert sar["spec"] == {
        "user": NODE,
        "uid": "u1",
        "groups": ["system:nodes"],
        "extra": {"k": ["v"]},
        "resourceAttributes": {
            "group": "certificates.k8s.io",
            "resource": "certificatesigningrequests",
            "verb": "create",
            "subresource": "selfnodeclient",
            "version": "*",
        },
    }


def test_needs_approval() -> None:
    assert approving.needs_approval({"status": {}})
    assert not approving.needs_approval({"status": {"conditions": [{"type": "Approved"}]}})
    assert not approving.needs_approval({"status": {"conditions": [{"type": "Denied"}]}})
    assert not approving.needs_approval({"status": {"certificate": "eA=="}})
    # Failed alone does not stop the approver (upstream looks at Approved/Denied only).
    assert approving.needs_approval({"status": {"conditions": [{"type": "Failed"}]}})


def test_approval_condition() -> None:
    body = approving.approved({"status": {"conditions": []}}, "m")
    assert body["status"]["conditions"] == [
        {"type": "Approved", "status": "True", "reason": "AutoApproved", "message": "m"}
    ]
    assert body["kind"] == "CertificateSigningRequest"


# Signer validation ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("usages", "error"),
    [
        (["client auth"], None),
        (["digital signature", "key encipherment", "client auth"], None),
        (["client auth", "server auth"], "invalid usage for client certificate: server auth"),
        (["digital signature"], "missing required usage for client certificate: client auth"),
        ([], "missing required usage for client certificate: client auth"),
    ],
)
def test_apiserver_client_usages(usages: list[str], error: str | None) -> None:
    req = parsed(request_pem(ec_key(), "anyone"))
    if error is None:
        csr.validate_apiserver_client(req, usages)
    else:
        with pytest.raises(csr.ValidationError) as err:
            csr.validate_apiserver_client(req, usages)
        assert str(err.value) == error


@pytest.mark.parametrize(
    ("cn", "sans", "usages", "error"),
    [
        (NODE, {"dns": ("n1",)}, ["digital signature", "key encipherment", "server auth"], None),
        (NODE, {"ips": ("10.0.0.1",)}, ["digital signature", "server auth"], None),
        (NODE, {}, ["digital signature", "server auth"], "DNS or IP subjectAltName is required"),
        (NODE, {"dns": ("n1",)}, ["server auth"], r"usages did not match \[digital signature"),
        ("n1", {"dns": ("n1",)}, ["digital signature", "server auth"], "common name"),
    ],
)
def test_kubelet_serving_validation(
    cn: str, sans: dict[str, Any], usages: list[str], error: str | None
) -> None:
    req = parsed(request_pem(ec_key(), cn, NODES, **sans))
    if error is None:
        csr.validate_kubelet_serving(req, usages)
    else:
        with pytest.raises(csr.ValidationError, match=error):
            csr.validate_kubelet_serving(req, usages)


def test_legacy_unknown_accepts_anything() -> None:
    csr.validate_legacy_unknown(parsed(request_pem(ec_key(), "x")), ["server auth", "any"])


# Usages, durations, validity --------------------------------------------------------------
def test_key_usages_in_gos_form() -> None:
    bits, ext = csr.key_usages(["server auth", "client auth", "digital signature", "s/mime", "any"])
    assert bits == 1
    assert ext == (
        ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,
        ExtendedKeyUsageOID.EMAIL_PROTECTION,
    )
    with pytest.raises(csr.SigningError, match=r'unrecognized usage values: \["bogus"\]'):
        csr.key_usages(["client auth", "bogus"])


@pytest.mark.parametrize(
    ("bits", "der"),
    [
        (1 | 4, "030205a0"),  # digital signature, key encipherment
        (1, "03020780"),
        (1 << 5 | 1 << 6, "03020106"),  # cert sign, crl sign
        (1 << 8 | 1, "0303078080"),  # decipher only: a second byte
    ],
)
def test_key_usage_der(bits: int, der: str) -> None:
    assert csr.key_usage_der(bits).hex() == der


def test_key_usage_der_matches_cryptography() -> None:
    value = x509.KeyUsage(True, False, True, False, True, False, False, False, False)
    assert csr.key_usage_der(1 | 4 | 16) == value.public_bytes()


@pytest.mark.parametrize(
    ("expiration", "expected"),
    [
        (None, datetime.timedelta(days=365)),
        (3600, datetime.timedelta(hours=1)),
        (10 * 365 * 86400, datetime.timedelta(days=365)),  # never above the flag
        (60, datetime.timedelta(minutes=10)),  # never under ten minutes
    ],
)
def test_duration(expiration: int | None, expected: datetime.timedelta) -> None:
    assert csr.duration(csr.DEFAULT_DURATION, expiration) == expected


def test_validity() -> None:
    far = NOW + datetime.timedelta(days=1000)
    five = datetime.timedelta(minutes=5)
    short = csr.validity(NOW, datetime.timedelta(hours=1), far)
    assert short == (NOW - five, NOW + datetime.timedelta(hours=1))  # not backdated at its end
    long = csr.validity(NOW, datetime.timedelta(hours=8), far)
    assert long == (NOW - five, NOW + datetime.timedelta(hours=8) - five)
    soon = NOW + datetime.timedelta(hours=2)
    assert csr.validity(NOW, datetime.timedelta(days=30), soon)[1] == soon  # capped at the CA
    with pytest.raises(csr.SigningError, match="refusing to sign a certificate that expired"):
        csr.validity(NOW, datetime.timedelta(days=1), NOW + datetime.timedelta(minutes=1) - five)
    with pytest.raises(csr.SigningError, match="the signer has expired: NotAfter=2026-06-01"):
        csr.validity(NOW, datetime.timedelta(days=1), NOW - datetime.timedelta(minutes=10))


# The certificate ------------------------------------------------------------------------------
def test_certificate_fields() -> None:
    ca = authority()
    key = ec_key()
    req = parsed(request_pem(key, NODE, NODES, cn_first=True))
    cert = csr.build_certificate(ca, req, CLIENT, datetime.timedelta(days=30), NOW)
    assert cert.subject.rfc4514_string() == "CN=system:node:n1,O=system:nodes"
    # Go's order: O before CN, whatever the request's order; PrintableStrings.
    assert [a.oid for a in cert.subject] == [NameOID.ORGANIZATION_NAME, NameOID.COMMON_NAME]
    assert all(a._type == _ASN1Type.PrintableString for a in cert.subject)
    assert cert.issuer == ca.certificate.subject
    assert cert.public_key() == key.public_key()
    assert cert.not_valid_before_utc == NOW - datetime.timedelta(minutes=5)
    assert cert.not_valid_after_utc == NOW + datetime.timedelta(days=30, minutes=-5)
    assert 0 < cert.serial_number < 2**128
    cert.verify_directly_issued_by(ca.certificate)
    exts = [(e.oid, e.critical) for e in cert.extensions]
    assert exts == [
        (ExtensionOID.KEY_USAGE, True),
        (ExtensionOID.EXTENDED_KEY_USAGE, False),
        (ExtensionOID.BASIC_CONSTRAINTS, True),
        (ExtensionOID.AUTHORITY_KEY_IDENTIFIER, False),
    ]
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.digital_signature and ku.key_encipherment and not ku.key_cert_sign
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_certificate_sans_and_string_types() -> None:
    ca = authority(ski=False)
    req = parsed(request_pem(ec_key(), "user_1", (), dns=("b.example", "a.example"), ips=("::1",)))
    cert = csr.build_certificate(ca, req, ["client auth"], datetime.timedelta(hours=1), NOW)
    # '_' is not printable: a UTF8String, as Go's encoder picks.
    assert [a._type for a in cert.subject] == [_ASN1Type.UTF8String]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert not san.critical
    assert san.value.get_values_for_type(x509.DNSName) == ["b.example", "a.example"]
    # No key usage bits, so no KeyUsage; no SKI on the CA, so no AKI.
    assert [e.oid for e in cert.extensions] == [
        ExtensionOID.EXTENDED_KEY_USAGE,
        ExtensionOID.BASIC_CONSTRAINTS,
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME,
    ]


def test_certificate_with_empty_subject_has_critical_sans() -> None:
    key = ec_key()
    pem = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("x.example")]), critical=False)
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    cert = csr.build_certificate(
        authority(), parsed(pem), ["any"], datetime.timedelta(hours=1), NOW
    )
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).critical


def test_certificate_requested_extensions_are_dropped() -> None:
    key = ec_key()
    pem = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")]))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    cert = csr.build_certificate(
        authority(), parsed(pem), ["client auth"], datetime.timedelta(hours=1), NOW
    )
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_signer_decision() -> None:
    ca = authority()
    pem = request_pem(ec_key(), "user")
    body = _csr(pem, csr.KUBE_APISERVER_CLIENT, ["client auth", "server auth"])
    out = signing.decide(body, ca, csr.DEFAULT_DURATION, NOW)
    assert out == signing.Outcome(failed="invalid usage for client certificate: server auth")
    body = _csr(pem, csr.KUBE_APISERVER_CLIENT, ["client auth"])
    body["spec"]["expirationSeconds"] = 3600
    out = signing.decide(body, ca, csr.DEFAULT_DURATION, NOW)
    cert = x509.load_pem_x509_certificate(out.certificate)
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(minutes=65)
    failed = signing.failed(body, "why", "2026-06-01T12:00:00Z")["status"]["conditions"]
    assert failed == [
        {
            "type": "Failed",
            "status": "True",
            "reason": "SignerValidationFailure",
            "message": "why",
            "lastUpdateTime": "2026-06-01T12:00:00Z",
        }
    ]


def test_wants_signing() -> None:
    signers = {csr.KUBE_APISERVER_CLIENT: object()}
    approved = {"type": "Approved", "status": "True"}
    base = {"spec": {"signerName": csr.KUBE_APISERVER_CLIENT}}
    assert signing.wants_signing({**base, "status": {"conditions": [approved]}}, signers)
    assert not signing.wants_signing({**base, "status": {}}, signers)  # pending
    assert not signing.wants_signing(
        {**base, "status": {"conditions": [approved, {"type": "Failed", "status": "True"}]}},
        signers,
    )
    assert not signing.wants_signing(
        {**base, "status": {"conditions": [approved], "certificate": "eA=="}}, signers
    )
    other = {"spec": {"signerName": "example.com/x"}, "status": {"conditions": [approved]}}
    assert not signing.wants_signing(other, signers)


# Flags ----------------------------------------------------------------------------------------
def test_signer_files_general() -> None:
    files = signing.signer_files(
        {"cluster-signing-cert-file": "c", "cluster-signing-key-file": "k"}
    )
    assert files == dict.fromkeys(csr.SIGNERS, ("c", "k"))
    assert signing.signer_files({}) == {}
    assert signing.signer_files({"cluster-signing-cert-file": "c"}) == {}


def test_signer_files_specific() -> None:
    files = signing.signer_files(
        {
            "cluster-signing-kube-apiserver-client-cert-file": "c",
            "cluster-signing-kube-apiserver-client-key-file": "k",
        }
    )
    assert files == {csr.KUBE_APISERVER_CLIENT: ("c", "k")}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            {"cluster-signing-cert-file": "c", "cluster-signing-kubelet-serving-cert-file": "s"},
            "cannot specify --cluster-signing-{cert,key}-file and other",
        ),
        ({"cluster-signing-kubelet-client-key-file": "k"}, "cannot specify key without cert"),
        (
            {"cluster-signing-legacy-unknown-cert-file": "c"},
            '"cluster-signing-legacy-unknown": cannot specify cert without key',
        ),
    ],
)
def test_signer_files_errors(flags: dict[str, str], message: str) -> None:
    with pytest.raises(signing.ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        signing.signer_files(flags)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("8760h", 8760 * 3600), ("1h30m", 5400), ("90s", 90), ("1.5h", 5400), ("0", 0)],
)
def test_go_duration(text: str, seconds: float) -> None:
    assert go_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "10", "h", "1d", "abc"])
def test_go_duration_invalid(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        go_duration(text)


def _write_ca(directory: Path, ca: csr.Authority) -> tuple[Path, Path]:
    cert = directory / "ca.crt"
    key = directory / "ca.key"
    cert.write_bytes(ca.certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        ca.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert, key


def test_ca_files_read_again_when_they_change(tmp_path: Path) -> None:
    first, second = authority(), authority()
    cert, key = _write_ca(tmp_path, first)
    files = signing.AuthorityFiles(str(cert), str(key))
    assert files.current().certificate == first.certificate
    _write_ca(tmp_path, second)
    os.utime(cert, ns=(1, 1))  # a change the stamp sees even within one clock tick
    assert files.current().certificate == second.certificate
    # A changed pair that does not load: the previous one is kept.
    key.write_bytes(b"garbage")
    assert files.current().certificate == second.certificate


def test_ca_files_must_load(tmp_path: Path) -> None:
    ca = authority()
    cert, key = _write_ca(tmp_path, ca)
    cert.write_bytes(cert.read_bytes() * 2)
    with pytest.raises(csr.SigningError, match="expected 1 certificate, found 2"):
        signing.AuthorityFiles(str(cert), str(key))
    _write_ca(tmp_path, ca)
    _, other_key = _write_ca(tmp_path / "..", authority())
    with pytest.raises(csr.SigningError, match="does not match"):
        signing.AuthorityFiles(str(cert), str(other_key))


# The cleaner's rules ------------------------------------------------------------------------
def _stamp(delta: datetime.timedelta) -> str:
    return (NOW - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cleaner_csr(
    conditions: list[tuple[str, datetime.timedelta]], cert: bytes = b"", created: float = 0
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": "True", "lastUpdateTime": _stamp(d)} for t, d in conditions
        ]
    }
    if cert:
        status["certificate"] = base64.b64encode(cert).decode()
    return {
        "metadata": {"creationTimestamp": _stamp(datetime.timedelta(hours=created))},
        "status": status,
    }


HOUR = datetime.timedelta(hours=1)
MINUTE = datetime.timedelta(minutes=1)
VALID = self_signed(ec_key(), "x", NOW - HOUR, NOW + 48 * HOUR)
EXPIRED = self_signed(ec_key(), "x", NOW - 3 * HOUR, NOW - MINUTE)


@pytest.mark.parametrize(
    ("body", "delete", "deadline"),
    [
        (_cleaner_csr([("Approved", 61 * MINUTE)], VALID), True, None),
        (_cleaner_csr([("Approved", 59 * MINUTE)], VALID), False, NOW + MINUTE),
        (_cleaner_csr([("Denied", 61 * MINUTE)]), True, None),
        (_cleaner_csr([("Denied", 30 * MINUTE)]), False, NOW + 30 * MINUTE),
        (_cleaner_csr([("Failed", 61 * MINUTE)]), True, None),
        (_cleaner_csr([], created=25), True, None),
        (_cleaner_csr([], created=23), False, NOW + HOUR),
        (_cleaner_csr([("Approved", 25 * HOUR)]), True, None),  # approved, never issued
        (_cleaner_csr([("Approved", 2 * HOUR)]), False, NOW + 22 * HOUR),
        (_cleaner_csr([("Approved", MINUTE)], EXPIRED), True, None),
        # Expired but never approved: not the expiry rule (and no other holds yet).
        (_cleaner_csr([("Failed", MINUTE)], EXPIRED), False, NOW + 59 * MINUTE),
    ],
)
def test_cleaner_rules(
    body: dict[str, Any], delete: bool, deadline: datetime.datetime | None
) -> None:
    verdict = cleaner.verdict(body, NOW)
    assert verdict.delete is delete
    if not delete:
        assert verdict.deadline == deadline


def test_cleaner_ignores_conditions_without_time() -> None:
    body = {"metadata": {}, "status": {"conditions": [{"type": "Denied", "status": "True"}]}}
    assert cleaner.verdict(body, NOW) == cleaner.Verdict(False)


def test_cleaner_expiry_is_a_deadline() -> None:
    soon = self_signed(ec_key(), "x", NOW - HOUR, NOW + 5 * MINUTE)
    verdict = cleaner.verdict(_cleaner_csr([("Approved", MINUTE)], soon), NOW)
    assert verdict == cleaner.Verdict(False, deadline=NOW + 5 * MINUTE)


def test_certificate_keeps_a_country_of_any_length() -> None:
    """Go writes whatever country the request has; so does the signer."""
    with pytest.warns(UserWarning, match="length must be"):
        country = x509.NameAttribute(NameOID.COUNTRY_NAME, "USA", _validate=False)
    name = x509.Name([country, x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    pem = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(name)
        .sign(ec_key(), hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    cert = csr.build_certificate(
        authority(), parsed(pem), ["client auth"], datetime.timedelta(hours=1), NOW
    )
    with pytest.warns(UserWarning, match="length must be"):  # reading it back
        assert cert.subject.rfc4514_string() == "CN=x,C=USA"


# The declarations -------------------------------------------------------------------------
def test_declarations() -> None:
    """Aliases, workers, queues, resync and what each reads, as upstream's."""
    defs = {d.name: d for d in (approving.CONTROLLER, signing.CONTROLLER, cleaner.CONTROLLER)}
    assert set(defs) == {"csrapproving", "csrsigning", "csrcleaner"}
    assert {n: d.options.max_concurrent_reconciles for n, d in defs.items()} == {
        "csrapproving": 5,
        "csrsigning": 5,
        "csrcleaner": 1,
    }
    assert {n: d.options.queue_name for n, d in defs.items()} == {
        "csrapproving": "certificate",
        "csrsigning": "certificate",
        "csrcleaner": "",  # upstream has no queue: the controller's name
    }
    assert cleaner.CONTROLLER.options.resync_period == 3600
    assert all(d.beside_upstream is None for d in defs.values())
    assert all(d.primary == csr.CSRS for d in defs.values())
    reads = cleaner.CONTROLLER.subscriptions()[csr.CSRS]
    assert reads.metadata_only and set(reads.fields) == set(cleaner.FIELDS)
    assert approving.CONTROLLER.subscriptions()[csr.CSRS].fields == ()


def test_signing_flag_defaults() -> None:
    flags = signing.CONTROLLER.flag_parser().parse_args([])
    assert flags.cluster_signing_duration == datetime.timedelta(hours=8760)
    assert flags.cluster_signing_cert_file == ""
    parsed_flags = signing.CONTROLLER.flag_parser().parse_args(
        ["--cluster-signing-duration=1h", "--cluster-signing-kubelet-client-cert-file=c"]
    )
    assert parsed_flags.cluster_signing_duration == datetime.timedelta(hours=1)
    assert parsed_flags.cluster_signing_kubelet_client_cert_file == "c"
