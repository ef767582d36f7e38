"""Reflectors: one LIST & WATCH per resource type, shared by every subscriber of that type.

A :class:`Reflector` lists the type page by page, then watches it with bookmarks,
applying each event to its :class:`~steward.informer.store.Store` and handing it to the
:class:`~steward.informer.fanout.Fanout`. :class:`Reflectors` keeps one per type while
anyone needs it, and stops it a grace period after the last user left.

# Recovery
- The watch ends (server timeout) or breaks: watch again from the last resource version.
- 410 Gone (HTTP status, or an ERROR event with code 410): list again; objects that
  vanished meanwhile are delivered as DELETED, changed ones as ADDED or MODIFIED.
- Any other failure: retry after an exponential backoff from 800 ms to 30 s (with
  jitter), reset once a request succeeds. Subscribers' streams stay open meanwhile.

# Odd objects
Custom resources may hold anything the API server accepts, e.g. a spec nested 10,000
levels deep, which is beyond orjson (it decodes 1,024 levels and encodes 254). Such an
object costs a slower decoding, never the type: a LIST page orjson refuses is decoded
again by :mod:`steward.deepjson`'s slow decoder, and an object orjson cannot encode by
its slow encoder; a
WATCH event it cannot decode ends the watch, and the reflector lists again (with the slow
decoder) to get past it, logging a warning that says so. An object whose metadata cannot
be read at all is left out of the cache with a warning naming it, and every other object
of the type is still served.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import orjson
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from steward.deepjson import dumps, loads_deep
from steward.informer import wire
from steward.informer.apiclient import ApiClient, ListPage, ResourceInfo
from steward.informer.fanout import Fanout, encode_event
from steward.informer.metrics import InformerMetrics
from steward.informer.store import (
    EventKind,
    ResourceTypeName,
    Store,
    StoredObject,
    StoreEvent,
    parse_resource_version,
)
from steward.kube import ApiError, ApiStatusError, ApiUnavailableError, GoneError

log = logging.getLogger(__name__)

_tracer = trace.get_tracer("steward.informer")
_propagator = TraceContextTextMapPropagator()
_KINDS = {"ADDED": EventKind.ADDED, "MODIFIED": EventKind.MODIFIED, "DELETED": EventKind.DELETED}
_END = object()


@dataclass
class ReflectorOptions:
    """How reflectors talk to the API server. Every field has a working default."""

    page_size: int = 500
    """Objects per LIST page. Defaults to 500."""
    watch_timeout: tuple[int, int] = (300, 600)
    """Each WATCH asks the server to end it after a random time in this range (seconds),
    as client-go does, so load spreads across API server replicas. Defaults to 5-10 min."""
    backoff_initial: float = 0.8
    """First retry delay after a failure (seconds). Defaults to 0.8."""
    backoff_max: float = 30.0
    """Longest retry delay (seconds). Defaults to 30."""
    history_size: int = 10_000
    """Recent events kept per type to serve resumes. Defaults to 10,000."""
    idle_grace: float = 30.0
    """Seconds a type nobody needs any more keeps being watched. Defaults to 30."""


class _Backoff:
    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.current = initial

    def next(self) -> float:
        delay = self.current
        self.current = min(self.current * 2, self.maximum)
        return delay * random.uniform(0.9, 1.1)  # noqa: S311 - jitter, not security

    def reset(self) -> None:
        self.current = self.initial


class Reflector:
    """LIST & WATCH of one resource type into a store (see the module docs for recovery)."""

    def __init__(
        self,
        client: ApiClient,
        info: ResourceInfo,
        fanout: Fanout,
        metrics: InformerMetrics,
        options: ReflectorOptions,
    ) -> None:
        self.client = client
        self.info = info
        self.name: ResourceTypeName = info.name
        self.fanout = fanout
        self.metrics = metrics
        self.options = options
        self.store = Store(options.history_size)
        self.synced = asyncio.Event()
        """Set once the first LIST is in the store."""
        self.attempted = asyncio.Event()
        """Set once the first LIST succeeded or failed (to answer List/Get quickly)."""
        self.last_error: str | None = None
        self._resource = str(self.name)
        self._rtype_field = wire.resource_type_field(wire.resource_type(self.name))
        self._stream: Any = None
        self._task: asyncio.Task[None] | None = None

    # Lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name=f"reflector {self._resource}"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._close_stream()

    def reconnect(self) -> None:
        """End the current watch now; the reflector watches again from where it was."""
        self._close_stream()

    def _close_stream(self) -> None:
        stream = self._stream
        if stream is not None:
            stream.close()

    async def run(self) -> None:
        """List and watch until cancelled; never raises otherwise."""
        backoff = _Backoff(self.options.backoff_initial, self.options.backoff_max)
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    backoff.reset()
                await self._watch(backoff)
            except GoneError as err:
                log.info("%s: %s; relisting", self._resource, err)
                self.metrics.errors.labels(self._resource, "gone").inc()
                need_list = True
            except ApiError as err:
                if isinstance(err.__cause__, orjson.JSONDecodeError):
                    # An event orjson cannot decode (see "Odd objects"): watching again
                    # from the same version would meet it again; a relist gets past it.
                    log.warning(
                        "%s: a watch event could not be decoded (%s); listing again",
                        self._resource,
                        err.__cause__,
                    )
                    self.metrics.errors.labels(self._resource, "undecodable").inc()
                    need_list = True
                    continue
                self._failed(
                    err, "unavailable" if isinstance(err, ApiUnavailableError) else "status"
                )
                await asyncio.sleep(backoff.next())
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a bug or an undecodable answer: log, back off, retry
                log.exception("%s: unexpected error in the reflector", self._resource)
                self._failed(err, "internal")
                need_list = True
                await asyncio.sleep(backoff.next())

    def _failed(self, err: Exception, reason: str) -> None:
        self.last_error = str(err)
        self.attempted.set()
        self.metrics.errors.labels(self._resource, reason).inc()
        log.warning("%s: %s", self._resource, err)

    # LIST ---------------------------------------------------------------------------------
    async def _list(self) -> None:
        # Each page becomes stored objects as it arrives: its decoded form (a few times
        # the JSON) is held one page at a time, never for the whole list.
        objects: list[StoredObject] = []
        continue_token = ""
        resource_version = ""
        while True:
            self.metrics.list_requests.labels(self._resource).inc()
            try:
                page = await self.client.run(
                    self.client.list_page, self.info, self.options.page_size, continue_token
                )
            except GoneError:
                if not continue_token:
                    raise
                # The continue token expired mid-list: start the list again.
                objects, continue_token = [], ""
                continue
            except (ApiStatusError, orjson.JSONEncodeError) as err:
                if not isinstance(err, orjson.JSONEncodeError) and not isinstance(
                    err.__cause__, orjson.JSONDecodeError
                ):
                    raise
                log.warning(
                    "%s: a LIST page is beyond orjson (%s); decoding it the slow way",
                    self._resource,
                    err.__cause__ or err,
                )
                page = await self.client.run(self._list_page_deep, continue_token)
            resource_version = page.resource_version
            continue_token = page.continue_token
            stored = (self._stored(raw, obj) for raw, obj in page.items)
            objects.extend(o for o in stored if o is not None)
            del page, stored
            if not continue_token:
                break
        rv = parse_resource_version(resource_version, "list resource version")
        relist = self.synced.is_set()
        events = self.store.replace(objects, rv)
        if relist:
            self.metrics.relists.labels(self._resource).inc()
            for event in events:
                _trace(event, self._resource, "relist")
            self.fanout.publish(self.name, events)
            self.fanout.bookmark(self.name, rv)
        self.last_error = None
        self.synced.set()
        self.attempted.set()
        # The pages are garbage now; the last one goes on the loop's next turn (the
        # future that brought it holds it till then), and then their memory can go back.
        del objects, events
        await asyncio.sleep(0)
        release_free_memory()

    def _list_page_deep(self, continue_token: str) -> ListPage:
        """:meth:`ApiClient.list_page` with the slow codec, for a page orjson refuses."""
        query = {"limit": str(self.options.page_size)}
        if continue_token:
            query["continue"] = continue_token
        doc = loads_deep(self.client.get_raw(f"{self.info.path()}?{urlencode(query)}"))
        if not isinstance(doc, dict):
            raise ApiStatusError(200, f"a LIST answer that is not an object: {type(doc)}")
        meta = doc.get("metadata") or {}
        api_version = doc.get("apiVersion") or self.info.api_version
        items: list[tuple[bytes, dict[str, Any]]] = []
        for item in doc.get("items") or ():
            if isinstance(item, dict) and "kind" not in item:
                item = {"apiVersion": api_version, "kind": self.info.kind, **item}
            items.append((b"", item))
        return ListPage(items, str(meta.get("resourceVersion") or ""), meta.get("continue") or "")

    def _stored(self, raw: bytes, obj: Any) -> StoredObject | None:
        """``obj`` as a StoredObject (encoding it when ``raw`` is empty); None, with a
        warning naming it, when its metadata cannot be read."""
        try:
            return StoredObject(raw or dumps(obj), obj)
        except (TypeError, ValueError, AttributeError) as err:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            log.warning(
                "%s: leaving out object %r in namespace %r that cannot be read: %s",
                self._resource,
                meta.get("name"),
                meta.get("namespace"),
                err,
            )
            self.metrics.errors.labels(self._resource, "malformed_object").inc()
            return None

    # WATCH --------------------------------------------------------------------------------
    async def _watch(self, backoff: _Backoff) -> None:
        timeout = random.randint(*self.options.watch_timeout)  # noqa: S311 - load spreading
        self.metrics.watch_requests.labels(self._resource).inc()
        stream = await self.client.awatch(self.info, str(self.store.rv), timeout)
        self._stream = stream
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        slots = threading.BoundedSemaphore(64)  # chunks in flight: backpressure on reading

        def post(item: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def pump() -> None:
            try:
                for events in stream:
                    while not slots.acquire(timeout=1.0):
                        if stream.closed:
                            return
                    post(events)
                post(_END)
            except Exception as err:  # handed to the loop, which raises it
                post(err)

        reader = threading.Thread(target=pump, name=f"watch {self._resource}", daemon=True)
        reader.start()
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, Exception):
                    raise item
                slots.release()
                self._apply(item)
                backoff.reset()
        finally:
            self._stream = None
            stream.close()

    def _apply(self, events: list[dict[str, Any]]) -> None:
        batch: list[StoreEvent] = []
        store = self.store
        counter = self.metrics.events
        for raw_event in events:
            type_ = raw_event.get("type")
            obj = raw_event.get("object") or {}
            kind = _KINDS.get(type_)  # type: ignore[arg-type]
            if kind is None:
                if type_ == "BOOKMARK":
                    counter.labels(self._resource, "BOOKMARK").inc()
                    meta = obj.get("metadata") or {}
                    rv = parse_resource_version(str(meta.get("resourceVersion", "")))
                    if batch:
                        self.fanout.publish(self.name, batch)
                        batch = []
                    store.bookmark(rv)
                    self.fanout.bookmark(self.name, rv)
                    continue
                if type_ == "ERROR":
                    if batch:
                        self.fanout.publish(self.name, batch)
                    code = int(obj.get("code") or 0)
                    message = str(obj.get("message") or obj)
                    if code == 410:
                        raise GoneError(code, message)
                    raise ApiStatusError(code, f"watch error: {message}")
                log.warning("%s: ignoring watch event of type %r", self._resource, type_)
                continue
            counter.labels(self._resource, type_).inc()
            stored = self._stored(b"", obj)
            if stored is None:
                continue
            try:
                rv = parse_resource_version(stored.resource_version, "object resource version")
            except ValueError as err:
                log.warning("%s: leaving out %r: %s", self._resource, stored, err)
                continue
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            traceparent, tracestate = _start_span(
                stored, self._resource, type_ or "", annotations.get("traceparent")
            )
            event = store.apply(kind, stored, rv, traceparent, tracestate)
            # Encode once at ingest, whatever the number of subscribers (see wire.py).
            event.wire = encode_event(event, self._rtype_field)
            event.decoded = obj  # for the projections, until published (fanout.py)
            batch.append(event)
        if batch:
            self.fanout.publish(self.name, batch)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_trim = _malloc_trim()


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc only; elsewhere a no-op).

    A LIST's pages, decoded, weigh a few times their JSON and are freed as soon as their
    objects are stored; without this the process keeps that memory resident until it
    happens to be reused.
    """
    if _trim is not None:
        _trim(0)


