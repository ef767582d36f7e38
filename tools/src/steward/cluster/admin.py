"""A small client of kube-apiserver as cluster admin, for start-up (kubernetes' is for the rest)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from steward.cluster import pki
from steward.cluster.errors import ClusterError
from steward.cluster.state import ClusterState


def ssl_context(ca: Path | None, cert: pki.KeyPair | None) -> ssl.SSLContext:
    """A TLS client context trusting ``ca`` and presenting ``cert`` (if any)."""
    ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


def admin_context(state: ClusterState) -> ssl.SSLContext:
    """A TLS client context of the cluster admin (``system:masters``)."""
    d = state.directory / "pki"
    return ssl_context(d / "ca.crt", pki.KeyPair(d / "admin.crt", d / "admin.key"))


def request(
    state: ClusterState,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    ok: tuple[int, ...] = (200,),
) -> dict[str, Any]:
    """One request to kube-apiserver as cluster admin; returns the decoded JSON body."""
    ctx = admin_context(state)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(  # noqa: S310 - https to our own loopback API server
        state.server + path,
        data=data,
        method=method,
        headers={
            "Content-Type": (
                "application/merge-patch+json" if method == "PATCH" else "application/json"
            ),
            "Accept": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:  # noqa: S310
            result: dict[str, Any] = json.loads(resp.read() or b"{}")
            return result
    except urllib.error.HTTPError as err:
        if err.code in ok:
            decoded: dict[str, Any] = json.loads(err.read() or b"{}")
            return decoded
        raise ClusterError(f"{method} {path} failed: {err.code} {err.read()[:500]!r}") from None


def create(state: ClusterState, path: str, doc: dict[str, Any]) -> None:
    """POST ``doc`` to the collection at ``path``; one that exists already is kept."""
    request(state, "POST", path, doc, ok=(201, 409))
