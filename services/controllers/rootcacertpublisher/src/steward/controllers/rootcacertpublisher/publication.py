"""The root CA publisher's decisions, without I/O: the ConfigMap it creates, the update an
existing one needs (if any), which refusals of a create are no failure, the status code a
sync is counted under, and what counts as a CA bundle."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from steward.kube import NAMESPACE_TERMINATING, ApiError, ApiStatusError, NotFoundError

CONFIGMAP_NAME = "kube-root-ca.crt"
"""The ConfigMap published in every namespace (upstream's ``RootCACertConfigMapName``)."""
DATA_KEY = "ca.crt"
"""Its one data key."""
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters."
)
"""The annotation's value, word for word upstream's."""


def configmap(ca: str) -> dict[str, Any]:
    """The ConfigMap created where none is: the bundle under ``ca.crt`` and the
    description annotation, nothing else."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION},
        },
        "data": {DATA_KEY: ca},
    }


def updated(existing: Mapping[str, Any], ca: str) -> dict[str, Any] | None:
    """The existing ConfigMap as it must be written back, or None when it is right: its
    data exactly ``{ca.crt: bundle}`` (other keys are dropped) and the description
    annotation present and not empty. As upstream, an annotation of other text is left
    as it is; when the data is rewritten, the annotation is set to the description.
    Everything else of the object (labels, other annotations, ``binaryData``) is kept."""
    data = {DATA_KEY: ca}
    meta = existing.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    if (existing.get("data") or {}) == data and annotations.get(DESCRIPTION_ANNOTATION):
        return None
    annotations[DESCRIPTION_ANNOTATION] = DESCRIPTION
    body = dict(existing)
    body["metadata"] = {**meta, "annotations": annotations}
    body["data"] = data
    return body


def create_ignored(err: ApiError) -> bool:
    """Whether a refused create is no failure: the namespace is gone (NotFound) or being
    deleted (a ``NamespaceTerminating`` cause). ``AlreadyExists`` is a failure, as
    upstream's: the retry finds the ConfigMap and compares it."""
    if isinstance(err, NotFoundError):
        return True
    return isinstance(err, ApiStatusError) and err.has_cause(NAMESPACE_TERMINATING)


def sync_code(err: BaseException | None) -> str:
    """The ``code`` label a sync is counted under: ``200`` when it succeeded, the API
    server's HTTP status when it refused, else ``500`` (upstream's ``recordMetrics``)."""
    if err is None:
        return "200"
    if isinstance(err, ApiStatusError) and err.status:
        return str(err.status)
    return "500"


def check_bundle(pem: str, source: str) -> None:
    """Refuse a bundle that holds no certificate or a malformed one (upstream's ``readCA``:
    ``ParseCertsPEM``), parsed by OpenSSL.

    Raises:
        ValueError: says which file and why.
    """
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError(f"error parsing root-ca-file at {source}: no certificate found")
    try:
        ssl.create_default_context().load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as err:
        raise ValueError(f"error parsing root-ca-file at {source}: {err}") from err