def _start_span(
    obj: StoredObject, resource: str, type_: str, parent: str | None = None
) -> tuple[str, str]:
    """Start and end the span of one received event; its W3C context, or empty strings.

    ``parent`` is the object's ``traceparent`` annotation (KEP-5915's convention): the
    event then continues that trace, so whatever wrote the object is the root of what its
    events cause. A malformed annotation is ignored (the span starts a trace of its own).
    """
    context = _propagator.extract({"traceparent": parent}) if parent else None
    span = _tracer.start_span(
        f"informer {type_} {resource}",
        context=context,
        kind=trace.SpanKind.CONSUMER,
        # OpenTelemetry reserves k8s.* for its own attributes, of which this uses
        # k8s.namespace.name; the rest are Steward's.
        attributes={
            "steward.resource": resource,
            "steward.event.type": type_,
            "k8s.namespace.name": obj.namespace,
            "steward.object.name": obj.name,
            "steward.object.uid": obj.uid,
            "steward.resource_version": obj.resource_version,
        },
    )
    try:
        if not span.get_span_context().is_valid:
            return "", ""
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent", ""), carrier.get("tracestate", "")
    finally:
        span.end()


def _trace(event: StoreEvent, resource: str, cause: str) -> None:
    if event.obj is not None:
        traceparent, tracestate = _start_span(event.obj, resource, f"{event.kind.name} ({cause})")
        event.traceparent, event.tracestate = traceparent, tracestate


