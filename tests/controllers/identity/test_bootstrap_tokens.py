"""The bootstrap controllers' decisions (no cluster): the detached JWS, which tokens sign,
the signatures a ConfigMap must hold, and when a token has expired."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.hmac import HMAC

from steward.controllers.bootstrap.tokens import (
    SigningToken,
    detached_signature,
    expiration,
    parse_rfc3339,
    signed_data,
    signing_token,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)
CONTENT = "Hello from the other side. I must have called a thousand times."


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def spec_signature(content: str, kid: str, key: bytes) -> str:
    """RFC 7515 by hand (another HMAC implementation): the protected header, the payload,
    the MAC of the two, the payload left out (appendix F)."""
    header = b64url(json.dumps({"alg": "HS256", "kid": kid}, separators=(",", ":")).encode())
    payload = b64url(content.encode())
    mac = HMAC(key, hashes.SHA256())
    mac.update(f"{header}.{payload}".encode())
    return f"{header}..{b64url(mac.finalize())}"


@pytest.mark.parametrize(
    ("content", "key", "expected"),
    [
        # k8s.io/cluster-bootstrap's known answers for id "joshua" (go-jose's output).
        (
            CONTENT,
            b"my voice is my passcode",
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8",
        ),
        (
            "",
            b"my voice is my passcode",
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk",
        ),
        (
            CONTENT,
            b"",
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8",
        ),
    ],
)
def test_detached_signature_known_answers(content: str, key: bytes, expected: str) -> None:
    assert detached_signature(content, "joshua", key) == expected
    assert spec_signature(content, "joshua", key) == expected


def test_detached_signature_header_and_detached_payload() -> None:
    sig = detached_signature("apiVersion: v1\n", "abcdef", b"0123456789abcdef")
    header, payload, mac = sig.split(".")
    assert payload == ""
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "HS256", "kid": "abcdef"}
    assert len(base64.urlsafe_b64decode(mac + "=")) == 32
    assert sig == spec_signature("apiVersion: v1\n", "abcdef", b"0123456789abcdef")


def secret(name: str = "bootstrap-token-abcdef", **data: str) -> dict[str, Any]:
    values = {"token-id": "abcdef", "token-secret": "0123456789abcdef"}
    values.update({k.replace("_", "-"): v for k, v in data.items()})
    return {
        "metadata": {"name": name},
        "type": "bootstrap.kubernetes.io/token",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items() if v},
    }


SIGNS: dict[str, tuple[dict[str, Any], bool]] = {
    "signs": (secret(usage_bootstrap_signing="true"), True),
    "not expired yet": (
        secret(usage_bootstrap_signing="true", expiration="2026-12-07T12:00:01Z"),
        True,
    ),
    "usage false": (secret(usage_bootstrap_signing="false"), False),
    "usage absent": (secret(), False),
    "usage not exactly true": (secret(usage_bootstrap_signing="True"), False),
    "expired": (secret(usage_bootstrap_signing="true", expiration="2026-12-07T12:00:00Z"), False),
    "unparseable expiration": (
        secret(usage_bootstrap_signing="true", expiration="tomorrow"),
        False,
    ),
    "name not of a token": (secret("token-abcdef", usage_bootstrap_signing="true"), False),
    "id unlike the name": (
        secret("bootstrap-token-zzzzzz", usage_bootstrap_signing="true"),
        False,
    ),
    "no id": (secret(token_id="", usage_bootstrap_signing="true"), False),
    "no secret": (secret(token_secret="", usage_bootstrap_signing="true"), False),
    "upper case id": (
        secret("bootstrap-token-ABCDEF", token_id="ABCDEF", usage_bootstrap_signing="true"),
        False,
    ),
}


@pytest.mark.parametrize("case", sorted(SIGNS))
def test_which_tokens_sign(case: str) -> None:
    obj, signs = SIGNS[case]
    token = signing_token(obj, NOW)
    assert (token is not None) is signs
    if token is not None:
        assert token == SigningToken("abcdef", b"0123456789abcdef")


A = SigningToken("aaaaaa", b"aaaaaaaaaaaaaaaa")
B = SigningToken("bbbbbb", b"bbbbbbbbbbbbbbbb")


def sig(token: SigningToken, content: str = "kc") -> str:
    return detached_signature(content, token.token_id, token.secret)


def test_signatures_added_kept_and_removed() -> None:
    assert signed_data({"kubeconfig": "kc", "other": "x"}, [A, B]) == {
        "kubeconfig": "kc",
        "other": "x",
        "jws-kubeconfig-aaaaaa": sig(A),
        "jws-kubeconfig-bbbbbb": sig(B),
    }
    current = {"kubeconfig": "kc", "jws-kubeconfig-aaaaaa": sig(A), "jws-kubeconfig-bbbbbb": sig(B)}
    assert signed_data(current, [A, B]) is None  # nothing to write
    assert signed_data(current, [A]) == {"kubeconfig": "kc", "jws-kubeconfig-aaaaaa": sig(A)}
    assert signed_data(current, []) == {"kubeconfig": "kc"}
    stale = {"kubeconfig": "new", "jws-kubeconfig-aaaaaa": sig(A)}
    assert signed_data(stale, [A]) == {"kubeconfig": "new", "jws-kubeconfig-aaaaaa": sig(A, "new")}


def test_no_kubeconfig_nothing_written() -> None:
    assert signed_data({"jws-kubeconfig-aaaaaa": "x"}, [A]) is None
    assert signed_data({}, []) is None


def test_expiration_decisions() -> None:
    assert expiration(secret(), NOW) == (0.0, False)
    assert expiration(secret(expiration="2026-12-07T12:00:30Z"), NOW) == (30.0, False)
    assert expiration(secret(expiration="2026-12-07T12:00:00Z"), NOW) == (0.0, True)
    assert expiration(secret(expiration="2026-12-07T11:00:00Z"), NOW) == (0.0, True)
    assert expiration(secret(expiration="not a time"), NOW) == (0.0, True)
    assert expiration(secret(expiration="2026-12-07T13:00:30+01:00"), NOW) == (30.0, False)
    assert expiration(secret(expiration="2026-12-07T12:00:00.5Z"), NOW) == (0.5, False)


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-07",
        "2026-12-07 12:00:00Z",
        "2026-13-07T12:00:00Z",
        "2026-12-07T24:00:00Z",
        "2026-12-07T12:00:00",
        "2026-12-07T12:00:00+25:00",
    ],
)
def test_rfc3339_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"RFC 3339|out of range|must be in"):
        parse_rfc3339(text)


def test_rfc3339_accepted() -> None:
    assert parse_rfc3339("2026-12-07T12:00:00Z") == NOW
    assert parse_rfc3339("2026-12-07T07:00:00-05:00") == NOW
    assert parse_rfc3339("2026-12-07T12:00:00.000000001Z") == NOW + timedelta(0)


def test_declared_as_upstream_runs_them() -> None:
    """KCM's aliases, off unless named, one worker each, upstream's queue names, never
    beside upstream's; what each reads of which objects."""
    from steward import CONFIGMAPS, SECRETS
    from steward.controllers.bootstrap import cleaner, signer

    assert (signer.CONTROLLER.name, cleaner.CONTROLLER.name) == ("bootstrapsigner", "tokencleaner")
    for definition, queue in (
        (signer.CONTROLLER, "bootstrap_signer_queue"),
        (cleaner.CONTROLLER, "token_cleaner"),
    ):
        assert not definition.enabled_by_default
        assert definition.beside_upstream is None
        assert definition.options.max_concurrent_reconciles == 1
        assert definition.options.queue_name == queue
        assert definition.options.resync_period is None
    assert cleaner.CONTROLLER.options.namespace == "kube-system"
    assert signer.CONTROLLER.options.namespace == ""
    subs = signer.CONTROLLER.subscriptions()
    assert subs[CONFIGMAPS].field_selector == (
        "metadata.namespace=kube-public,metadata.name=cluster-info"
    )
    assert subs[CONFIGMAPS].whole
    assert subs[SECRETS].field_selector == "metadata.namespace=kube-system"
    assert set(subs[SECRETS].fields) == {
        "type",
        "data.token-id",
        "data.token-secret",
        "data.expiration",
        "data.usage-bootstrap-signing",
    }
    assert set(cleaner.CONTROLLER.subscriptions()[SECRETS].fields) == {"type", "data.expiration"}
