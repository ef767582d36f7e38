"""Bootstrap tokens and the signatures of ``cluster-info``: the decisions of the
bootstrapsigner and the tokencleaner, without I/O (k8s.io/cluster-bootstrap's semantics).

# A bootstrap token Secret
Type ``bootstrap.kubernetes.io/token`` in ``kube-system``, named ``bootstrap-token-<id>``
(``<id>``: six of ``[a-z0-9]``), with the data keys ``token-id`` (the same id),
``token-secret``, optionally ``expiration`` (RFC 3339) and ``usage-bootstrap-signing``.
An ``expiration`` that does not parse counts as expired (upstream's ``GetExpiration``).

# The signature
A detached JWS (RFC 7515, appendix F) of the ConfigMap's ``kubeconfig``: the protected
header ``{"alg":"HS256","kid":"<id>"}`` (as go-jose writes it: keys sorted, no spaces),
base64url without padding, then ``..`` (the payload left out), then the HMAC-SHA256 of
``<header>.<payload>`` keyed by the token secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

SECRET_TYPE = "bootstrap.kubernetes.io/token"  # noqa: S105 - a type, not a password
TOKEN_NAMESPACE = "kube-system"  # noqa: S105 - a namespace
"""Where token Secrets live (upstream's ``TokenSecretNamespace``)."""
CONFIGMAP_NAMESPACE = "kube-public"
CONFIGMAP_NAME = "cluster-info"
KUBECONFIG_KEY = "kubeconfig"
SIGNATURE_PREFIX = "jws-kubeconfig-"
ID_KEY = "token-id"
SECRET_KEY = "token-secret"  # noqa: S105 - a data key
EXPIRATION_KEY = "expiration"
SIGNING_KEY = "usage-bootstrap-signing"
NAME_PREFIX = "bootstrap-token-"
_NAME = re.compile(r"^bootstrap-token-([a-z0-9]{6})$")
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))$"
)


def data_value(secret: Mapping[str, Any], key: str) -> bytes:
    """A data value of the Secret (``data`` is base64 in JSON), b"" when absent or not
    base64 (upstream's ``GetData`` gives "" when absent)."""
    value = (secret.get("data") or {}).get(key)
    if not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def parse_rfc3339(text: str) -> datetime:
    """Go's ``time.Parse(time.RFC3339, text)``: a fraction of a second allowed, the zone
    ``Z`` or ``±hh:mm``.

    Raises:
        ValueError: not RFC 3339, or a field out of range.
    """
    found = _RFC3339.match(text)
    if found is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time")
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    fraction = found.group(7) or ""
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    if found.group(8) == "Z":
        zone = UTC
    else:
        sign = -1 if found.group(8)[0] == "-" else 1
        hours, minutes = int(found.group(9)), int(found.group(10))
        if hours > 23 or minutes > 59:
            raise ValueError(f"{text!r}: time zone offset out of range")
        zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=zone)


def expiration(secret: Mapping[str, Any], now: datetime) -> tuple[float, bool]:
    """Upstream's ``GetExpiration``: (seconds until the token expires, whether it has).
    No ``expiration``: (0, False), never expires. Unparseable: (0, True)."""
    text = _text(data_value(secret, EXPIRATION_KEY))
    if not text:
        return 0.0, False
    try:
        expires = parse_rfc3339(text)
    except ValueError:
        return 0.0, True
    remaining = (expires - now).total_seconds()
    if remaining <= 0:
        return 0.0, True
    return remaining, False


def is_token_secret(secret: Mapping[str, Any]) -> bool:
    """Whether the Secret is a bootstrap token's (its type; the namespace is the
    watch's)."""
    return secret.get("type") == SECRET_TYPE


@dataclass(frozen=True)
class SigningToken:
    """A token that signs: its id and its secret."""

    token_id: str
    secret: bytes


def signing_token(secret: Mapping[str, Any], now: datetime) -> SigningToken | None:
    """Upstream's ``validateSecretForSigning``: the token when the Secret may sign, else
    None (name not ``bootstrap-token-<id>``, ``token-id`` missing or not the name's,
    ``token-secret`` missing, expired, or ``usage-bootstrap-signing`` not "true")."""
    name = (secret.get("metadata") or {}).get("name") or ""
    found = _NAME.match(name)
    if found is None:
        return None
    token_id = _text(data_value(secret, ID_KEY))
    if not token_id or token_id != found.group(1):
        return None
    token_secret = data_value(secret, SECRET_KEY)
    if not token_secret:
        return None
    if expiration(secret, now)[1]:
        return None
    if data_value(secret, SIGNING_KEY) != b"true":
        return None
    return SigningToken(token_id, token_secret)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def detached_signature(content: str, token_id: str, token_secret: bytes) -> str:
    """The detached JWS of ``content`` (see the module docs)."""
    header = _b64(b'{"alg":"HS256","kid":' + _json_string(token_id) + b"}")
    payload = _b64(content.encode("utf-8", "surrogateescape"))
    mac = hmac.new(token_secret, f"{header}.{payload}".encode("ascii"), hashlib.sha256)
    return f"{header}..{_b64(mac.digest())}"


def _json_string(text: str) -> bytes:
    # Go's encoding/json: "<", ">" and "&" escaped; a token id is [a-z0-9] in any case.
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "<>&" or ord(ch) < 0x20 or ch in "\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out).encode("utf-8", "surrogateescape")


def signed_data(data: Mapping[str, str], tokens: Iterable[SigningToken]) -> dict[str, str] | None:
    """Upstream's ``signConfigMap``: the ConfigMap's new ``data`` (every signature
    recomputed, those of tokens gone removed), or None when nothing is to be written (no
    ``kubeconfig`` key, or every signature already as it must be)."""
    content = data.get(KUBECONFIG_KEY)
    if content is None:
        return None
    new = {k: v for k, v in data.items() if not k.startswith(SIGNATURE_PREFIX)}
    old = {k[len(SIGNATURE_PREFIX) :]: v for k, v in data.items() if k.startswith(SIGNATURE_PREFIX)}
    changed = False
    for token in tokens:
        if SIGNATURE_PREFIX + token.token_id in new:
            continue  # a duplicate id: the first one signs (upstream keeps the first)
        signature = detached_signature(content, token.token_id, token.secret)
        if old.pop(token.token_id, None) != signature:
            changed = True
        new[SIGNATURE_PREFIX + token.token_id] = signature
    if old:
        changed = True
    return new if changed else None
