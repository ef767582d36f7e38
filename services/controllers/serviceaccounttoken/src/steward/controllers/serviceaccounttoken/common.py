"""What the two controllers of the package share: the token Secret's type and
annotations, and how a Secret names its service account."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from steward import SECRETS, MirrorObject

TOKEN_TYPE = "kubernetes.io/service-account-token"  # noqa: S105 (a Secret type)
"""The type of a legacy token Secret (``v1.SecretTypeServiceAccountToken``)."""
SA_NAME_KEY = "kubernetes.io/service-account.name"
"""The annotation naming the Secret's service account (``v1.ServiceAccountNameKey``)."""
SA_UID_KEY = "kubernetes.io/service-account.uid"
"""The annotation with that service account's UID (``v1.ServiceAccountUIDKey``)."""
TOKEN_KEY = "token"  # noqa: S105 (a data key)
CA_KEY = "ca.crt"
NAMESPACE_KEY = "namespace"

BY_SERVICE_ACCOUNT = "token-secrets-by-service-account"
"""The mirror's index of token Secrets by ``namespace/service-account-name``."""


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """An object's annotations ({} when it has none)."""
    return (obj.get("metadata") or {}).get("annotations") or {}


def is_token_secret(secret: Mapping[str, Any]) -> bool:
    """Whether a Secret is of the legacy token type."""
    return secret.get("type") == TOKEN_TYPE


def names_service_account(secret: Mapping[str, Any], sa_name: str, sa_uid: str) -> bool:
    """apiserver's ``IsServiceAccountToken``: a token Secret annotated with the service
    account's name, and with its UID or none."""
    if not is_token_secret(secret):
        return False
    notes = annotations_of(secret)
    if notes.get(SA_NAME_KEY, "") != sa_name:
        return False
    uid = notes.get(SA_UID_KEY, "")
    return not uid or uid == sa_uid


def by_service_account(obj: MirrorObject) -> Iterable[str]:
    """Index of token Secrets by the service account they name (``namespace/name``)."""
    if obj.type != SECRETS:
        return ()
    secret = obj.object
    if not is_token_secret(secret):
        return ()
    name = annotations_of(secret).get(SA_NAME_KEY, "")
    return (f"{obj.namespace}/{name}",) if name else ()
