"""The gRPC InformerService: Watch, List and Get served from the reflectors' caches.

# Errors
Every request is validated before anything starts: an unknown resource type is
``NOT_FOUND`` naming it; a malformed selector, resource version or page token, or an
empty target list, is ``INVALID_ARGUMENT`` saying what is wrong; the API server refusing
the informer is ``PERMISSION_DENIED``. List and Get answer ``UNAVAILABLE`` when the type
is not cached yet and the API server cannot be reached; a Watch stream instead stays
open and catches up once the API server is back. An unexpected failure in a request is
logged and answered ``INTERNAL``; it never stops the process.

# Limits
Bad input costs only the call that carries it. Bytes that are not a valid request message
(truncated, corrupt, bad UTF-8) are ``INVALID_ARGUMENT``; a request over gRPC's receive
limit (4 MiB) is ``RESOURCE_EXHAUSTED`` before it reaches the service. Also
``INVALID_ARGUMENT``: a group that is not a DNS subdomain, a version or resource that is
not a DNS label (lower case), a namespace, name or subscriber longer than 253 characters,
more than :data:`MAX_TARGETS` targets, and a label or field selector longer than
``ServiceOptions.max_selector_length`` (which bounds a selector's number of terms and the
cost of matching it). A caller may hold at most
``ServiceOptions.max_streams_per_peer`` Watch streams at once; one more is
``RESOURCE_EXHAUSTED``. A caller is its identity when callers are authenticated (RBAC),
else its connection (a client process's channels to one address usually share one).
Status messages quote at most
the first kilobyte of what they echo, so a refusal always fits in the response's
metadata.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import dataclasses
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
import orjson

from steward.informer import wire
from steward.informer.apiclient import ApiClient, ResourceInfo, UnknownResourceError
from steward.informer.fanout import Fanout, Subscription, TypeFeed
from steward.informer.metrics import InformerMetrics
from steward.informer.reflector import Reflector, Reflectors
from steward.informer.selection import Selection
from steward.informer.selection import parse_path as parse_selection_path
from steward.informer.selectors import Filter, parse_filter, parse_owner_selector
from steward.informer.store import ObjectKey, ResourceTypeName, parse_resource_version
from steward.kube import ApiStatusError, ApiUnavailableError
from steward.projection import Projection
from steward.serving.security import DEVELOPMENT, AuthError, Guard, Identity
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Context = grpc.aio.ServicerContext[Any, Any]

DEFAULT_BATCH = 256
MAX_BATCH = 10_000
DEFAULT_PAGE = 500
MAX_PAGE = 5000
MAX_TARGETS = 512
"""Resource types one Watch may name: enough for a controller over every type of a cluster
with hundreds of custom resources (the garbage collector watches each), few enough that
one request's validation stays small."""
MAX_NAME = 253
"""Longest namespace, object name or subscriber a request may carry (Kubernetes' longest
name)."""
MAX_STATUS_MESSAGE = 1024
"""Bytes of UTF-8 a status message keeps (the rest is cut, saying how long it was)."""
DEFAULT_MAX_SELECTOR_LENGTH = 4096
DEFAULT_MAX_STREAMS_PER_PEER = 100

_GROUP_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class ServiceOptions:
    """How the service serves subscribers. Every field has a working default."""

    subscriber_buffer: int = 10_000
    """Objects queued per subscriber and type before it is sent REPLACED and a fresh
    snapshot instead. Defaults to 10,000."""
    default_batch: int = DEFAULT_BATCH
    """Events per WatchResponse when the request does not say. Defaults to 256."""
    watch_linger: float = 0.0
    """Seconds an idle Watch stream waits after new events before it sends them
    (``Subscription.next_batch``). Defaults to 0: at once."""
    sync_timeout: float = 30.0
    """How long List and Get wait for a type's first LIST. Defaults to 30 s."""
    max_selector_length: int = DEFAULT_MAX_SELECTOR_LENGTH
    """Longest label or field selector a request may carry, in characters; longer ones
    are INVALID_ARGUMENT. Defaults to 4096."""
    max_streams_per_peer: int = DEFAULT_MAX_STREAMS_PER_PEER
    """Watch streams one caller (identity, else connection) may hold open at once; one more is
    RESOURCE_EXHAUSTED. Defaults to 100."""


