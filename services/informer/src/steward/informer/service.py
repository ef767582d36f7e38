"""The gRPC InformerService: Watch, List and Get served from the reflectors' caches.

# Errors
Every request is validated before anything starts: an unknown resource type is
``NOT_FOUND`` naming it; a malformed selector, resource version or page token, or an
empty target list, is ``INVALID_ARGUMENT`` saying what is wrong; the API server refusing
the informer is ``PERMISSION_DENIED``. List and Get answer ``UNAVAILABLE`` when the type
is not cached yet and the API server cannot be reached; a Watch stream instead stays
open and catches up once the API server is back. An unexpected failure in a request is
logged and answered ``INTERNAL``; it never stops the process.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
import orjson

from steward.informer import wire
from steward.informer.apiclient import ApiClient, ResourceInfo, UnknownResourceError
from steward.informer.fanout import Fanout, Subscription, TypeFeed
from steward.informer.metrics import InformerMetrics
from steward.informer.reflector import Reflector, Reflectors
from steward.informer.selectors import Filter, parse_filter
from steward.informer.store import ObjectKey, ResourceTypeName, parse_resource_version
from steward.kube import ApiStatusError, ApiUnavailableError
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Context = grpc.aio.ServicerContext[Any, Any]

DEFAULT_BATCH = 256
MAX_BATCH = 10_000
DEFAULT_PAGE = 500
MAX_PAGE = 5000


@dataclass
class ServiceOptions:
    """How the service serves subscribers. Every field has a working default."""

    subscriber_buffer: int = 10_000
    """Objects queued per subscriber and type before it is sent REPLACED and a fresh
    snapshot instead. Defaults to 10,000."""
    default_batch: int = DEFAULT_BATCH
    """Events per WatchResponse when the request does not say. Defaults to 256."""
    sync_timeout: float = 30.0
    """How long List and Get wait for a type's first LIST. Defaults to 30 s."""


class _RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _type_label(rtype: pb.ResourceType) -> str:
    name = ResourceTypeName(rtype.group, rtype.version, rtype.resource)
    return (
        f"{str(name)!r} (group {rtype.group!r}, version {rtype.version!r}, "
        f"resource {rtype.resource!r})"
    )


