"""Transport security, caller identity and authorization of Steward's gRPC services.

# Transport
Every connection between Steward's services is mutual TLS: the informer and the manager
serve with a certificate and key from files and require a client certificate signed by
``--client-ca-file``; controllers dial with the server CA and their own certificate and
key. The server re-reads its files when they change (checked at each new connection),
so a rotated certificate is served without a restart. A client reads its files when it
opens a channel; the runtime opens a new channel on every reconnection. Plaintext is
refused unless ``--insecure-plaintext`` says so explicitly, for development.

# Identity
A caller is, in order:
1. the user of the bearer token in the ``authorization`` metadata, verified with a
   TokenReview for the audience ``--token-audience`` (default ``steward``; give pods a
   projected ServiceAccount token with that audience), cached for ``--auth-cache-ttl``;
2. else the subject of its verified client certificate: the common name is the user and
   the organizations are the groups, as kube-apiserver's x509 authenticator reads them.
A bearer token is only ever sent over TLS.

# Authorization
With ``--authorization-mode=RBAC`` (the default) every decision is a SubjectAccessReview
of the caller's identity, cached for ``--auth-cache-ttl``: the informer asks exactly
what the API server would be asked (``list``/``watch``/``get`` of that resource in that
namespace), so it never widens anyone's access; the manager asks about its own resource
``controllers.steward.io`` (see :data:`STEWARD_GROUP`). ``AlwaysAllow`` skips both
authentication and authorization, for development only.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from steward import grpc_tracing
from steward.kube import ApiError, ApiStatusError, ApiUnavailableError, KubeClient

log = logging.getLogger(__name__)

STEWARD_GROUP = "steward.io"
"""The API group of the manager's authorization checks: resource ``controllers``, the
controller's name as the resource name, verbs ``register`` (hold a Session under that
name), ``get``/``list`` (read the registry), ``enable``/``disable`` (operator RPCs).
Nothing of this group is served by the API server; RBAC rules name it all the same."""

DEFAULT_AUDIENCE = "steward"
AuthorizationMode = Literal["RBAC", "AlwaysAllow"]


class SecurityConfigError(ValueError):
    """A security setting is missing or its files cannot be used."""


# Files ----------------------------------------------------------------------------------
def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise SecurityConfigError(f"cannot read the {what} {path}: {err.strerror}") from err
    if b"-----BEGIN" not in data:
        raise SecurityConfigError(f"the {what} {path} holds no PEM data")
    return data


def _stamp(paths: Sequence[str]) -> tuple[tuple[int, int], ...]:
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
            stamps.append((st.st_mtime_ns, st.st_size))
        except OSError:
            stamps.append((-1, -1))
    return tuple(stamps)


# Server ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerTLS:
    """The serving certificate, its key and the CA that signs client certificates."""

    cert_file: str
    key_file: str
    client_ca_file: str

    def _configuration(self) -> Any:
        cert = _read(self.cert_file, "serving certificate")
        key = _read(self.key_file, "serving key")
        ca = _read(self.client_ca_file, "client CA")
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that require a client certificate and pick up changed files.

        Raises:
            SecurityConfigError: a file cannot be read or holds no PEM data.
        """
        files = (self.cert_file, self.key_file, self.client_ca_file)
        state = {"stamp": _stamp(files)}
        initial = self._configuration()

        def fetch() -> Any:
            # gRPC calls this before every new connection's handshake: stat only, reload
            # when a file changed; a broken new file keeps the current configuration.
            stamp = _stamp(files)
            if stamp == state["stamp"]:
                return None
            try:
                config = self._configuration()
            except SecurityConfigError as err:
                log.warning("keeping the current certificate: %s", err)
                return None
            state["stamp"] = stamp
            log.info("serving certificate reloaded from %s", self.cert_file)
            return config

        return grpc.dynamic_ssl_server_credentials(
            initial, fetch, require_client_authentication=True
        )