@dataclass(frozen=True)
class _Target:
    """One Watch target, checked: its type, resume point, filter and projection."""

    info: ResourceInfo
    resume: int | None
    filter: Filter
    projection: Projection | None
    selecting: ResourceInfo | None = None
    """The type whose objects select this target's (selected_by), if any."""
    selection_path: tuple[str, ...] = ()


class _RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class MalformedRequest:
    """What a request decodes to when its bytes are not a valid message (see
    :func:`add_to_server`); the handler answers INVALID_ARGUMENT with :attr:`message`."""

    def __init__(self, message_type: str, error: Exception) -> None:
        self.message = f"malformed {message_type}: {error}"


def lenient(message_type: Any) -> Callable[[bytes], Any]:
    """A request deserializer that returns a :class:`MalformedRequest` instead of raising
    (gRPC would answer UNKNOWN and log a traceback for every bad message)."""
    name = message_type.DESCRIPTOR.full_name

    def decode(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except Exception as err:  # DecodeError and whatever else bad bytes provoke
            return MalformedRequest(name, err)

    return decode


def _check_length(value: str, field: str, limit: int = MAX_NAME) -> None:
    if len(value) > limit:
        raise _RequestError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{field} is {len(value)} characters long; the longest allowed is {limit}",
        )


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
        guard: Guard | None = None,
    ) -> None:
        self.client = client
        self.guard = guard if guard is not None else Guard(DEVELOPMENT, None)
        self.reflectors = reflectors
        self.fanout = fanout
        self.metrics = metrics
        self.options = options or ServiceOptions()
        self._streams: dict[str, int] = {}
        """Open Watch streams per caller (``user <name>`` or ``connection <peer>``)."""

    # Validation -----------------------------------------------------------------------
    async def _resolve(
        self,
        rtype: pb.ResourceType,
        identity: Identity,
        verbs: tuple[str, ...],
        namespace: str,
        name: str = "",
    ) -> ResourceInfo:
        """The type's discovery information, once the request names it well and the caller
        may do ``verbs`` to it in ``namespace``. The caller is authorized before the type is
        looked up, as kube-apiserver does, so one who may not read a type cannot learn
        whether it exists (PERMISSION_DENIED either way); the authorization that counts
        follows the lookup (:meth:`_authorize`, which knows the type's scope)."""
        if not rtype.version or not rtype.resource:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"resource type {_type_label(rtype)} is incomplete: version and resource "
                "are required (group is empty for the core group)",
            )
        if not (
            (not rtype.group or (len(rtype.group) <= MAX_NAME and _GROUP_RE.match(rtype.group)))
            and len(rtype.version) <= 63
            and _LABEL_RE.match(rtype.version)
            and len(rtype.resource) <= 63
            and _LABEL_RE.match(rtype.resource)
        ):
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"resource type {_type_label(rtype)} is malformed: the group is a DNS "
                "subdomain (empty for the core group), the version and the resource are "
                "lower-case DNS labels (e.g. group 'apps', version 'v1', resource "
                "'deployments')",
            )
        await self._require(identity, verbs, rtype.group, rtype.resource, namespace, name)
        type_name = ResourceTypeName(rtype.group, rtype.version, rtype.resource)
        try:
            return await self.client.adiscover(type_name)
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

    def _filter(
        self, namespace: str, label_selector: str, field_selector: str, where: str = ""
    ) -> Filter:
        _check_length(namespace, "namespace")
        limit = self.options.max_selector_length
        prefix = f"{where}." if where else ""
        for field, selector in (
            ("label_selector", label_selector),
            ("field_selector", field_selector),
        ):
            if len(selector) > limit:
                raise _RequestError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{prefix}{field} is {len(selector)} characters long; the informer "
                    f"accepts selectors of at most {limit} characters (--max-selector-length)",
                )
        try:
            return parse_filter(namespace, label_selector, field_selector)
        except ValueError as err:
            message = f"{prefix}selector: {err}" if where else str(err)
            raise _RequestError(grpc.StatusCode.INVALID_ARGUMENT, message) from err

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
            await _abort(context, _RequestError(grpc.StatusCode.INTERNAL, f"internal error: {err}"))
        raise AssertionError("unreachable")  # pragma: no cover - abort raises

    async def _well_formed(self, request: Any, context: _Context) -> Identity:
        """The caller, once the request is known to be decodable and the caller known."""
        if isinstance(request, MalformedRequest):
            await _abort(context, _RequestError(grpc.StatusCode.INVALID_ARGUMENT, request.message))
        try:
            return await self.guard.identify(context)
        except AuthError as err:
            await _abort(context, _RequestError(err.code, err.message))
        raise AssertionError("unreachable")  # pragma: no cover - abort raises

    async def _authorize(
        self,
        identity: Identity,
        verbs: tuple[str, ...],
        info: ResourceInfo,
        namespace: str,
        name: str = "",
    ) -> None:
        """Raises PERMISSION_DENIED unless ``identity`` may do each of ``verbs`` to the type
        in ``namespace`` (all namespaces when empty) in the API server itself."""
        scope = namespace if info.namespaced else ""
        await self._require(identity, verbs, info.name.group, info.name.resource, scope, name)

    async def _require(
        self,
        identity: Identity,
        verbs: tuple[str, ...],
        group: str,
        resource: str,
        namespace: str,
        name: str,
    ) -> None:
        for verb in verbs:
            try:
                await self.guard.require(identity, verb, group, resource, namespace, name)
            except AuthError as err:
                self.metrics.denied.labels(verb).inc()
                raise _RequestError(err.code, err.message) from err

    # Watch -------------------------------------------------------------------------------
    # Encoded responses instead of messages (see add_to_server), hence the override.
    async def Watch(  # type: ignore[override]
        self, request: pb.WatchRequest | MalformedRequest, context: _Context
    ) -> AsyncIterator[bytes]:
        """Snapshot or replay, then changes, per type; see the proto for the contract.

        Yields encoded WatchResponse messages (see wire.py): register it with
        :func:`add_to_server`, which sends them as they are.
        """
        identity = await self._well_formed(request, context)
        assert isinstance(request, pb.WatchRequest)
        targets = await self._guard(context, self._watch_targets(request, identity))
        infos = [t.info for t in targets]
        infos += [t.selecting for t in targets if t.selecting is not None]
        await self._guard(context, self._authorize_watch(identity, infos, request.namespace))
        max_batch = request.max_batch_size or self.options.default_batch
        max_batch = min(max_batch, MAX_BATCH)
        peer = context.peer() or "unknown"
        subscriber = request.subscriber or peer
        # Limits count per caller: its identity when callers are authenticated, else
        # its connection.
        caller = f"user {identity.user}" if self.guard.enabled else f"connection {peer}"
        open_streams = self._streams.get(caller, 0)
        if open_streams >= self.options.max_streams_per_peer:
            await _abort(
                context,
                _RequestError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{caller} already holds {open_streams} Watch streams, the most "
                    f"the informer allows (--max-watch-streams-per-peer): one Watch takes "
                    "several targets, or close streams first",
                ),
            )
        self._streams[caller] = open_streams + 1
        acquired: list[Reflector] = []
        held: list[Reflector] = []
        """Reflectors of the selecting types (selected_by), one per target naming one."""
        sub: Subscription | None = None
        revoked: list[_RequestError] = []
        recheck: asyncio.Task[None] | None = None
        try:
            for target in targets:
                acquired.append(self.reflectors.acquire(target.info))
            selecting = {
                t.selecting.name: self.reflectors.acquire(t.selecting)
                for t in targets
                if t.selecting is not None
            }
            held.extend(selecting.values())
            for reflector in [*acquired, *held]:
                await reflector.synced.wait()  # the stream stays open while the API server is away
            # From here to fanout.add nothing awaits: no change can slip in between.
            feeds: list[TypeFeed] = []
            for reflector, target in zip(acquired, targets, strict=True):
                flt, resume = target.filter, target.resume
                selection: tuple[ResourceTypeName, Selection] | None = None
                if target.selecting is not None:
                    chosen = Selection(target.selection_path)
                    chosen.load(selecting[target.selecting.name].store)
                    selection = (target.selecting.name, chosen)
                feed = TypeFeed(
                    reflector.name,
                    reflector.store,
                    # A namespace limits namespaced types only: a controller of one
                    # namespace still sees the Nodes it looks up.
                    flt if target.info.namespaced else dataclasses.replace(flt, namespace=""),
                    self.options.subscriber_buffer,
                    request.send_previous_object,
                    self.metrics.replaced.labels(subscriber, str(reflector.name)).inc,
                    projection=target.projection,
                    selection=selection,
                )
                history = (
                    reflector.store.history.since(resume, reflector.store.rv)
                    if resume is not None and selection is None
                    else None
                )
                if resume is not None:
                    result = "replaced" if history is None else "replayed"
                    self.metrics.resumes.labels(str(reflector.name), result).inc()
                if history is None:
                    feed.start_with_snapshot(replaced=resume is not None)
                else:
                    feed.start_with_replay(history)
                feeds.append(feed)
            sub = Subscription(subscriber, feeds, max_batch, self.options.watch_linger)
            self.fanout.add(sub)
            if self.guard.enabled:
                recheck = asyncio.create_task(
                    self._recheck(identity, infos, request.namespace, sub, revoked)
                )
            while True:
                batch = await sub.next_batch()
                if revoked:
                    await _abort(context, revoked[0])
                if batch is None:
                    return  # the server is shutting down: end the stream cleanly
                response, events = batch
                self.metrics.sent_events.inc(events)
                yield response
        finally:
            if recheck is not None:
                recheck.cancel()
            remaining = self._streams.pop(caller, 1) - 1
            if remaining > 0:
                self._streams[caller] = remaining
            if sub is not None:
                self.fanout.remove(sub)
            for reflector in [*acquired, *held]:
                self.reflectors.release(reflector)

    async def _authorize_watch(
        self, identity: Identity, infos: list[ResourceInfo], namespace: str
    ) -> None:
        for info in infos:
            await self._authorize(identity, ("list", "watch"), info, namespace)

    async def _recheck(
        self,
        identity: Identity,
        infos: list[ResourceInfo],
        namespace: str,
        sub: Subscription,
        revoked: list[_RequestError],
    ) -> None:
        """Re-authorize an open stream every interval; a refusal closes it, and the stream
        ends PERMISSION_DENIED. The API server being away keeps the stream open."""
        while True:
            await asyncio.sleep(self.guard.security.recheck_interval)
            try:
                await self._authorize_watch(identity, infos, namespace)
            except _RequestError as err:
                if err.code == grpc.StatusCode.UNAVAILABLE:
                    log.warning("cannot re-authorize %s's Watch now: %s", identity, err.message)
                    continue
                log.info("ending %s's Watch: %s", identity, err.message)
                revoked.append(err)
                sub.close()
                return

    async def _watch_targets(self, request: pb.WatchRequest, identity: Identity) -> list[_Target]:
        if not request.targets:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT, "targets is empty: name at least one type"
            )
        if len(request.targets) > MAX_TARGETS:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"targets names {len(request.targets)} types; one Watch takes at most "
                f"{MAX_TARGETS}",
            )
        _check_length(request.subscriber, "subscriber")
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
        narrowed = [self._target_filter(flt, i, t) for i, t in enumerate(request.targets)]
        result: list[_Target] = []
        seen: set[ResourceTypeName] = set()
        for target, resume, (target_filter, projection) in zip(
            request.targets, resumes, narrowed, strict=True
        ):
            info = await self._resolve(target.type, identity, ("list", "watch"), request.namespace)
            if info.name in seen:
                raise _RequestError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"resource type {info.name} is named twice in targets",
                )
            seen.add(info.name)
            selecting: ResourceInfo | None = None
            path: tuple[str, ...] = ()
            if target.HasField("selected_by"):
                where = f"targets[{len(result)}].selected_by"
                try:
                    path = parse_selection_path(target.selected_by.path)
                except ValueError as err:
                    raise _RequestError(
                        grpc.StatusCode.INVALID_ARGUMENT, f"{where}: {err}"
                    ) from err
                selecting = await self._resolve(
                    target.selected_by.type, identity, ("list", "watch"), request.namespace
                )
                if selecting.name == info.name:
                    raise _RequestError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"{where}.type: {info.name} cannot select objects of its own type",
                    )
            result.append(_Target(info, resume, target_filter, projection, selecting, path))
        return result

    def _target_filter(
        self, base: Filter, index: int, target: pb.WatchTarget
    ) -> tuple[Filter, Projection | None]:
        """The request's filter narrowed by one target's own, and its projection."""
        where = f"targets[{index}]"
        per_type = self._filter("", target.label_selector, target.field_selector, where)
        owner = None
        if target.HasField("owner_filter"):
            kinds = [(k.group, k.kind) for k in target.owner_filter.kinds]
            try:
                owner = parse_owner_selector(kinds, target.owner_filter.orphans)
            except ValueError as err:
                raise _RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"{where}.{err}") from err
        try:
            projection = Projection.parse(target.fields, target.metadata_only)
        except ValueError as err:
            raise _RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"{where}.fields: {err}") from err
        if per_type.everything and owner is None:
            return base, projection
        return base.narrowed(per_type.labels, per_type.fields, owner), projection

    # List ----------------------------------------------------------------------------------
    async def List(
        self, request: pb.ListRequest | MalformedRequest, context: _Context
    ) -> pb.ListResponse:
        """One page of cached objects, ordered by namespace and name."""
        identity = await self._well_formed(request, context)
        assert isinstance(request, pb.ListRequest)
        return await self._guard(context, self._list(request, identity))

    async def _list(self, request: pb.ListRequest, identity: Identity) -> pb.ListResponse:
        flt = self._filter(request.namespace, request.label_selector, request.field_selector)
        if request.page_size < 0:
            raise _RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"page_size must not be negative, got {request.page_size}",
            )
        page_size = min(request.page_size or DEFAULT_PAGE, MAX_PAGE)
        digest = _filter_digest(request)
        after = _decode_page_token(request.page_token, digest) if request.page_token else None
        info = await self._resolve(request.type, identity, ("list",), request.namespace)
        await self._authorize(identity, ("list",), info, request.namespace)
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
    async def Get(
        self, request: pb.GetRequest | MalformedRequest, context: _Context
    ) -> pb.GetResponse:
        """One cached object by namespace and name."""
        identity = await self._well_formed(request, context)
        assert isinstance(request, pb.GetRequest)
        return await self._guard(context, self._get(request, identity))

    async def _get(self, request: pb.GetRequest, identity: Identity) -> pb.GetResponse:
        if not request.name:
            raise _RequestError(grpc.StatusCode.INVALID_ARGUMENT, "name is required")
        _check_length(request.name, "name")
        _check_length(request.namespace, "namespace")
        info = await self._resolve(
            request.type, identity, ("get",), request.namespace, request.name
        )
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
        await self._authorize(identity, ("get",), info, request.namespace, request.name)
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
    await context.abort(err.code, bounded_message(err.message))
    raise AssertionError("unreachable")  # pragma: no cover - abort raises


