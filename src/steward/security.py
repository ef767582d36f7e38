"""How Steward's clients dial its gRPC services: mutual TLS, bearer tokens, plaintext.

# Transport
Every connection between Steward's services is mutual TLS: controllers dial with the
server CA and their own certificate and key (:class:`ClientSecurity`); the informer and
the manager serve with a certificate and key and require a client certificate signed by
their client CA (:mod:`steward.serving.security`, which also says how callers are
identified and authorized). A client reads its files when it opens a channel; the runtime
opens a new channel on every reconnection. Plaintext is refused unless
``--insecure-plaintext`` says so explicitly, for development.

# Identity
A controller is known to the servers by, in order, the bearer token it presents (the
``authorization`` metadata; a projected ServiceAccount token for the audience
``steward``), else the subject of its client certificate. A bearer token is only ever
sent over TLS.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from steward import grpc_tracing

__all__ = [
    "PLAINTEXT",
    "ClientSecurity",
    "SecurityConfigError",
    "add_client_arguments",
    "client_from_args",
    "file_stamps",
    "read_pem",
]


class SecurityConfigError(ValueError):
    """A security setting is missing or its files cannot be used."""


# Files ----------------------------------------------------------------------------------
def read_pem(path: str, what: str) -> bytes:
    """The PEM file ``path`` (``what`` names it in errors).

    Raises:
        SecurityConfigError: it cannot be read or holds no PEM data.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise SecurityConfigError(f"cannot read the {what} {path}: {err.strerror}") from err
    if b"-----BEGIN" not in data:
        raise SecurityConfigError(f"the {what} {path} holds no PEM data")
    return data


def file_stamps(paths: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """Modification time and size of each file, (-1, -1) for one that is missing: what
    tells that a certificate, key or token was rotated."""
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
            stamps.append((st.st_mtime_ns, st.st_size))
        except OSError:
            stamps.append((-1, -1))
    return tuple(stamps)


# Client ---------------------------------------------------------------------------------
class _TokenPlugin(grpc.AuthMetadataPlugin):
    """Sends ``authorization: Bearer <token>``, re-reading the file when it changes (a
    projected token is rotated by the kubelet)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[tuple[int, int], ...] = ()
        self._token = ""

    def __call__(
        self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback
    ) -> None:
        stamp = file_stamps((self.path,))
        if stamp != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as f:
                    self._token = f.read().strip()
                self._stamp = stamp
            except OSError as err:
                callback((), SecurityConfigError(f"cannot read token {self.path}: {err}"))
                return
        callback((("authorization", f"Bearer {self._token}"),), None)


@dataclass(frozen=True)
class ClientSecurity:
    """How a controller dials Steward's services."""

    ca_file: str | None = None
    """CA of the servers' certificates."""
    cert_file: str | None = None
    """This client's certificate (mTLS)."""
    key_file: str | None = None
    """Its key."""
    token_file: str | None = None
    """A bearer token to present as the caller's identity (sent over TLS only)."""
    insecure_plaintext: bool = False
    """Dial without TLS (development only)."""
    server_name: str | None = None
    """Name to check the server's certificate against, when it is not the target host."""

    def validate(self) -> None:
        """Raises SecurityConfigError unless the settings make a channel that can work."""
        files = (self.ca_file, self.cert_file, self.key_file)
        if self.insecure_plaintext:
            if any(files) or self.token_file:
                raise SecurityConfigError(
                    "--insecure-plaintext excludes TLS files and a token (a token is never "
                    "sent in plaintext)"
                )
            return
        if not all(files):
            raise SecurityConfigError(
                "dialing Steward's services needs --tls-ca-file, --tls-cert-file and "
                "--tls-key-file (mutual TLS), or --insecure-plaintext (development only)"
            )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Fresh channel credentials from the files; None for plaintext.

        Raises:
            SecurityConfigError: settings incomplete or files unreadable.
        """
        self.validate()
        if self.insecure_plaintext:
            return None
        assert self.ca_file and self.cert_file and self.key_file
        creds = grpc.ssl_channel_credentials(
            root_certificates=read_pem(self.ca_file, "server CA"),
            private_key=read_pem(self.key_file, "client key"),
            certificate_chain=read_pem(self.cert_file, "client certificate"),
        )
        if self.token_file:
            creds = grpc.composite_channel_credentials(
                creds, grpc.metadata_call_credentials(_TokenPlugin(self.token_file))
            )
        return creds

    def channel(
        self, target: str, options: Sequence[tuple[str, Any]] | None = None
    ) -> grpc.aio.Channel:
        """A traced ``grpc.aio`` channel to ``target`` with these credentials."""
        opts = list(options or ())
        if self.server_name:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        return grpc_tracing.channel(target, self.credentials(), opts)

    def sync_channel(self, target: str) -> grpc.Channel:
        """A blocking channel (command-line tools)."""
        creds = self.credentials()
        opts = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        if creds is None:
            return grpc.insecure_channel(target, opts)
        return grpc.secure_channel(target, creds, opts)


PLAINTEXT = ClientSecurity(insecure_plaintext=True)
"""Dial without TLS: for tests against plaintext servers
(:data:`steward.serving.security.DEVELOPMENT`)."""


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """The security flags of a client; each defaults to ``$STEWARD_<FLAG>``."""
    env = os.environ.get
    group = parser.add_argument_group("security (see docs/security.md)")
    group.add_argument(
        "--tls-ca-file",
        default=env("STEWARD_TLS_CA_FILE"),
        help="CA bundle (PEM) of the servers' certificates",
    )
    group.add_argument(
        "--tls-cert-file",
        default=env("STEWARD_TLS_CERT_FILE"),
        help="this client's certificate (PEM)",
    )
    group.add_argument(
        "--tls-key-file", default=env("STEWARD_TLS_KEY_FILE"), help="its private key (PEM)"
    )
    group.add_argument(
        "--token-file",
        default=env("STEWARD_TOKEN_FILE"),
        help="bearer token presented as this controller's identity (a projected "
        "ServiceAccount token with audience steward); without it the certificate's "
        "subject is the identity",
    )
    group.add_argument(
        "--tls-server-name",
        default=env("STEWARD_TLS_SERVER_NAME"),
        help="name the servers' certificates must carry, when not the dialed host",
    )
    group.add_argument(
        "--insecure-plaintext",
        action="store_true",
        default=env("STEWARD_INSECURE_PLAINTEXT", "") in ("1", "true"),
        help="dial without TLS (development only)",
    )


def client_from_args(args: argparse.Namespace) -> ClientSecurity:
    """The :class:`ClientSecurity` of parsed :func:`add_client_arguments` flags.

    Raises:
        SecurityConfigError: incomplete or contradictory settings, unreadable files.
    """
    security = ClientSecurity(
        ca_file=args.tls_ca_file,
        cert_file=args.tls_cert_file,
        key_file=args.tls_key_file,
        token_file=args.token_file,
        insecure_plaintext=args.insecure_plaintext,
        server_name=args.tls_server_name,
    )
    security.credentials()  # fail now with the file's name
    return security
