"""The serving side of Steward's security: TLS, caller identity and authorization.

# Transport
Every connection between Steward's services is mutual TLS: the informer and the manager
serve with a certificate and key from files and require a client certificate signed by
``--client-ca-file``; controllers dial with the server CA and their own certificate and
key. The server re-reads its files when they change (checked at each new connection),
so a rotated certificate is served without a restart (the client side is
:mod:`steward.security`). Plaintext is refused unless ``--insecure-plaintext`` says so
explicitly, for development.

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
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from steward.kube import ApiError, ApiStatusError, ApiUnavailableError, KubeClient
from steward.security import SecurityConfigError, file_stamps, read_pem

__all__ = [
    "ANONYMOUS",
    "DEFAULT_AUDIENCE",
    "DEVELOPMENT",
    "STEWARD_GROUP",
    "AuthError",
    "AuthorizationMode",
    "Guard",
    "Identity",
    "SecurityConfigError",
    "ServerTLS",
    "ServingSecurity",
    "add_serving_arguments",
    "serving_from_args",
]

log = logging.getLogger(__name__)

STEWARD_GROUP = "steward.io"
"""The API group of the manager's authorization checks: resource ``controllers``, the
controller's name as the resource name, verbs ``register`` (hold a Session under that
name), ``get``/``list`` (read the registry), ``enable``/``disable`` (operator RPCs).
Nothing of this group is served by the API server; RBAC rules name it all the same."""

DEFAULT_AUDIENCE = "steward"
AuthorizationMode = Literal["RBAC", "AlwaysAllow"]


# Server ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerTLS:
    """The serving certificate, its key and the CA that signs client certificates."""

    cert_file: str
    key_file: str
    client_ca_file: str

    def _configuration(self) -> Any:
        cert = read_pem(self.cert_file, "serving certificate")
        key = read_pem(self.key_file, "serving key")
        ca = read_pem(self.client_ca_file, "client CA")
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that require a client certificate and pick up changed files.

        Raises:
            SecurityConfigError: a file cannot be read or holds no PEM data.
        """
        files = (self.cert_file, self.key_file, self.client_ca_file)
        state = {"stamp": file_stamps(files)}
        initial = self._configuration()

        def fetch() -> Any:
            # gRPC calls this before every new connection's handshake: stat only, reload
            # when a file changed; a broken new file keeps the current configuration.
            stamp = file_stamps(files)
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

    group = parser.add_argument_group("security (see docs/security.md)")
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
