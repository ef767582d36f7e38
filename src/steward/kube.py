"""A small raw JSON client of kube-apiserver, shared by every Steward service.

It reads the API server's address and credentials from a kubeconfig or the in-cluster
service account (``kubernetes.config`` reads kubeconfig files, nothing else) and speaks JSON with
urllib3 and orjson: no kubernetes client model objects anywhere on a hot path.

# Errors
:class:`ApiUnavailableError` when the API server cannot be reached, times out or answers
5xx/429 (worth retrying); :class:`NotFoundError` for 404, :class:`ConflictError` for 409
(the object changed since it was read, or already exists), :class:`GoneError` for 410
(a resource version compacted away), :class:`ApiStatusError` for any other error answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import urllib3
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from urllib3.exceptions import HTTPError as Urllib3Error

from steward import flowcontrol
from steward.flowcontrol import TokenBucket
from steward.transport import Transport, TransportError, ssl_context

_T = TypeVar("_T")

log = logging.getLogger(__name__)

_tracer = trace.get_tracer("steward.kube")
_propagator = TraceContextTextMapPropagator()


def route(path: str) -> str:
    """A low-cardinality name for an API path: namespace and object name replaced, e.g.
    ``/api/v1/namespaces/{namespace}/pods/{name}/status``."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    base = 2 if parts[:1] == ["api"] else 3
    out = parts[:base]
    rest = parts[base:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        out += ["namespaces", "{namespace}"]
        rest = rest[2:]
    if len(rest) >= 2:
        rest = [rest[0], "{name}", *rest[2:]]
    return "/" + "/".join(out + rest)


class ApiError(Exception):
    """Base of the errors of this module."""


class ApiUnavailableError(ApiError):
    """The API server cannot be reached (or did not answer in time)."""


class FencedError(ApiUnavailableError):
    """A write refused before it was sent: this instance does not hold its controller's
    lease (see :attr:`KubeClient.write_fence`). Retryable: the active instance will."""


class ApiStatusError(ApiError):
    """The API server answered with an error status: its HTTP status, and from the Status
    object it sent, the message, the reason (``Forbidden``, ``AlreadyExists``) and the
    reasons of its causes (``details.causes[].reason``, e.g. ``NamespaceTerminating``)."""

    def __init__(
        self, status: int, message: str, reason: str = "", causes: tuple[str, ...] = ()
    ) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason
        self.causes = causes

    def has_cause(self, cause: str) -> bool:
        """Whether the Status names ``cause`` among its causes (apimachinery's
        ``HasStatusCause``)."""
        return cause in self.causes


NAMESPACE_TERMINATING = "NamespaceTerminating"
"""The Status cause of a create the NamespaceLifecycle admission plugin refused because
the namespace is being deleted (``ApiStatusError.has_cause``)."""


def error_message(err: BaseException) -> str:
    """What went wrong, for an Event: the API server's message for a refusal, else the
    error's text."""
    return err.message if isinstance(err, ApiStatusError) else str(err)


class GoneError(ApiStatusError):
    """HTTP 410: the requested resource version is too old (compacted)."""


class ConflictError(ApiStatusError):
    """HTTP 409: the object changed since it was read (or already exists)."""


class NotFoundError(ApiStatusError):
    """HTTP 404."""


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one API server: URL, TLS files and credentials."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    token: Callable[[], str | None] | None = None
    """Returns the Authorization header value (e.g. ``Bearer …``), refreshed as needed."""


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the kubelet mounts a pod's service account token (``token``) and the cluster's
CA bundle (``ca.crt``)."""


class _TokenFile:
    """The ``Authorization`` value from a projected service account token file, re-read
    every ``reread_after`` seconds: the kubelet rotates the token in place (at 80 % of
    its lifetime), so a long-running process must not keep the first one. A failed
    re-read keeps the last token (the API server's 401 then says what is wrong)."""

    def __init__(self, path: str, reread_after: float) -> None:
        self.path = path
        self.reread_after = reread_after
        self._lock = threading.Lock()
        self._value = self._read()
        self._read_at = time.monotonic()

    def _read(self) -> str:
        with open(self.path, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ApiError(f"the service account token file {self.path} is empty")
        return f"Bearer {token}"

    def __call__(self) -> str:
        with self._lock:
            if time.monotonic() - self._read_at >= self.reread_after:
                self._read_at = time.monotonic()
                try:
                    self._value = self._read()
                except (OSError, ApiError) as err:
                    log.warning("keeping the previous service account token: %s", err)
            return self._value


def incluster_access(
    environ: Mapping[str, str] | None = None,
    directory: str | None = None,
    *,
    reread_after: float = 60.0,
) -> ClusterAccess:
    """The API server as a pod reaches it: ``https://$KUBERNETES_SERVICE_HOST:
    $KUBERNETES_SERVICE_PORT``, verified with ``<directory>/ca.crt``, authenticated by the
    bearer token in ``<directory>/token`` (``directory`` defaults to
    :data:`SERVICE_ACCOUNT_DIR`; the token is re-read every ``reread_after`` seconds, as
    client-go does, so rotated tokens are picked up).

    Raises:
        ApiError: the variables are unset or empty, or the token or CA file is missing or
            empty; the message names what is missing.
    """
    env = os.environ if environ is None else environ
    directory = SERVICE_ACCOUNT_DIR if directory is None else directory
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ApiError(
            "no in-cluster configuration: KUBERNETES_SERVICE_HOST and "
            "KUBERNETES_SERVICE_PORT must both be set (they are in a pod)"
        )
    ca_file = os.path.join(directory, "ca.crt")
    try:
        token = _TokenFile(os.path.join(directory, "token"), reread_after)
        with open(ca_file, "rb") as f:
            if not f.read().strip():
                raise ApiError(f"the cluster CA file {ca_file} is empty")
    except OSError as err:
        raise ApiError(
            f"no in-cluster configuration: cannot read the service account's "
            f"{err.filename}: {err.strerror} (is automountServiceAccountToken off?)"
        ) from err
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return ClusterAccess(host=f"https://{host}:{port}", ca_file=ca_file, token=token)


def load_access(kubeconfig: str | None = None, context: str | None = None) -> ClusterAccess:
    """Read the API server's address and credentials.

    With ``kubeconfig``, from that file; otherwise in-cluster (service account, see
    :func:`incluster_access`) when ``KUBERNETES_SERVICE_HOST`` is set, as in every pod,
    else from ``$KUBECONFIG`` or ``~/.kube/config``.

    The ``kubernetes`` package (its kubeconfig loader) is imported only to read a
    kubeconfig: a pod never loads it.

    Raises:
        ApiError: no usable configuration was found; the message says where it looked.
    """
    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return incluster_access()
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    try:
        if kubeconfig:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                context=context, client_configuration=cfg
            )
    except (k8s_config.ConfigException, OSError, TypeError, ValueError) as err:
        where = kubeconfig or "in-cluster config, $KUBECONFIG or ~/.kube/config"
        raise ApiError(f"cannot load the API server configuration from {where}: {err}") from err

    def token() -> str | None:
        # The kubeconfig loader stores a token (static, exec plugin, OIDC) under
        # "BearerToken", already prefixed; "authorization" is the older key. Asked the
        # way the kubernetes client asks, so its refresh hook runs first.
        value: str | None = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        return value

    return ClusterAccess(
        host=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        verify=bool(cfg.verify_ssl),
        tls_server_name=getattr(cfg, "tls_server_name", None),
        token=token,
    )


_sending = threading.local()
"""Per sending thread: the write fence of the request being sent (``fence``), asked once
more by the connection just before the request's bytes leave (:class:`_FenceAtSend`)."""


class _FencedAtSend(Exception):
    """The write fence said no once the connection was ready, before anything was sent."""


class _FenceAtSend:
    """Mixed into urllib3's connections: asks the sending thread's fence in ``request``."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> None:
        # Connecting (and the TLS handshake) happens before this: a process paused in the
        # middle of them is asked again here, not only where the request started.
        fence = getattr(_sending, "fence", None)
        if fence is not None and not fence():
            raise _FencedAtSend
        super().request(method, url, *args, **kwargs)  # type: ignore[misc]


class _FencedConnection(_FenceAtSend, urllib3.connection.HTTPConnection):
    pass


class _FencedHTTPSConnection(_FenceAtSend, urllib3.connection.HTTPSConnection):
    pass


class _FencedPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _FencedConnection


class _FencedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _FencedHTTPSConnection


def pool_manager(access: ClusterAccess, *, num_pools: int, maxsize: int) -> urllib3.PoolManager:
    """A urllib3 connection pool set up with ``access``'s TLS files (no retries: callers
    decide what to retry)."""
    kwargs: dict[str, Any] = {
        "num_pools": num_pools,
        "maxsize": maxsize,
        "cert_reqs": "CERT_REQUIRED" if access.verify else "CERT_NONE",
        "retries": False,
    }
    if access.ca_file:
        kwargs["ca_certs"] = access.ca_file
    if access.cert_file:
        kwargs["cert_file"] = access.cert_file
    if access.key_file:
        kwargs["key_file"] = access.key_file
    if access.tls_server_name:
        kwargs["server_hostname"] = access.tls_server_name
    manager = urllib3.PoolManager(**kwargs)
    manager.pool_classes_by_scheme = {"http": _FencedPool, "https": _FencedHTTPSPool}
    return manager


WriteObserver = Callable[[str, str, Any, dict[str, Any]], None]
"""Told ``(method, path, body sent, object answered)`` of each completed write."""


class KubeClient:
    """A thread-safe raw JSON client of one API server; ``a…`` methods run on its threads."""

    def __init__(
        self,
        access: ClusterAccess,
        *,
        timeout: float = 10.0,
        user_agent: str = "steward",
        workers: int = 4,
        rate_limiter: TokenBucket | None = None,
    ) -> None:
        self.access = access
        self.user_agent = user_agent
        self.timeout = timeout
        self.rate_limiter = rate_limiter
        """When set, every request takes a token from it first (client-go's
        ``--kube-api-qps``/``--kube-api-burst``, see :mod:`steward.flowcontrol`)."""
        self._host = access.host.split("://", 1)[-1]
        server = urllib3.util.parse_url(access.host)
        self._server_attributes: dict[str, str | int] = {
            "server.address": server.host or "",
            "server.port": server.port or (443 if server.scheme == "https" else 80),
        }
        # One pooled connection per thread at least: past ``maxsize`` urllib3 opens (and
        # then discards) a new TLS connection per request.
        self._pool = pool_manager(access, num_pools=2, maxsize=max(8, workers))
        self._async: Transport | None = None
        self._max_idle = max(8, workers)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")
        self.write_fence: Callable[[], bool] | None = None
        """When set, every write (any method but GET) first asks it, on the thread that
        sends the request, and is refused with :class:`FencedError` when it answers
        False: a controller instance sets it to "I hold the lease", so a process that was
        paused past its renew deadline never writes after it resumes, not even a write
        that was already queued (see ``steward.runtime.controller.Controller.fence``)."""
        self.fenced_writes = 0
        """Writes refused by :attr:`write_fence`."""
        self.write_observer: WriteObserver | None = None
        """When set, told of every write :meth:`arequest` completed, on the event loop, as
        soon as the API server answered: a controller's mirror uses it to know which
        versions of an object are older than this controller's own writes (see
        ``steward.runtime.mirror.Mirror.written``)."""

    def with_own_rate_limit(self) -> KubeClient:
        """A client of the same server and identity, fenced and observed as this one, whose
        requests take tokens from a bucket of their own of the same qps and burst. client-go
        gives each client made from one rest config its own limiter, so a controller that
        reads through several (kube-controller-manager's HPA controller: its clientset, the
        scale client and one client per metrics API) has that many buckets; this is how a
        Steward controller has the same. It shares this client's connection pool and
        threads (close this one only) and opens its own asynchronous connections."""
        twin = copy.copy(self)
        if self.rate_limiter is not None:
            twin.rate_limiter = TokenBucket(self.rate_limiter.qps, self.rate_limiter.burst)
        twin._async = None
        return twin

    def fenced(
        self, fence: Callable[[], bool], observer: WriteObserver | None = None
    ) -> KubeClient:
        """A client of the same server, identity, rate limiter, connections and threads
        whose writes are fenced by ``fence`` and told to ``observer`` (see
        :attr:`write_fence` and :attr:`write_observer`); this client is left as it is.
        Close this one only: the derived client shares its pools."""
        twin = copy.copy(self)
        twin.write_fence = fence
        twin.write_observer = observer
        twin.fenced_writes = 0
        twin._async = self._transport()  # one set of connections for both
        return twin

    def close(self) -> None:
        """Drop pooled connections and threads; calls in flight may fail."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._pool.clear()
        if self._async is not None:
            self._async.close()

    def _fenced(self, method: str, path: str) -> FencedError:
        self.fenced_writes += 1
        return FencedError(
            f"{method} {route(path)} not sent: this instance does not hold its "
            "controller's lease (fenced)"
        )

    def _headers(self, content_type: str, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": self.user_agent,
            **(extra or {}),
        }
        if self.access.token is not None:
            token = self.access.token()
            if token:
                headers["Authorization"] = token
        return headers

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | list[Any] | None = None,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send one request and decode the JSON answer (see the module docs for errors);
        blocking, through urllib3 (:meth:`arequest` is the event loop's way).

        ``content_type`` selects a patch flavour for PATCH (e.g.
        ``application/merge-patch+json``); ``headers`` are added (e.g. ``traceparent``).
        """
        sent = self._headers(content_type, headers)
        if self.rate_limiter is not None:
            waited = self.rate_limiter.wait()
            flowcontrol.RATE_LIMITER_DURATION.labels(method, self._host).observe(waited)
        # The fence is asked after the token: a long wait must not carry an old answer.
        fence = self.write_fence if method != "GET" else None
        if fence is not None and not fence():
            raise self._fenced(method, path)
        payload = orjson.dumps(body) if body is not None else None
        # Asked again on this thread once the connection is ready, just before the bytes
        # leave: a pause while connecting must not let the write through after it.
        _sending.fence = fence
        started = time.monotonic()
        try:
            response = self._pool.request(
                method,
                self.access.host + path,
                body=payload,
                headers=sent,
                timeout=urllib3.Timeout(connect=min(self.timeout, 5.0), read=self.timeout),
                redirect=False,
            )
        except _FencedAtSend:
            raise self._fenced(method, path) from None
        except (Urllib3Error, OSError) as err:
            flowcontrol.REQUESTS.labels("<error>", method, self._host).inc()
            raise ApiUnavailableError(
                f"cannot reach the API server at {self.access.host}: {err}"
            ) from err
        finally:
            _sending.fence = None
        data = response.data
        flowcontrol.observe(method, self._host, response.status, started, payload, data)
        return _decode(response.status, data)

    async def arun(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking call on this client's threads."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def arequest(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | list[Any] | None = None,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """:meth:`request` on the event loop (:mod:`steward.transport`: no thread), as a
        client span of the current trace whose context is sent as ``traceparent`` (unless
        ``headers`` carries one), so the API server's own spans join the trace. The write
        fence is asked after the rate limiter's token and once more with the connection
        ready, just before the bytes leave."""
        with _tracer.start_as_current_span(
            f"{method} {route(path)}",
            kind=trace.SpanKind.CLIENT,
            # OpenTelemetry's HTTP client attributes (url.full without the query's values).
            attributes={
                "http.request.method": method,
                "url.full": self.access.host.rstrip("/") + path.split("?", 1)[0],
                **self._server_attributes,
            },
        ) as span:
            extra = dict(headers or {})
            if "traceparent" not in extra:
                _propagator.inject(extra)
            try:
                answer = await self._asend(method, path, body, content_type, extra)
            except ApiStatusError as err:
                span.set_attribute("http.response.status_code", err.status)
                span.set_status(trace.StatusCode.ERROR, err.message)
                raise
            observer = self.write_observer
            if observer is not None and method != "GET":
                try:
                    observer(method, path, body, answer)
                except Exception:  # an observer's bug must not turn a write into an error
                    log.exception("write observer failed on %s %s", method, route(path))
            return answer

    async def _asend(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | list[Any] | None,
        content_type: str,
        extra: dict[str, str],
    ) -> dict[str, Any]:
        sent = self._headers(content_type, extra)
        if self.rate_limiter is not None:
            delay = self.rate_limiter.reserve()
            if delay > 0:
                await asyncio.sleep(delay)
            flowcontrol.RATE_LIMITER_DURATION.labels(method, self._host).observe(delay)
        fence = self.write_fence if method != "GET" else None

        def ask_fence() -> None:
            if fence is not None and not fence():
                raise self._fenced(method, path)

        ask_fence()
        payload = orjson.dumps(body) if body is not None else None
        started = time.monotonic()
        try:
            answer = await self._transport().request(
                method, path, sent, payload, before_send=ask_fence if fence else None
            )
        except TransportError as err:
            flowcontrol.REQUESTS.labels("<error>", method, self._host).inc()
            raise ApiUnavailableError(
                f"cannot reach the API server at {self.access.host}: {err}"
            ) from err
        flowcontrol.observe(method, self._host, answer.status, started, payload, answer.body)
        return _decode(answer.status, answer.body)

    def _transport(self) -> Transport:
        if self._async is None:
            access = self.access
            context = None
            if access.host.startswith("https:"):
                context = ssl_context(
                    access.ca_file, access.cert_file, access.key_file, verify=access.verify
                )
            self._async = Transport(
                access.host,
                context,
                server_hostname=access.tls_server_name,
                timeout=self.timeout,
                connect_timeout=min(self.timeout, 5.0),
                max_idle=self._max_idle,
            )
        return self._async

    def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` unless it exists."""
        try:
            self.request("GET", f"/api/v1/namespaces/{namespace}")
        except NotFoundError:
            with contextlib.suppress(ConflictError):
                self.request(
                    "POST",
                    "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )


def status_message(body: bytes, limit: int = 300) -> str:
    """What an error answer says: its Status ``message``, else its first bytes."""
    try:
        doc = orjson.loads(body)
        if isinstance(doc, dict) and doc.get("message"):
            return str(doc["message"])
    except orjson.JSONDecodeError:
        pass
    return body[:limit].decode("utf-8", "replace")


def status_reasons(body: bytes) -> tuple[str, tuple[str, ...]]:
    """An error answer's Status ``reason`` and the reasons of its ``details.causes``
    (empty when the body is no Status)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", ()
    if not isinstance(doc, dict):
        return "", ()
    details = doc.get("details")
    if not isinstance(details, dict):
        details = {}
    causes = tuple(
        str(c.get("reason") or "") for c in details.get("causes") or () if isinstance(c, dict)
    )
    return str(doc.get("reason") or ""), causes


def _decode(status: int, data: bytes) -> dict[str, Any]:
    """The JSON answer, or the error its status means (see the module docs)."""
    if status >= 300:
        message = status_message(data)
        reason, causes = status_reasons(data)
        if status == 409:
            raise ConflictError(409, message, reason, causes)
        if status == 404:
            raise NotFoundError(404, message, reason, causes)
        if status >= 500 or status == 429:
            raise ApiUnavailableError(f"API server answered HTTP {status}: {message}")
        raise ApiStatusError(status, message, reason, causes)
    try:
        decoded: dict[str, Any] = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError as err:
        raise ApiStatusError(status, f"undecodable body: {err}") from err
    return decoded