class Reflectors:
    """One reflector per resource type while someone needs it.

    :meth:`acquire` starts (or reuses) the type's reflector; :meth:`release` gives it
    back, and the reflector is stopped ``idle_grace`` seconds after its last release
    unless acquired again meanwhile.
    """

    def __init__(
        self,
        client: ApiClient,
        fanout: Fanout,
        metrics: InformerMetrics,
        options: ReflectorOptions,
    ) -> None:
        self.client = client
        self.fanout = fanout
        self.metrics = metrics
        self.options = options
        self._reflectors: dict[ResourceTypeName, Reflector] = {}
        self._users: dict[ResourceTypeName, int] = {}
        self._idle: dict[ResourceTypeName, asyncio.TimerHandle] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def __iter__(self) -> Iterator[Reflector]:
        return iter(list(self._reflectors.values()))

    def get(self, name: ResourceTypeName) -> Reflector | None:
        return self._reflectors.get(name)

    def acquire(self, info: ResourceInfo) -> Reflector:
        name = info.name
        timer = self._idle.pop(name, None)
        if timer is not None:
            timer.cancel()
        reflector = self._reflectors.get(name)
        if reflector is None:
            reflector = Reflector(self.client, info, self.fanout, self.metrics, self.options)
            self._reflectors[name] = reflector
            reflector.start()
        self._users[name] = self._users.get(name, 0) + 1
        return reflector

    def release(self, reflector: Reflector) -> None:
        name = reflector.name
        users = self._users.get(name, 0) - 1
        if users > 0:
            self._users[name] = users
            return
        self._users.pop(name, None)
        if self._reflectors.get(name) is not reflector:
            return
        loop = asyncio.get_running_loop()

        def stop_idle() -> None:
            task = loop.create_task(self._stop_idle(name))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

        self._idle[name] = loop.call_later(self.options.idle_grace, stop_idle)

    async def _stop_idle(self, name: ResourceTypeName) -> None:
        self._idle.pop(name, None)
        if self._users.get(name):
            return
        reflector = self._reflectors.pop(name, None)
        if reflector is not None:
            log.info("%s: no subscriber for %.0fs; stopping", name, self.options.idle_grace)
            await reflector.stop()

    async def stop_all(self) -> None:
        for timer in self._idle.values():
            timer.cancel()
        self._idle.clear()
        reflectors = list(self._reflectors.values())
        self._reflectors.clear()
        self._users.clear()
        for reflector in reflectors:
            await reflector.stop()
