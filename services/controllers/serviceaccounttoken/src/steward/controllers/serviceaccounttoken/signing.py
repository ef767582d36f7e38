"""Legacy service account tokens: their claims, and the JWS that carries them.

A legacy token (the ``token`` of a Secret of type ``kubernetes.io/service-account-token``)
is a compact JWS signed with kube-controller-manager's ``--service-account-private-key-file``
and verified by kube-apiserver with the public half (its ``--service-account-key-file``),
as upstream's ``pkg/serviceaccount`` makes it:

- the header is ``{"alg": ..., "kid": ...}``: ``RS256`` for an RSA key; ``ES256``,
  ``ES384`` or ``ES512`` for an ECDSA key on P-256, P-384 or P-521 (another curve is
  refused); ``kid`` is the unpadded base64url SHA-256 of the public key's DER
  SubjectPublicKeyInfo;
- the claims are exactly the legacy ones, keys sorted as Go encodes a map:
  ``iss`` (``kubernetes/serviceaccount``), ``kubernetes.io/serviceaccount/namespace``,
  ``.../secret.name``, ``.../service-account.name``, ``.../service-account.uid`` and
  ``sub`` (``system:serviceaccount:<namespace>:<name>``); no ``iat``, ``exp`` or ``aud``
  (a legacy token never expires);
- an ECDSA signature is ``r || s``, each the curve's size in bytes (JWS, not DER).

Everything here is pure: no I/O but :func:`load_signer_file`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

LEGACY_ISSUER = "kubernetes/serviceaccount"
"""The ``iss`` of every legacy token (upstream's ``LegacyIssuer``)."""
CLAIM_NAMESPACE = "kubernetes.io/serviceaccount/namespace"
CLAIM_SECRET_NAME = "kubernetes.io/serviceaccount/secret.name"  # noqa: S105 (a claim name)
CLAIM_SA_NAME = "kubernetes.io/serviceaccount/service-account.name"
CLAIM_SA_UID = "kubernetes.io/serviceaccount/service-account.uid"

_CURVES: dict[str, tuple[str, Any, int]] = {
    "secp256r1": ("ES256", hashes.SHA256(), 32),
    "secp384r1": ("ES384", hashes.SHA384(), 48),
    "secp521r1": ("ES512", hashes.SHA512(), 66),
}
"""ECDSA curve → (JWS algorithm, digest, bytes per coordinate)."""


class UnusableKey(ValueError):
    """The private key cannot sign legacy tokens (its type, its curve, its PEM)."""


def b64url(data: bytes) -> str:
    """Unpadded base64url, as JWS writes every part."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def key_id(public_key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey) -> str:
    """Upstream's ``keyIDFromPublicKey``: the unpadded base64url SHA-256 of the public
    key's PKIX (SubjectPublicKeyInfo) DER encoding."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return b64url(hashlib.sha256(der).digest())


def subject(namespace: str, name: str) -> str:
    """A service account's user name (``system:serviceaccount:<ns>:<name>``)."""
    return f"system:serviceaccount:{namespace}:{name}"


def legacy_claims(namespace: str, sa_name: str, sa_uid: str, secret_name: str) -> dict[str, str]:
    """Upstream's ``LegacyClaims`` merged with the issuer, as the token carries them."""
    return {
        "iss": LEGACY_ISSUER,
        CLAIM_NAMESPACE: namespace,
        CLAIM_SECRET_NAME: secret_name,
        CLAIM_SA_NAME: sa_name,
        CLAIM_SA_UID: sa_uid,
        "sub": subject(namespace, sa_name),
    }


def _json(value: dict[str, Any]) -> bytes:
    # Go's encoding/json: map keys sorted, no spaces, <, > and & escaped.
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode("utf-8")


@dataclass(frozen=True)
class Signer:
    """A private key able to sign legacy tokens, with its JWS algorithm and key id."""

    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    algorithm: str
    kid: str

    def sign(self, claims: dict[str, Any]) -> str:
        """The compact JWS of ``claims`` (header ``alg`` and ``kid``)."""
        header = _json({"alg": self.algorithm, "kid": self.kid})
        signing_input = f"{b64url(header)}.{b64url(_json(claims))}".encode("ascii")
        if isinstance(self.key, rsa.RSAPrivateKey):
            signature = self.key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        else:
            _, digest, size = _CURVES[self.key.curve.name]
            r, s = decode_dss_signature(self.key.sign(signing_input, ec.ECDSA(digest)))
            signature = r.to_bytes(size, "big") + s.to_bytes(size, "big")
        return f"{signing_input.decode('ascii')}.{b64url(signature)}"


def signer_of(key: object) -> Signer:
    """The :class:`Signer` of a loaded private key (upstream's ``JWTTokenGenerator``).

    Raises:
        UnusableKey: neither an RSA nor an ECDSA key on P-256, P-384 or P-521.
    """
    if isinstance(key, rsa.RSAPrivateKey):
        return Signer(key, "RS256", key_id(key.public_key()))
    if isinstance(key, ec.EllipticCurvePrivateKey):
        found = _CURVES.get(key.curve.name)
        if found is None:
            raise UnusableKey(
                f"unknown private key curve {key.curve.name}, must be 256, 384, or 521"
            )
        return Signer(key, found[0], key_id(key.public_key()))
    raise UnusableKey(f"unknown private key type {type(key).__name__}, must be RSA or ECDSA")


def load_signer(pem: bytes) -> Signer:
    """The signer of the first private key in ``pem`` (PKCS#1, SEC 1 or PKCS#8, as
    client-go's ``keyutil.ParsePrivateKeyPEM`` reads).

    Raises:
        UnusableKey: no private key could be read, or it cannot sign legacy tokens.
    """
    for block in _pem_blocks(pem):
        if b"PRIVATE KEY" not in block.split(b"\n", 1)[0]:
            continue
        try:
            key = serialization.load_pem_private_key(block, password=None)
        except (ValueError, TypeError) as err:
            raise UnusableKey(f"cannot parse the private key: {err}") from err
        return signer_of(key)
    raise UnusableKey("data does not contain a valid RSA or ECDSA private key")


def load_signer_file(path: str) -> Signer:
    """:func:`load_signer` of a file.

    Raises:
        UnusableKey: the file cannot be read, or holds no usable private key.
    """
    try:
        pem = Path(path).read_bytes()
    except OSError as err:
        raise UnusableKey(f"error reading key for service account token controller: {err}") from err
    return load_signer(pem)


def _pem_blocks(pem: bytes) -> list[bytes]:
    blocks: list[bytes] = []
    start = pem.find(b"-----BEGIN ")
    while start != -1:
        end_marker = pem.find(b"-----END ", start)
        if end_marker == -1:
            break
        end = pem.find(b"-----", end_marker + len(b"-----END "))
        if end == -1:
            break
        blocks.append(pem[start : end + 5] + b"\n")
        start = pem.find(b"-----BEGIN ", end + 5)
    return blocks


def pem_certificates(pem: bytes) -> int:
    """How many certificates ``pem`` holds (``--root-ca-file`` must hold at least one).

    Raises:
        ValueError: a CERTIFICATE block does not parse, or there is none.
    """
    from cryptography import x509

    count = 0
    for block in _pem_blocks(pem):
        if block.startswith(b"-----BEGIN CERTIFICATE-----"):
            x509.load_pem_x509_certificate(block)
            count += 1
    if not count:
        raise ValueError("data does not contain any valid RSA or ECDSA certificates")
    return count