class InformerService(pb_grpc.InformerServiceServicer):
    """The servicer (see the module docs for errors)."""

    def __init__(
        self,
        client: ApiClient,
        reflectors: Reflectors,
        fanout: Fanout,
        metrics: InformerMetrics,
        options: ServiceOptions | None = None,
    ) -> None:
        self.client = client
        self.reflectors = reflectors
        self.fanout = fanout
        self.metrics = metrics
        self.options = options or ServiceOptions()

    # Validation -----------------------------------------------------------------------
    async def _resolve(self, rtype: pb.ResourceType) -> ResourceInfo:
        if not rtype.version or not rtype.resource:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"resource type {_type_label(rtype)} is incomplete: version and resource "
                "are required (group is empty for the core group)",
            )
        name = ResourceTypeName(rtype.group, rtype.version, rtype.resource)
        try:
            return await self.client.adiscover(name)
        except UnknownResourceError as err:
            raise _RequestError(
                grpc.StatusCode.NOT_FOUND, f"unknown resource type {_type_label(rtype)}: {err}"
            ) from err
        except ApiUnavailableError as err:
            raise _RequestError(
                grpc.StatusCode.UNAVAILABLE,
                f"cannot look up resource type {_type_label(rtype)}: {err}",
            ) from err
        except ApiStatusError as err:
            raise _status_to_request_error(err, f"looking up {_type_label(rtype)}") from err

    @staticmethod
    def _filter(namespace: str, label_selector: str, field_selector: str) -> Filter:
        try:
            return parse_filter(namespace, label_selector, field_selector)
        except ValueError as err:
            raise _RequestError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from err

    async def _ready(self, reflector: Reflector) -> None:
        """Wait until the type's cache is synced, or fail UNAVAILABLE if it cannot be."""
        if reflector.synced.is_set():
            return
        waits = [
            asyncio.ensure_future(reflector.synced.wait()),
            asyncio.ensure_future(reflector.attempted.wait()),
        ]
        try:
            await asyncio.wait(
                waits, timeout=self.options.sync_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waits:
                waiter.cancel()
        if not reflector.synced.is_set():
            reason = reflector.last_error or "the first LIST did not complete in time"
            raise _RequestError(
                grpc.StatusCode.UNAVAILABLE,
                f"the cache of {reflector.name} is not synced yet and the API server cannot "
                f"be listed: {reason}",
            )

    async def _guard(self, context: _Context, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except _RequestError as err:
            await _abort(context, err)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.exception("request failed")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {err}")
        raise AssertionError("unreachable")  # pragma: no cover - abort raises

    # Watch -------------------------------------------------------------------------------
    # Encoded responses instead of messages (see add_to_server), hence the override.
    async def Watch(  # type: ignore[override]
        self, request: pb.WatchRequest, context: _Context
    ) -> AsyncIterator[bytes]:
        """Snapshot or replay, then changes, per type; see the proto for the contract.

        Yields encoded WatchResponse messages (see wire.py): register it with
        :func:`add_to_server`, which sends them as they are.
        """
        targets, flt = await self._guard(context, self._watch_targets(request))
        max_batch = request.max_batch_size or self.options.default_batch
        max_batch = min(max_batch, MAX_BATCH)
        subscriber = request.subscriber or context.peer() or "anonymous"
        acquired: list[Reflector] = []
        sub: Subscription | None = None
        try:
            for info, _ in targets:
                acquired.append(self.reflectors.acquire(info))
            for reflector in acquired:
                await reflector.synced.wait()  # the stream stays open while the API server is away
            # From here to fanout.add nothing awaits: no change can slip in between.
            feeds: list[TypeFeed] = []
            for reflector, (_, resume) in zip(acquired, targets, strict=True):
                feed = TypeFeed(
                    reflector.name,
                    reflector.store,
                    flt,
                    self.options.subscriber_buffer,
                    request.send_previous_object,
                    self.metrics.replaced.labels(subscriber, str(reflector.name)).inc,
                )
                history = (
                    reflector.store.history.since(resume, reflector.store.rv)
                    if resume is not None
                    else None
                )
                if history is None:
                    feed.start_with_snapshot(replaced=resume is not None)
                else:
                    feed.start_with_replay(history)
                feeds.append(feed)
            sub = Subscription(subscriber, feeds, max_batch)
            self.fanout.add(sub)
            while True:
                batch = await sub.next_batch()
                if batch is None:
                    return  # the server is shutting down: end the stream cleanly
                self.metrics.sent_events.inc(len(batch))
                yield b"".join(batch)
        finally:
            if sub is not None:
                self.fanout.remove(sub)
            for reflector in acquired:
                self.reflectors.release(reflector)

    async def _watch_targets(
        self, request: pb.WatchRequest
    ) -> tuple[list[tuple[ResourceInfo, int | None]], Filter]:
        if not request.targets:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT, "targets is empty: name at least one type"
            )
        flt = self._filter(request.namespace, request.label_selector, request.field_selector)
        resumes: list[int | None] = []
        for i, target in enumerate(request.targets):
            if target.resource_version:
                try:
                    resumes.append(
                        parse_resource_version(
                            target.resource_version, f"targets[{i}].resource_version"
                        )
                    )
                except ValueError as err:
                    raise _RequestError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from err
            else:
                resumes.append(None)
        result: list[tuple[ResourceInfo, int | None]] = []
        seen: set[ResourceTypeName] = set()
        for target, resume in zip(request.targets, resumes, strict=True):
            info = await self._resolve(target.type)
            if info.name in seen:
                raise _RequestError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"resource type {info.name} is named twice in targets",
                )
            seen.add(info.name)
            result.append((info, resume))
        return result, flt

    # List ----------------------------------------------------------------------------------
    async def List(self, request: pb.ListRequest, context: _Context) -> pb.ListResponse:
        """One page of cached objects, ordered by namespace and name."""
        return await self._guard(context, self._list(request))

    async def _list(self, request: pb.ListRequest) -> pb.ListResponse:
        flt = self._filter(request.namespace, request.label_selector, request.field_selector)
        if request.page_size < 0:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"page_size must not be negative, got {request.page_size}",
            )
        page_size = min(request.page_size or DEFAULT_PAGE, MAX_PAGE)
        digest = _filter_digest(request)
        after = _decode_page_token(request.page_token, digest) if request.page_token else None
        info = await self._resolve(request.type)
        reflector = self.reflectors.acquire(info)
        try:
            await self._ready(reflector)
        finally:
            self.reflectors.release(reflector)
        store = reflector.store
        objects = sorted(store.select(flt), key=lambda o: o.key)
        start = 0
        if after is not None:
            keys = [o.key for o in objects]
            start = bisect.bisect_right(keys, after)
        page = objects[start : start + page_size]
        next_token = ""
        if start + page_size < len(objects) and page:
            next_token = _encode_page_token(digest, page[-1].key)
        return pb.ListResponse(
            items=[wire.cached_object(o) for o in page],
            next_page_token=next_token,
            resource_version=str(store.rv),
        )

    # Get -----------------------------------------------------------------------------------
    async def Get(self, request: pb.GetRequest, context: _Context) -> pb.GetResponse:
        """One cached object by namespace and name."""
        return await self._guard(context, self._get(request))

    async def _get(self, request: pb.GetRequest) -> pb.GetResponse:
        if not request.name:
            raise _RequestError(grpc.StatusCode.INVALID_ARGUMENT, "name is required")
        info = await self._resolve(request.type)
        if info.namespaced and not request.namespace:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{info.name} is namespaced: namespace is required",
            )
        if not info.namespaced and request.namespace:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{info.name} is cluster-scoped: namespace must be empty, got "
                f"{request.namespace!r}",
            )
        reflector = self.reflectors.acquire(info)
        try:
            await self._ready(reflector)
        finally:
            self.reflectors.release(reflector)
        obj = reflector.store.get((request.namespace, request.name))
        if obj is None:
            where = f" in namespace {request.namespace!r}" if request.namespace else ""
            raise _RequestError(
                grpc.StatusCode.NOT_FOUND,
                f"{info.name} {request.name!r} not found{where} (in the informer's cache)",
            )
        return pb.GetResponse(object=wire.cached_object(obj))


