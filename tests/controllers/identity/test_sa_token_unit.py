"""The tokens controller's pure parts: the legacy JWT (claims, header, kid, signature,
checked with the public key), what a token Secret lacks and how it is filled, the
reference removal, and the flags."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from steward.controllers.serviceaccounttoken import tokens
from steward.controllers.serviceaccounttoken.signing import (
    UnusableKey,
    key_id,
    legacy_claims,
    load_signer,
    signer_of,
)
from tests.controllers.identity.satokens import decode, verify

pytestmark = pytest.mark.unit

CA = b"-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n"


def _pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, fmt: str) -> bytes:
    formats = {
        "pkcs8": serialization.PrivateFormat.PKCS8,
        "traditional": serialization.PrivateFormat.TraditionalOpenSSL,
    }
    return key.private_bytes(serialization.Encoding.PEM, formats[fmt], serialization.NoEncryption())


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_claims_are_upstreams_legacy_claims() -> None:
    assert legacy_claims("ns", "robot", "u-1", "robot-token") == {
        "iss": "kubernetes/serviceaccount",
        "kubernetes.io/serviceaccount/namespace": "ns",
        "kubernetes.io/serviceaccount/secret.name": "robot-token",
        "kubernetes.io/serviceaccount/service-account.name": "robot",
        "kubernetes.io/serviceaccount/service-account.uid": "u-1",
        "sub": "system:serviceaccount:ns:robot",
    }


def test_kid_is_sha256_of_the_public_der(rsa_key: rsa.RSAPrivateKey) -> None:
    der = rsa_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    expected = base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()
    assert key_id(rsa_key.public_key()) == expected
    assert "=" not in expected


@pytest.mark.parametrize("fmt", ["pkcs8", "traditional"])
def test_rsa_token_verifies_with_the_public_key(rsa_key: rsa.RSAPrivateKey, fmt: str) -> None:
    signer = load_signer(_pem(rsa_key, fmt))
    claims = legacy_claims("ns", "robot", "u-1", "robot-token")
    token = signer.sign(claims)
    header, payload = decode(token)
    assert header == {"alg": "RS256", "kid": key_id(rsa_key.public_key())}
    assert payload == claims
    verify(token, rsa_key.public_key())
    # Go's encoding: keys sorted, no spaces.
    body = token.split(".")[1]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    assert raw.startswith(b'{"iss":"kubernetes/serviceaccount","kubernetes.io/serviceaccount/')


def test_a_token_of_another_key_does_not_verify(rsa_key: rsa.RSAPrivateKey) -> None:
    from cryptography.exceptions import InvalidSignature

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = signer_of(rsa_key).sign(legacy_claims("ns", "a", "u", "s"))
    with pytest.raises(InvalidSignature):
        verify(token, other.public_key())


@pytest.mark.parametrize(
    ("curve", "alg", "size"),
    [(ec.SECP256R1(), "ES256", 64), (ec.SECP384R1(), "ES384", 96), (ec.SECP521R1(), "ES512", 132)],
)
def test_ecdsa_token_is_jws_r_s(curve: ec.EllipticCurve, alg: str, size: int) -> None:
    key = ec.generate_private_key(curve)
    token = load_signer(_pem(key, "traditional")).sign(legacy_claims("ns", "a", "u", "s"))
    header, _ = decode(token)
    assert header["alg"] == alg
    signature = token.split(".")[2]
    assert len(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))) == size
    verify(token, key.public_key())


def test_unusable_keys_are_refused() -> None:
    with pytest.raises(UnusableKey, match="curve"):
        signer_of(ec.generate_private_key(ec.SECP224R1()))
    with pytest.raises(UnusableKey, match="does not contain"):
        load_signer(CA)
    with pytest.raises(UnusableKey):
        load_signer(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_update_needed() -> None:
    full = {"token": _b64(b"t"), "namespace": _b64(b"ns"), "ca.crt": _b64(CA)}
    assert not tokens.update_needed(full, CA)
    assert tokens.update_needed(full, b"other") == tokens.Needs(True, False, False)
    assert not tokens.update_needed({**full, "ca.crt": ""}, b"")  # no root CA: never needed
    assert tokens.update_needed({**full, "token": ""}, CA) == tokens.Needs(False, False, True)
    assert tokens.update_needed(None, CA) == tokens.Needs(True, True, True)


def test_populated_fills_only_what_is_missing(rsa_key: rsa.RSAPrivateKey) -> None:
    signer = signer_of(rsa_key)
    secret: dict[str, Any] = {
        "metadata": {"name": "s", "namespace": "ns", "annotations": {"other": "kept"}},
        "data": {"namespace": _b64(b"custom")},
    }
    needs = tokens.update_needed(secret["data"], CA)
    out = tokens.populated(secret, needs, signer, CA, "robot", "u-1")
    data = {k: base64.b64decode(v) for k, v in out["data"].items()}
    assert data["namespace"] == b"custom"
    assert data["ca.crt"] == CA
    _, claims = decode(data["token"].decode())
    assert claims["kubernetes.io/serviceaccount/secret.name"] == "s"
    assert out["metadata"]["annotations"] == {
        "other": "kept",
        "kubernetes.io/service-account.name": "robot",
        "kubernetes.io/service-account.uid": "u-1",
    }


def test_without_reference() -> None:
    sa = {"secrets": [{"name": "a"}, {"name": "b"}]}
    assert tokens.without_reference(sa, "c") is None
    assert tokens.without_reference(sa, "a") == {"secrets": [{"name": "b"}]}


def test_the_private_key_flag_is_required(tmp_path: object) -> None:
    with pytest.raises(SystemExit) as exited:
        tokens.CONTROLLER.flag_parser().parse_args([])
    assert exited.value.code == 2


def test_flags_parse_and_validate(rsa_key: rsa.RSAPrivateKey, tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    key = tmp_path / "sa.key"
    key.write_bytes(_pem(rsa_key, "pkcs8"))
    bad = tmp_path / "bad.crt"
    bad.write_bytes(b"not a certificate")
    parser = tokens.CONTROLLER.flag_parser()
    parsed = parser.parse_args(
        [f"--service-account-private-key-file={key}", "--concurrent-serviceaccount-token-syncs=7"]
    )
    assert parsed.service_account_private_key_file.algorithm == "RS256"
    assert parsed.workers == 7
    assert parsed.root_ca_file is None
    for args in (
        [f"--service-account-private-key-file={tmp_path / 'missing.key'}"],
        [f"--service-account-private-key-file={key}", f"--root-ca-file={bad}"],
    ):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(args)
        assert exited.value.code == 2


def test_workers_default_is_upstreams() -> None:
    assert tokens.CONTROLLER.options.max_concurrent_reconciles == 5
    assert tokens.CONTROLLER.options.max_retries == 10
    assert tokens.CONTROLLER.options.queue_name == "serviceaccount_tokens_service"


def test_hosted_without_the_key_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """As a process: no --service-account-private-key-file, exit status 2 naming it."""
    from steward.runtime.host import run

    with pytest.raises(SystemExit) as exited:
        run(tokens.CONTROLLER, ["--informer=127.0.0.1:1"])
    assert exited.value.code == 2
    assert "--service-account-private-key-file" in capsys.readouterr().err


def test_hosted_concurrency_flag_sets_the_workers(
    rsa_key: rsa.RSAPrivateKey, tmp_path: object
) -> None:
    from pathlib import Path

    from steward.runtime.host import parser_for

    assert isinstance(tmp_path, Path)
    key = tmp_path / "sa.key"
    key.write_bytes(_pem(rsa_key, "pkcs8"))
    parser = parser_for(tokens.CONTROLLER)
    flag = f"--service-account-private-key-file={key}"
    assert parser.parse_args([flag]).workers == 5
    assert parser.parse_args([flag, "--concurrent-serviceaccount-token-syncs=3"]).workers == 3
    assert parser.parse_args([flag, "--workers=4"]).workers == 4