def bounded_message(message: str, limit: int = MAX_STATUS_MESSAGE) -> str:
    """``message`` cut to ``limit`` bytes of UTF-8, saying how long it was: a status
    message travels in the response's metadata, which clients cap (8 KiB by default)."""
    encoded = message.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return message
    kept = encoded[:limit].decode("utf-8", "ignore")
    return f"{kept}... (cut; {len(message)} characters in all)"


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
    except that Watch responses are sent as the encoded bytes the service yields and
    undecodable requests reach the handlers as :class:`MalformedRequest`."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "Watch": grpc.unary_stream_rpc_method_handler(
            service.Watch,
            request_deserializer=lenient(pb.WatchRequest),
            response_serializer=_raw,
        ),
        "List": grpc.unary_unary_rpc_method_handler(
            service.List,
            request_deserializer=lenient(pb.ListRequest),
            response_serializer=pb.ListResponse.SerializeToString,
        ),
        "Get": grpc.unary_unary_rpc_method_handler(
            service.Get,
            request_deserializer=lenient(pb.GetRequest),
            response_serializer=pb.GetResponse.SerializeToString,
        ),
    }
    name = pb.DESCRIPTOR.services_by_name["InformerService"].full_name
    generic = grpc.method_handlers_generic_handler(name, handlers)
    server.add_generic_rpc_handlers((generic,))