@dataclass(frozen=True)
class ServingSecurity:
    """How a Steward server secures its port and decides who may do what."""

    tls: ServerTLS | None = None
    """mTLS files; None serves plaintext, which needs :attr:`insecure_plaintext`."""
    insecure_plaintext: bool = False
    """Serve without TLS (development only)."""
    authorization: AuthorizationMode = "RBAC"
    """RBAC: authenticate every caller and ask the API server; AlwaysAllow: neither."""
    token_audience: str = DEFAULT_AUDIENCE
    """The audience bearer tokens must be issued for."""
    cache_ttl: float = 10.0
    """Seconds a TokenReview's or SubjectAccessReview's answer is reused."""
    recheck_interval: float = 60.0
    """Seconds between re-authorizations of a long stream (Watch, Session)."""

    def validate(self) -> None:
        """Raises SecurityConfigError unless the settings make a server that can start."""
        if self.tls is None and not self.insecure_plaintext:
            raise SecurityConfigError(
                "no TLS files: give --tls-cert-file, --tls-key-file and --client-ca-file, or "
                "--insecure-plaintext to serve without TLS (development only)"
            )
        if self.tls is not None and self.insecure_plaintext:
            raise SecurityConfigError("--insecure-plaintext and TLS files exclude each other")
        if self.authorization not in ("RBAC", "AlwaysAllow"):
            raise SecurityConfigError(
                f"--authorization-mode is RBAC or AlwaysAllow, got {self.authorization!r}"
            )
        if self.cache_ttl < 0 or self.recheck_interval <= 0:
            raise SecurityConfigError("--auth-cache-ttl >= 0 and --auth-recheck-interval > 0")

    def bind(self, server: grpc.aio.Server, address: str) -> int:
        """Add the listening port to ``server``; 0 when it cannot be bound."""
        self.validate()
        if self.tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, self.tls.credentials())


DEVELOPMENT = ServingSecurity(insecure_plaintext=True, authorization="AlwaysAllow")
"""Plaintext, everyone allowed: for tests and local experiments, never a deployment."""


def add_serving_arguments(parser: argparse.ArgumentParser, env_prefix: str) -> None:
    """The security flags of a server; each defaults to ``$<env_prefix>_<FLAG>``."""

    def env(name: str, default: str | None = None) -> str | None:
        return os.environ.get(f"{env_prefix}_{name}", default)

    group = parser.add_argument_group("security (see the README: Security)")
    group.add_argument(
        "--tls-cert-file",
        default=env("TLS_CERT_FILE"),
        help="serving certificate (PEM), re-read when it changes",
    )
    group.add_argument("--tls-key-file", default=env("TLS_KEY_FILE"), help="its private key (PEM)")
    group.add_argument(
        "--client-ca-file",
        default=env("CLIENT_CA_FILE"),
        help="CA bundle (PEM) that signs the client certificates callers must present",
    )
    group.add_argument(
        "--insecure-plaintext",
        action="store_true",
        default=env("INSECURE_PLAINTEXT", "") in ("1", "true"),
        help="serve without TLS (development only; refused otherwise)",
    )
    group.add_argument(
        "--authorization-mode",
        choices=("RBAC", "AlwaysAllow"),
        default=env("AUTHORIZATION_MODE", "RBAC"),
        help="RBAC (default): authenticate callers and ask the API server with "
        "SubjectAccessReviews; AlwaysAllow: anyone may do anything (development only)",
    )
    group.add_argument(
        "--token-audience",
        default=env("TOKEN_AUDIENCE", DEFAULT_AUDIENCE),
        help=f"audience bearer tokens must carry (default {DEFAULT_AUDIENCE})",
    )
    group.add_argument(
        "--auth-cache-ttl",
        type=float,
        default=float(env("AUTH_CACHE_TTL", "10") or 10),
        help="seconds token and access reviews are cached (default 10)",
    )
    group.add_argument(
        "--auth-recheck-interval",
        type=float,
        default=float(env("AUTH_RECHECK_INTERVAL", "60") or 60),
        help="seconds between re-authorizations of open streams (default 60)",
    )


