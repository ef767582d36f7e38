"""A small raw REST client of kube-apiserver: discovery, paginated LIST and streaming WATCH.

It speaks JSON with urllib3 and decodes with orjson; it never builds the kubernetes
client's model objects (``kubernetes.config`` is used only to read a kubeconfig or the
in-cluster service account: host, TLS files and token).

# Errors
Blocking calls raise :class:`ApiUnavailableError` when the API server cannot be reached
(connection refused or reset, timeouts, TLS failures), :class:`GoneError` for HTTP 410
(or a watch ERROR event with code 410: the resource version is compacted away),
:class:`ApiStatusError` for any other non-2xx answer, and
:class:`UnknownResourceError` for a type the API server does not serve. Coroutines
(``a…``) run the blocking call on the client's own thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

import orjson
import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error

from steward import flowcontrol
from steward.flowcontrol import TokenBucket
from steward.informer.store import ResourceTypeName
from steward.kube import (
    ApiError,
    ApiStatusError,
    ApiUnavailableError,
    ClusterAccess,
    GoneError,
    pool_manager,
    status_message,
)

_T = TypeVar("_T")

_DISCOVERY_REFRESH_INTERVAL = 1.0
"""A group/version is fetched again on a miss at most this often (seconds)."""


class UnknownResourceError(ApiError):
    """The API server does not serve this group/version/resource (or cannot list/watch it)."""


@dataclass(frozen=True)
class ResourceInfo:
    """What discovery says about one resource type."""

    name: ResourceTypeName
    namespaced: bool
    kind: str
    verbs: frozenset[str]

    @property
    def api_version(self) -> str:
        if self.name.group:
            return f"{self.name.group}/{self.name.version}"
        return self.name.version

    def path(self, namespace: str = "") -> str:
        """The collection's URL path, across namespaces when ``namespace`` is empty."""
        base = f"/apis/{self.api_version}" if self.name.group else f"/api/{self.name.version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{namespace}/{self.name.resource}"
        return f"{base}/{self.name.resource}"


@dataclass
class ListPage:
    """One page of a LIST: objects as (raw JSON, decoded) pairs, plus where to go on."""

    items: list[tuple[bytes, dict[str, Any]]]
    resource_version: str
    continue_token: str