# Helpers ---------------------------------------------------------------------------------
async def _abort(context: _Context, err: _RequestError) -> NoReturn:
    await context.abort(err.code, err.message)
    raise AssertionError("unreachable")  # pragma: no cover - abort raises


def _status_to_request_error(err: ApiStatusError, doing: str) -> _RequestError:
    if err.status in (401, 403):
        return _RequestError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"the API server refused the informer while {doing}: {err.message}",
        )
    return _RequestError(grpc.StatusCode.UNAVAILABLE, f"the API server failed while {doing}: {err}")


def _filter_digest(request: pb.ListRequest) -> str:
    t = request.type
    parts = (
        t.group,
        t.version,
        t.resource,
        request.namespace,
        request.label_selector,
        request.field_selector,
    )
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def _encode_page_token(digest: str, key: ObjectKey) -> str:
    payload = orjson.dumps({"f": digest, "k": list(key)})
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def _decode_page_token(token: str, digest: str) -> ObjectKey:
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        issued_for = payload["f"]
        namespace, name = payload["k"]
        if not isinstance(namespace, str) or not isinstance(name, str):
            raise TypeError("key is not two strings")
    except (binascii.Error, ValueError, KeyError, TypeError) as err:
        raise _RequestError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"malformed page_token {token[:40]!r}: pass back next_page_token unchanged",
        ) from err
    if issued_for != digest:
        raise _RequestError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token was issued for a different type, namespace or selectors: "
            "keep the filters of the first page, or start again without a token",
        )
    return (namespace, name)


def _raw(message: bytes) -> bytes:
    return message


def add_to_server(service: InformerService, server: grpc.aio.Server) -> None:
    """Register ``service`` like the generated ``add_InformerServiceServicer_to_server``,
    except that Watch responses are sent as the encoded bytes the service yields."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "Watch": grpc.unary_stream_rpc_method_handler(
            service.Watch,
            request_deserializer=pb.WatchRequest.FromString,
            response_serializer=_raw,
        ),
        "List": grpc.unary_unary_rpc_method_handler(
            service.List,
            request_deserializer=pb.ListRequest.FromString,
            response_serializer=pb.ListResponse.SerializeToString,
        ),
        "Get": grpc.unary_unary_rpc_method_handler(
            service.Get,
            request_deserializer=pb.GetRequest.FromString,
            response_serializer=pb.GetResponse.SerializeToString,
        ),
    }
    name = pb.DESCRIPTOR.services_by_name["InformerService"].full_name
    generic = grpc.method_handlers_generic_handler(name, handlers)
    server.add_generic_rpc_handlers((generic,))