def serving_from_args(args: argparse.Namespace) -> ServingSecurity:
    """The :class:`ServingSecurity` of parsed :func:`add_serving_arguments` flags.

    Raises:
        SecurityConfigError: some but not all TLS files, or none without plaintext.
    """
    files = (args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    if any(files) and not all(files):
        raise SecurityConfigError(
            "TLS needs all of --tls-cert-file, --tls-key-file and --client-ca-file"
        )
    security = ServingSecurity(
        tls=ServerTLS(*files) if all(files) else None,
        insecure_plaintext=args.insecure_plaintext,
        authorization=args.authorization_mode,
        token_audience=args.token_audience,
        cache_ttl=args.auth_cache_ttl,
        recheck_interval=args.auth_recheck_interval,
    )
    security.validate()
    if security.tls is not None:
        security.tls.credentials()  # fail now, with the file's name, not at the first call
    return security


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
        stamp = _stamp((self.path,))
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
            root_certificates=_read(self.ca_file, "server CA"),
            private_key=_read(self.key_file, "client key"),
            certificate_chain=_read(self.cert_file, "client certificate"),
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
"""Dial without TLS: for tests against :data:`DEVELOPMENT` servers."""


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """The security flags of a client; each defaults to ``$STEWARD_<FLAG>``."""
    env = os.environ.get
    group = parser.add_argument_group("security (see the README: Security)")
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


# Identity and authorization -------------------------------------------------------------
@dataclass(frozen=True)
class Identity:
    """Who is calling, as the API server would name them."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    via: str = ""
    """How it was established: ``token``, ``certificate`` or ``anonymous``."""

    def __str__(self) -> str:
        return self.user


ANONYMOUS = Identity("system:anonymous", ("system:unauthenticated",), via="anonymous")


class AuthError(Exception):
    """A refusal with the gRPC status it should end the call with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Cached:
    value: Any
    expires: float


@dataclass
class _TTLCache:
    ttl: float
    limit: int = 10_000
    _items: dict[Any, _Cached] = field(default_factory=dict)

    def get(self, key: Any) -> Any:
        hit = self._items.get(key)
        if hit is None:
            return None
        if hit.expires < time.monotonic():
            del self._items[key]
            return None
        return hit.value

    def put(self, key: Any, value: Any, ttl: float | None = None) -> None:
        if len(self._items) >= self.limit:
            now = time.monotonic()
            self._items = {k: v for k, v in self._items.items() if v.expires >= now}
            if len(self._items) >= self.limit:
                self._items.clear()
        self._items[key] = _Cached(value, time.monotonic() + (self.ttl if ttl is None else ttl))


class Guard:
    """Authenticates callers and authorizes what they ask, for one server.

    Uses ``client`` (the server's own identity, which needs ``create`` of
    ``tokenreviews`` and ``subjectaccessreviews``) for the reviews.
    """

    def __init__(self, security: ServingSecurity, client: KubeClient | None) -> None:
        self.security = security
        self.client = client
        self.enabled = security.authorization == "RBAC"
        if self.enabled and client is None:
            raise SecurityConfigError("RBAC authorization needs an API server client")
        self._tokens = _TTLCache(security.cache_ttl)
        self._certs = _TTLCache(3600.0)
        self._decisions = _TTLCache(security.cache_ttl)
        self.reviews = {"token": 0, "access": 0}
        """TokenReviews and SubjectAccessReviews sent (the caches' misses)."""

    # Authentication -----------------------------------------------------------------------
    async def identify(self, context: grpc.aio.ServicerContext[Any, Any]) -> Identity:
        """The caller of ``context``.

        Raises:
            AuthError: UNAUTHENTICATED (no or a refused credential) or UNAVAILABLE (the
            API server cannot review it now).
        """
        if not self.enabled:
            return ANONYMOUS
        token = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                scheme, _, rest = value.partition(" ")
                if scheme.lower() != "bearer" or not rest.strip():
                    raise AuthError(
                        grpc.StatusCode.UNAUTHENTICATED,
                        "the authorization metadata is not 'Bearer <token>'",
                    )
                token = rest.strip()
        if token:
            return await self._review_token(token)
        auth = context.auth_context() or {}
        pems = auth.get("x509_pem_cert")
        for pem in pems or ():
            return self._certificate_identity(pem)
        raise AuthError(
            grpc.StatusCode.UNAUTHENTICATED,
            "no credentials: present a client certificate (mutual TLS) or a bearer token "
            f"for the audience {self.security.token_audience!r}",
        )

    def _certificate_identity(self, pem: bytes) -> Identity:
        key = hashlib.sha256(pem).digest()
        cached = self._certs.get(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError as err:
            raise AuthError(
                grpc.StatusCode.UNAUTHENTICATED, f"undecodable client certificate: {err}"
            ) from err
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        user = str(names[0].value) if names else ""
        if not user:
            raise AuthError(
                grpc.StatusCode.UNAUTHENTICATED, "the client certificate has no common name"
            )
        orgs = tuple(
            str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        )
        identity = Identity(user, (*orgs, "system:authenticated"), via="certificate")
        self._certs.put(key, identity)
        return identity

    async def _review_token(self, token: str) -> Identity:
        key = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(key)
        if isinstance(cached, AuthError):
            raise cached
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        assert self.client is not None
        self.reviews["token"] += 1
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.security.token_audience]},
        }
        try:
            review = await self.client.arequest(
                "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body
            )
        except ApiUnavailableError as err:
            log.warning("cannot review a caller's token: %s", err)
            raise AuthError(
                grpc.StatusCode.UNAVAILABLE, f"cannot review the caller's token now: {err}"
            ) from err
        except ApiStatusError as err:
            # Most likely this server's own identity may not create tokenreviews: say so
            # where the operator looks, not only to the refused caller.
            log.warning("cannot review a caller's token: HTTP %d: %s", err.status, err)
            raise AuthError(
                grpc.StatusCode.UNAVAILABLE,
                f"the API server refused to review the caller's token: {err}",
            ) from err
        status = review.get("status") or {}
        if not status.get("authenticated"):
            refused = AuthError(
                grpc.StatusCode.UNAUTHENTICATED,
                "the bearer token was not accepted: "
                f"{status.get('error') or 'invalid, expired or for another audience'}",
            )
            self._tokens.put(key, refused, ttl=min(self.security.cache_ttl, 2.0))
            raise refused
        user = status.get("user") or {}
        identity = Identity(
            str(user.get("username", "")),
            tuple(user.get("groups") or ()),
            str(user.get("uid", "")),
            tuple(sorted((k, tuple(v)) for k, v in (user.get("extra") or {}).items())),
            via="token",
        )
        self._tokens.put(key, identity)
        return identity

    # Authorization ------------------------------------------------------------------------
    async def allowed(
        self,
        identity: Identity,
        verb: str,
        group: str,
        resource: str,
        namespace: str = "",
        name: str = "",
    ) -> tuple[bool, str]:
        """Whether ``identity`` may ``verb`` the resource, and the API server's reason.

        Raises:
            AuthError: UNAVAILABLE when the API server cannot answer.
        """
        if not self.enabled:
            return True, "authorization is off (AlwaysAllow)"
        key = (identity, verb, group, resource, namespace, name)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        assert self.client is not None
        self.reviews["access"] += 1
        attributes = {"verb": verb, "group": group, "resource": resource}
        if namespace:
            attributes["namespace"] = namespace
        if name:
            attributes["name"] = name
        spec: dict[str, Any] = {
            "user": identity.user,
            "groups": list(identity.groups),
            "resourceAttributes": attributes,
        }
        if identity.uid:
            spec["uid"] = identity.uid
        if identity.extra:
            spec["extra"] = {k: list(v) for k, v in identity.extra}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        try:
            review = await self.client.arequest(
                "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body
            )
        except ApiError as err:
            http = f"HTTP {err.status}: " if isinstance(err, ApiStatusError) else ""
            log.warning("cannot review %s's access: %s%s", identity, http, err)
            raise AuthError(
                grpc.StatusCode.UNAVAILABLE, f"cannot review the caller's access now: {err}"
            ) from err
        status = review.get("status") or {}
        decision = (bool(status.get("allowed")), str(status.get("reason", "")))
        self._decisions.put(key, decision)
        return decision

    async def require(
        self,
        identity: Identity,
        verb: str,
        group: str,
        resource: str,
        namespace: str = "",
        name: str = "",
    ) -> None:
        """Raises AuthError PERMISSION_DENIED unless :meth:`allowed`, saying what was asked."""
        ok, reason = await self.allowed(identity, verb, group, resource, namespace, name)
        if ok:
            return
        what = f"{resource}.{group}" if group else resource
        where = f" in namespace {namespace!r}" if namespace else " cluster-wide"
        named = f" {name!r}" if name else ""
        because = f": {reason}" if reason else ""
        raise AuthError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{identity.user} ({identity.via}) may not {verb} {what}{named}{where}{because}",
        )