class WatchStream:
    """One open WATCH: iterate for lists of decoded events; :meth:`close` from any thread.

    Iteration ends when the API server ends the watch (its timeout). It raises
    :class:`ApiUnavailableError` when the connection breaks, unless :meth:`close` was
    called, in which case it just ends.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        # ValueError: not connected yet; RuntimeError: the stream already ended.
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            self._response.shutdown()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        buffer = b""
        loads = orjson.loads
        try:
            for chunk in self._response.stream(65536):
                if self._closed.is_set():
                    return
                buffer += chunk
                if b"\n" not in chunk:
                    continue
                *lines, buffer = buffer.split(b"\n")
                events = [loads(line) for line in lines if line.strip()]
                if events:
                    yield events
        except (Urllib3Error, OSError, ValueError) as err:
            if self._closed.is_set():
                return
            raise ApiUnavailableError(f"watch stream broke: {err}") from err
        finally:
            self._response.release_conn()


class ApiClient:
    """A thread-safe raw client of one API server (see the module docs for errors)."""

    def __init__(
        self,
        access: ClusterAccess,
        *,
        timeout: float = 30.0,
        workers: int = 8,
        rate_limiter: TokenBucket | None = None,
    ) -> None:
        self.access = access
        self.timeout = timeout
        self.rate_limiter = rate_limiter
        """When set, every request (each LIST page, each WATCH) takes a token from it
        first, as client-go's informers do (see :mod:`steward.flowcontrol`)."""
        self._host = access.host.split("://", 1)[-1]
        self._pool = pool_manager(access, num_pools=4, maxsize=64)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="apiclient")
        self._discovery: dict[tuple[str, str], dict[str, ResourceInfo]] = {}
        self._discovery_fetched: dict[tuple[str, str], float] = {}
        self._discovery_lock = threading.Lock()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._pool.clear()

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking call of this client on its thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    # Plain requests -------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "steward-informer"}
        if self.access.token is not None:
            token = self.access.token()
            if token:
                headers["Authorization"] = token
        return headers

    def _url(self, path: str, query: dict[str, str] | None) -> str:
        url = self.access.host + path
        if query:
            url += "?" + urlencode(query)
        return url

    def _open(
        self, path: str, query: dict[str, str] | None, *, stream: bool, read_timeout: float
    ) -> urllib3.BaseHTTPResponse:
        if self.rate_limiter is not None:
            waited = self.rate_limiter.wait()
            flowcontrol.RATE_LIMITER_DURATION.labels("GET", self._host).observe(waited)
        started = time.monotonic()
        try:
            response = self._pool.request(
                "GET",
                self._url(path, query),
                headers=self._headers(),
                preload_content=not stream,
                timeout=urllib3.Timeout(connect=min(self.timeout, 10.0), read=read_timeout),
                redirect=False,
            )
        except (Urllib3Error, OSError) as err:
            flowcontrol.REQUESTS.labels("<error>", "GET", self._host).inc()
            raise ApiUnavailableError(
                f"cannot reach the API server at {self.access.host}: {err}"
            ) from err
        if stream:  # a watch: its size is the stream's, not an answer's
            flowcontrol.REQUESTS.labels(str(response.status), "GET", self._host).inc()
        else:
            flowcontrol.observe("GET", self._host, response.status, started, None, response.data)
        if response.status >= 300:
            body = response.read() if stream else response.data
            if stream:
                response.release_conn()
            raise _status_error(response.status, body)
        return response

    def get_json(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        """GET ``path`` and decode the JSON body."""
        response = self._open(path, query, stream=False, read_timeout=self.timeout)
        try:
            decoded: dict[str, Any] = orjson.loads(response.data)
        except orjson.JSONDecodeError as err:
            raise ApiStatusError(response.status, f"undecodable body: {err}") from err
        return decoded

    def get_raw(self, path: str) -> bytes:
        """GET ``path`` and return the body as is (e.g. ``/metrics``)."""
        return bytes(self._open(path, None, stream=False, read_timeout=self.timeout).data)

    # Discovery ------------------------------------------------------------------------
    def discover(self, name: ResourceTypeName) -> ResourceInfo:
        """Look ``name`` up in discovery, fetching its group/version again on a miss
        (so custom resources created since are found).

        Raises:
            UnknownResourceError: not served, or not listable and watchable.
            ApiUnavailableError: discovery could not be fetched.
        """
        gv = (name.group, name.version)
        with self._discovery_lock:
            known = self._discovery.get(gv)
            fetched = self._discovery_fetched.get(gv, 0.0)
        info = known.get(name.resource) if known is not None else None
        if info is None and time.monotonic() - fetched >= _DISCOVERY_REFRESH_INTERVAL:
            known = self._fetch_group_version(name.group, name.version)
            info = known.get(name.resource)
        if info is None:
            raise UnknownResourceError(
                f"the API server does not serve resource {name.resource!r} in "
                f"{'group ' + repr(name.group) if name.group else 'the core group'} "
                f"version {name.version!r}"
            )
        if not {"list", "watch"} <= info.verbs:
            raise UnknownResourceError(
                f"resource {name} cannot be listed and watched (verbs: {sorted(info.verbs)})"
            )
        return info

    def _fetch_group_version(self, group: str, version: str) -> dict[str, ResourceInfo]:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = self.get_json(path)
        except ApiStatusError as err:
            if err.status != 404:
                raise
            doc = {"resources": []}
        found: dict[str, ResourceInfo] = {}
        for res in doc.get("resources") or ():
            res_name = res.get("name", "")
            if not res_name or "/" in res_name:
                continue  # subresources
            found[res_name] = ResourceInfo(
                name=ResourceTypeName(group, version, res_name),
                namespaced=bool(res.get("namespaced")),
                kind=res.get("kind", ""),
                verbs=frozenset(res.get("verbs") or ()),
            )
        with self._discovery_lock:
            self._discovery[(group, version)] = found
            self._discovery_fetched[(group, version)] = time.monotonic()
        return found

    async def adiscover(self, name: ResourceTypeName) -> ResourceInfo:
        """:meth:`discover`, answered without a thread hop when the type is known."""
        with self._discovery_lock:
            info = self._discovery.get((name.group, name.version), {}).get(name.resource)
        if info is not None and {"list", "watch"} <= info.verbs:
            return info
        return await self.run(self.discover, name)

    # LIST and WATCH -------------------------------------------------------------------
    def list_page(self, info: ResourceInfo, limit: int, continue_token: str = "") -> ListPage:
        """One page of a LIST across all namespaces.

        Objects get ``apiVersion`` and ``kind`` (which list items lack), so they read the
        same as watched ones.
        """
        query = {"limit": str(limit)}
        if continue_token:
            query["continue"] = continue_token
        doc = self.get_json(info.path(), query)
        meta = doc.get("metadata") or {}
        api_version = doc.get("apiVersion") or info.api_version
        kind = info.kind
        dumps = orjson.dumps
        items: list[tuple[bytes, dict[str, Any]]] = []
        for item in doc.get("items") or ():
            if "kind" not in item:
                item = {"apiVersion": api_version, "kind": kind, **item}
            items.append((dumps(item), item))
        return ListPage(items, str(meta.get("resourceVersion") or ""), meta.get("continue") or "")

    async def awatch(
        self, info: ResourceInfo, resource_version: str, timeout_seconds: int
    ) -> WatchStream:
        """:meth:`watch` on the thread pool; a stream opened after cancellation is closed."""
        future = self._executor.submit(self.watch, info, resource_version, timeout_seconds)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_opened)
            raise

    def watch(self, info: ResourceInfo, resource_version: str, timeout_seconds: int) -> WatchStream:
        """Open a WATCH with bookmarks from ``resource_version`` across all namespaces.

        Raises:
            GoneError: ``resource_version`` is too old.
            ApiUnavailableError, ApiStatusError: as for any request.
        """
        query = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        response = self._open(
            info.path(), query, stream=True, read_timeout=float(timeout_seconds) + 30.0
        )
        return WatchStream(response)


def _close_opened(future: Future[WatchStream]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def _status_error(status: int, body: bytes) -> ApiStatusError:
    message = status_message(body, 500)
    if status == 410:
        return GoneError(status, message)
    return ApiStatusError(status, message)
