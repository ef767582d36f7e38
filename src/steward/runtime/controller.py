"""A controller: mirror → observers → sources → work queue → workers → reconciler, as one.

Declare one with :class:`ControllerBuilder` (``ControllerManagedBy(mgr).For(..).Owns(..)``
in controller-runtime); the result is a :class:`ControllerDefinition`, which
:func:`steward.run` hosts as a process (flags, credentials, manager, signals) or
:meth:`ControllerDefinition.new` binds to an informer channel and an API client::

    LABELLER = (
        ControllerBuilder("configmap-labeller")
        .for_(CONFIGMAPS, labels_changed)
        .complete(reconcile)              # async def reconcile(ctx, request) -> Result
    )

# Wiring, in a stated order
The mirror is built first, then the :class:`Context` (mirror, fenced API client,
expectations, options), then the reconciler from the context. The controller subscribes
to its mirror once; for every change it runs, in this order: the expectation observers of
``owns(..., expect=True)``, the observers declared with :meth:`ControllerBuilder.observe`
(in declaration order), then the sources (``for_``, ``owns``, ``adopts``, ``watches``, in
declaration order), which queue keys. So an expectation is always lowered before the key
of the change that lowers it is queued.

# Start-up, alone or under a manager
There is one start path. The mirror starts at once and keeps syncing. The workers start
when the instance becomes active: at once when running alone, or when the manager says
START. Before the first reconcile the mirror must hold everything the informer held when
the instance became active: its initial sync does when the watch opened with the start
(alone); when the watch is older than the start (a promoted standby, a START after a
DRAIN) the mirror first catches up (:meth:`~steward.runtime.mirror.Mirror.catch_up`: what
a predecessor wrote just before it stopped may still be on its way). Then every object of
the primary type is queued, and a resync (``resync_period``) re-queues them every period
while active. Under a manager, DRAIN stops the workers gracefully and STOP or a lost
lease stops them at once — the lease is lost before another instance may start, so two
instances never reconcile together. Every worker checks the lease before each reconcile.

# Writes
The API client a controller is given is fenced by construction (the controller derives a
client of its own from the one it is handed, which stays as it was): every write first asks
whether this instance holds its lease, on the thread that sends it, and is refused with
:class:`~steward.kube.FencedError` otherwise (a process paused past its lease sends none
of the writes it had under way). Its completed writes are told to the mirror, so no
reconcile acts on a copy older than the controller's own writes (the mirror's "Read your
own writes"); such a reconcile ends early, and its key is queued again as soon as the
mirror shows the write (after :data:`STALE_RECHECK` seconds at the latest).

# Shutdown
Cancelling :meth:`Controller.run` stops taking work, lets in-flight reconciles finish
within ``shutdown_grace_seconds``, sends the Events still in flight, deregisters from the
manager (so a standby takes over at once) and closes the watch. If the informer refuses
the watch for good, ``run`` raises :class:`~steward.runtime.mirror.MirrorError`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar, overload

import grpc
from prometheus_client import CollectorRegistry

from steward.kube import KubeClient, NotFoundError
from steward.runtime.children import Children, expectation_observer
from steward.runtime.client import Client
from steward.runtime.discovery import Discovery
from steward.runtime.events import EventRecorder
from steward.runtime.everytype import ANY_TYPE, EveryType, TypeFollower
from steward.runtime.expectations import Expectations
from steward.runtime.metrics import metrics_for
from steward.runtime.mirror import (
    Change,
    Handler,
    Indexer,
    Mirror,
    MirrorObject,
    MirrorOptions,
    StaleRead,
    guard_reads,
)
from steward.runtime.ratelimit import DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY
from steward.runtime.reconcile import Reconciler, Request, Result
from steward.runtime.resources import Resource
from steward.runtime.session import ManagerSession, SessionOptions
from steward.runtime.source import (
    EnqueueAdopters,
    EnqueueChanged,
    EnqueueMapped,
    EnqueueObject,
    EnqueueOwner,
    Predicate,
    SelectorOf,
    Source,
    spec_selector,
)
from steward.runtime.subscriptions import EVERYTHING, TypeSubscription, merge, subscription
from steward.runtime.times import utc_now
from steward.runtime.workers import WorkerOptions, WorkerPool, WorkerStatus
from steward.runtime.workqueue import TraceContext
from steward.v1 import manager_pb2

log = logging.getLogger(__name__)

R = TypeVar("R")

STALE_RECHECK = 30.0
"""A reconcile that met a copy older than its own write is queued again once the mirror
shows the write; should that never happen (the object left the watch without a deletion),
after this many seconds all the same."""


@dataclass
class ControllerOptions:
    """How a controller runs. Every field has a working default."""

    max_concurrent_reconciles: int = 1
    """Reconciles running at once. Defaults to 1, as in controller-runtime."""
    namespace: str = ""
    """Watch only this namespace; empty (the default) for all."""
    label_selector: str = ""
    """Watch only objects matching this label selector; empty (the default) for all."""
    resync_period: float | None = None
    """Every so many seconds while active, queue every object of the primary type again
    (level triggering's safety net). None (the default) for never."""
    shutdown_grace_seconds: float = 30.0
    """How long in-flight reconciles may finish on shutdown. Defaults to 30."""
    max_retries: int | None = None
    """Failed reconciles of a key in a row after which it is dropped until its next event
    (upstream's ``maxRetries``); None (the default, as controller-runtime) for never."""
    backoff_base_seconds: float = DEFAULT_BASE_DELAY
    """A failed key's first retry delay, doubling per failure (client-go's 5 ms)."""
    backoff_max_seconds: float = DEFAULT_MAX_DELAY
    """The longest retry delay (client-go's 1000 s)."""
    registry: CollectorRegistry | None = field(default=None, compare=False)
    """Prometheus registry for the controller's metrics; None for the global one."""
    queue_name: str = ""
    """The work queue's name, the ``name`` label of its ``workqueue_*`` metrics: give
    kube-controller-manager's (``root_ca_cert_publisher``), so that alerts on KCM's queues
    keep working. Empty (the default) for the controller's name."""
    rate_limit_scale: tuple[float, float] = (1.0, 1.0)
    """How the controller's API client scales ``--kube-api-qps`` and ``--kube-api-burst``
    (which mean kube-controller-manager's setting): upstream gives some controllers a
    client of their own with more (its namespace controller: 20 times the QPS, 100 times
    the burst). Defaults to (1, 1)."""


class Context:
    """What a reconciler is built from and works with: the controller's name, its mirror,
    its API clients (typed: :attr:`client`; raw: :attr:`api`; both fenced by
    construction), its children, expectations and options, and its own parsed flags."""

    def __init__(
        self,
        controller: Controller[Any],
        api: KubeClient | None,
        flags: argparse.Namespace,
    ) -> None:
        self._controller = controller
        self._api = api
        self.name: str = controller.name
        self.mirror: Mirror = controller.mirror
        self.options: ControllerOptions = controller.options
        self.flags = flags
        """The controller's own flags (:meth:`ControllerBuilder.flags`), parsed."""
        self.expectations = Expectations()
        """The controller's expectations (one TTL: five minutes, as upstream)."""
        self.primary: Resource = controller.definition.primary
        self._recorders: dict[tuple[str, str, Resource], EventRecorder] = {}
        self._client = Client(api) if api is not None else None

    @property
    def api(self) -> KubeClient:
        """The raw API client (``arequest`` for the odd call): every write is fenced by
        the lease and told to the mirror.

        Raises:
            RuntimeError: the controller was built without one (a read-only driver).
        """
        if self._api is None:
            raise RuntimeError(f"controller {self.name!r} was built without an API client")
        return self._api

    @property
    def client(self) -> Client:
        """The typed API client: ``ctx.client(JOBS).update_status(job, status)`` (see
        :mod:`steward.runtime.client`); fenced and observed as :attr:`api`.

        Raises:
            RuntimeError: the controller was built without an API client.
        """
        if self._client is None:
            raise RuntimeError(f"controller {self.name!r} was built without an API client")
        return self._client

    def may_reconcile(self) -> bool:
        """True unless a manager session exists and this instance does not hold its lease."""
        return self._controller.may_reconcile()

    @property
    def types(self) -> TypeFollower | None:
        """For a controller over every type, what follows discovery for it (its
        ``on_error`` hook, its ``errors``); None for the others."""
        return self._controller.follower

    def enqueue(self, key: Any, after: float = 0.0) -> None:
        """Queue a key from the reconciler, at once or ``after`` seconds (upstream's
        ``queue.Add`` inside a sync: the garbage collector queues the blocking dependents
        of an owner it looks at). Keys queued while standing by wait for the workers."""
        queue = self._controller.pool.queue
        if after > 0:
            queue.add_after(key, after)
        else:
            queue.add(key)

    def event_recorder(
        self,
        component: str,
        reporting_component: str = "",
        clock: Callable[[], Any] = utc_now,
        *,
        about: Resource | None = None,
    ) -> EventRecorder:
        """The :class:`EventRecorder` for objects of the primary type (or of ``about``), as
        ``component`` (reported by ``reporting_component``, default
        ``steward.io/<component>``); one per component, reporter and type. Events still in
        flight at shutdown are sent before the controller stops."""
        reporter = reporting_component or f"steward.io/{component}"
        subject = about or self.primary
        recorder = self._recorders.get((component, reporter, subject))
        if recorder is None:
            recorder = self._recorders[(component, reporter, subject)] = EventRecorder(
                self.api,
                api_version=subject.api_version,
                kind=subject.kind,
                component=component,
                reporting_component=reporter,
                clock=clock,
            )
        return recorder

    def children(
        self,
        child: Resource,
        *,
        events: EventRecorder | None = None,
        finalizers: Sequence[str] = (),
        strategic: bool = True,
    ) -> Children:
        """The children of type ``child`` of the primary type: created and deleted with
        ``events``' Events (None: silently) under the controller's expectations, claimed
        with ``finalizers`` (:class:`~steward.runtime.children.Children`)."""
        return Children(
            self.client(child),
            self.primary,
            self.expectations,
            events,
            finalizers=finalizers,
            strategic=strategic,
        )

    async def is_current(self, obj: dict[str, Any]) -> bool:
        """Whether the API server still has ``obj`` (an object of the primary type) at the
        version it carries: a fresh, uncached read. False when the server's is newer (say,
        a predecessor wrote it just before it stopped, and that write is still on its way to
        the mirror) or the object is gone. A sync that is about to act on something it
        cannot undo (create children) asks this first."""
        meta = obj.get("metadata") or {}
        try:
            fresh = await self.client(self.primary).get(meta.get("namespace", ""), meta["name"])
        except NotFoundError:
            return False
        return bool(
            (fresh.get("metadata") or {}).get("resourceVersion") == meta.get("resourceVersion")
        )

    async def close_events(self) -> None:
        """Send every recorder's queued Events, then stop its sender."""
        for recorder in self._recorders.values():
            await recorder.close()


ReconcileFunction = Callable[[Context, Request], Awaitable[Result]]
"""A reconciler written as one function: ``async def reconcile(ctx, request) -> Result``."""

Factory = Callable[[Context], R]
"""Builds the reconciler from the controller's :class:`Context`."""

Mapper = Callable[[R, MirrorObject], Iterable[Request]]
"""The keys an object of another type maps to, asked of the reconciler (an unbound method
such as ``MyReconciler.owners_of``, or any function of ``(reconciler, obj)``)."""

ChangeMapper = Callable[[R, Change], Iterable[Request]]
"""The keys a change of another type maps to, asked of the reconciler with the old and the
new object together (``change.old`` is None but for updates)."""

Observer = Callable[[R, Change], None]
"""Runs for every change before its keys are queued (an unbound method of the reconciler,
such as ``MyReconciler.observe``); it must not block."""


class _FunctionReconciler:
    def __init__(self, ctx: Context, fn: ReconcileFunction) -> None:
        self.ctx = ctx
        self.fn = fn

    async def reconcile(self, request: Request) -> Result:
        return await self.fn(self.ctx, request)


@dataclass(frozen=True)
class _SourceSpec(Generic[R]):
    rtype: Resource
    kind: str  # "object", "owner", "adopters", "mapped", "changed", "read" or "every"
    predicates: tuple[Predicate, ...]
    mapper: Mapper[R] | None = None
    change_mapper: ChangeMapper[R] | None = None
    expect: bool = False
    """For "owner": lower the owner's expectations as the mirror shows children."""
    selector: SelectorOf = spec_selector
    """For "adopters": where an owner keeps the selector its orphans are matched by."""
    subscription: TypeSubscription = EVERYTHING
    """What this source reads of its type (merged with the type's other sources)."""


@dataclass(frozen=True)
class ControllerDefinition(Generic[R]):
    """A controller as declared (see :class:`ControllerBuilder`), not yet bound to an
    informer or an API server. :func:`steward.run` hosts it; :meth:`new` binds it."""

    name: str
    primary: Resource
    factory: Factory[R]
    sources: tuple[_SourceSpec[R], ...] = ()
    observers: tuple[Observer[R], ...] = ()
    indexers: tuple[tuple[str, Indexer], ...] = ()
    options: ControllerOptions = field(default_factory=ControllerOptions)
    add_flags: tuple[Callable[[argparse.ArgumentParser], object], ...] = ()
    beside_upstream: tuple[str, ...] | None = None
    """Flags that let this controller run beside upstream's controller of the same name
    (each side keeping to its own objects); None when the two must not run together."""
    alone: tuple[str, ...] = ()
    """Flags for when upstream's controller of the same name is off."""
    enabled_by_default: bool = True
    """Whether ``--controllers=*`` includes it, as kube-controller-manager's controllers
    that are off by default (``bootstrapsigner``, ``tokencleaner``) are not: those run
    only when named."""
    description: str = ""
    every: EveryType | None = None
    """For a controller over every type (:meth:`ControllerBuilder.for_every_type`): which
    types, and how they are followed."""
    every_from_flags: Callable[[argparse.Namespace, EveryType], EveryType] | None = None
    """Adjusts :attr:`every` to the controller's parsed flags (``--gc-ignored-resources``)."""

    def subscriptions(self) -> dict[Resource, TypeSubscription]:
        """What the controller reads of each type: its sources' subscriptions merged per
        type (steward.runtime.subscriptions).

        Raises:
            ValueError: two sources of one type ask for different selectors.
        """
        by_type: dict[Resource, list[TypeSubscription]] = {}
        for spec in self.sources:
            if spec.kind == "every":
                continue  # the types discovery lists, each with the spec's subscription
            by_type.setdefault(spec.rtype, []).append(spec.subscription)
        return {rtype: merge(rtype, subs) for rtype, subs in by_type.items()}

    def flag_parser(self, parser: Any = None) -> Any:
        """``parser`` (an argument parser or group; a new parser when None) with the
        controller's own flags added."""
        parser = parser or argparse.ArgumentParser(prog=self.name, add_help=False)
        for add in self.add_flags:
            add(parser)
        return parser

    def new(
        self,
        channel: grpc.aio.Channel,
        api: KubeClient | None = None,
        options: ControllerOptions | None = None,
        flags: argparse.Namespace | Sequence[str] | None = None,
    ) -> Controller[R]:
        """Bind the controller to an informer channel and an API client (which it fences
        and tells its mirror of; see the module docs). ``options`` default to the
        definition's; ``flags`` are the controller's own flags, parsed or as arguments
        (default: their defaults)."""
        parsed = (
            flags
            if isinstance(flags, argparse.Namespace)
            else self.flag_parser().parse_args(list(flags or ()))
        )
        return Controller(self, channel, api, options or self.options, parsed)


class Controller(Generic[R]):
    """One controller, bound and runnable; see the module docs. Built by
    :meth:`ControllerDefinition.new`."""

    def __init__(
        self,
        definition: ControllerDefinition[R],
        channel: grpc.aio.Channel,
        api: KubeClient | None,
        options: ControllerOptions,
        flags: argparse.Namespace,
    ) -> None:
        self.definition = definition
        self.name = definition.name
        self.options = options
        types = dict.fromkeys(
            t for t in [definition.primary, *(s.rtype for s in definition.sources)] if t != ANY_TYPE
        )
        self.primary = definition.primary
        self.subscriptions = definition.subscriptions()
        """What the controller reads of each type, as sent to the informer."""
        self.mirror = Mirror(
            channel,
            types,
            MirrorOptions(
                namespace=options.namespace,
                label_selector=options.label_selector,
                subscriber=self.name,
            ),
            dict(definition.indexers),
            self.subscriptions,
        )
        self.session: ManagerSession | None = None
        self.api = api.fenced(self.may_reconcile, self.mirror.written) if api is not None else None
        self.follower: TypeFollower | None = None
        """For a controller over every type: what keeps the mirror's types current."""
        if definition.every is not None:
            if self.api is None:
                raise ValueError(
                    f"controller {self.name!r} follows discovery: it needs an API client"
                )
            every = definition.every
            if definition.every_from_flags is not None:
                every = definition.every_from_flags(flags, every)
            self.follower = TypeFollower(self.mirror, Discovery(self.api), every, fixed=types)
        """The controller's own client, derived from the one it was handed: fenced by
        the lease, its writes told to the mirror."""
        self.context = Context(self, self.api, flags)
        factory = definition.factory
        if inspect.iscoroutinefunction(factory):
            function: Any = factory
            self.reconciler: R = _FunctionReconciler(self.context, function)  # type: ignore[assignment]
        else:
            self.reconciler = factory(self.context)
        reconciler = self.reconciler
        self._observers: list[Handler] = [
            expectation_observer(self.mirror, self.primary, spec.rtype, self.context.expectations)
            for spec in definition.sources
            if spec.kind == "owner" and spec.expect
        ]
        self._observers += [functools.partial(o, reconciler) for o in definition.observers]
        self._routes: dict[Resource, list[Source]] = {}
        self._every_routes: list[Source] = []
        """The sources of every followed type (not those of :attr:`_routes`)."""
        for spec in definition.sources:
            source: Source
            if spec.kind == "read":
                continue
            if spec.kind == "every":
                assert spec.change_mapper is not None
                self._every_routes.append(
                    EnqueueChanged(
                        functools.partial(spec.change_mapper, reconciler), spec.predicates
                    )
                )
                continue
            if spec.kind == "object":
                source = EnqueueObject(spec.predicates)
            elif spec.kind == "owner":
                source = EnqueueOwner(definition.primary, spec.predicates)
            elif spec.kind == "adopters":
                source = EnqueueAdopters(
                    self.mirror, definition.primary, spec.selector, spec.predicates
                )
            elif spec.kind == "changed":
                assert spec.change_mapper is not None
                source = EnqueueChanged(
                    functools.partial(spec.change_mapper, reconciler), spec.predicates
                )
            else:
                assert spec.mapper is not None
                source = EnqueueMapped(functools.partial(spec.mapper, reconciler), spec.predicates)
            self._routes.setdefault(spec.rtype, []).append(source)
        self._workers: asyncio.Task[None] | None = None
        self.pool = self._new_pool()
        self.mirror.add_handler(self._dispatch)
        metrics_for(self.options.registry).instance(self)

    # Wiring --------------------------------------------------------------------------------
    def _dispatch(self, change: Change) -> None:
        for observe in self._observers:
            try:
                observe(change)
            except Exception:  # an observer's bug must not stop the others or the keys
                log.exception(
                    "%s: observer failed on %s %r", self.name, change.kind.value, change.obj
                )
        routes = self._routes.get(change.obj.type)
        if routes is None:
            routes = self._every_routes
        for source in routes:
            source.handle(change, self._enqueue)

    def _enqueue(self, key: Request, context: TraceContext | None) -> None:
        self.pool.queue.add(key, context)

    # Status ----------------------------------------------------------------------------------
    def status(self) -> WorkerStatus:
        """Queue depth, busy workers, reconcile counts and the last error, now."""
        return self.pool.status()

    def active(self) -> bool:
        """Whether the workers are running (this instance is the active one)."""
        return self._workers is not None

    def instance_state(self) -> tuple[bool, int, int, int]:
        """(mirror synced, mirror reconnects, fenced writes, manager epoch): the
        ``steward_*`` metrics (:class:`steward.runtime.metrics.Instance`)."""
        return (
            self.mirror.has_synced(),
            self.mirror.reconnects,
            self.api.fenced_writes if self.api is not None else 0,
            self.session.epoch if self.session is not None else 0,
        )

    def heartbeat_status(self) -> manager_pb2.InstanceStatus:
        """The pool's status as the manager's heartbeat carries it."""
        st = self.pool.status()
        counts = st.reconciles
        status = manager_pb2.InstanceStatus(
            queue_depth=st.queue_depth,
            busy_workers=st.busy_workers,
            reconciles=manager_pb2.ReconcileCounts(
                success=counts.get("success", 0),
                requeue=counts.get("requeue", 0) + counts.get("requeue_after", 0),
                error=counts.get("error", 0),
                terminal_error=counts.get("terminal_error", 0),
            ),
            drained=self._workers is None,
        )
        if st.last_error is not None:
            status.last_error = f"{st.last_error.request}: {st.last_error.message}"
            status.last_error_time.FromSeconds(int(st.last_error.at))
        return status

    def may_reconcile(self) -> bool:
        """True unless a manager session exists and this instance does not hold the lease."""
        return self.session is None or self.session.holds_lease()

    def requeue_when_current(self, request: Request, obj: MirrorObject) -> None:
        """Queue ``request`` again once the mirror shows the controller's own last write of
        ``obj`` (after :data:`STALE_RECHECK` seconds at the latest)."""
        loop = asyncio.get_running_loop()
        fired = False

        def requeue() -> None:
            nonlocal fired
            if not fired:
                fired = True
                timer.cancel()
                self.pool.queue.add(request)

        timer = loop.call_later(STALE_RECHECK, requeue)
        self.mirror.when_current(obj, requeue)

    async def reconcile_once(self, request: Request) -> Result:
        """Reconcile one key now, exactly as a worker does (lease check, reads guarded
        against copies older than the controller's own writes), outside the queue."""
        return await _Guarded(self.reconciler, self).reconcile(request)  # type: ignore[arg-type]

    # Running ---------------------------------------------------------------------------------
    async def run(self, manager: str | None = None, session: SessionOptions | None = None) -> None:
        """Run until cancelled (see the module docs). With ``manager`` (host:port), the
        workers run only while the manager makes this instance active."""
        tasks: dict[str, asyncio.Task[None]] = {
            "mirror": asyncio.create_task(self.mirror.run(), name=f"{self.name}-mirror")
        }
        if self.follower is not None:
            tasks["types"] = asyncio.create_task(self.follower.run(), name=f"{self.name}-types")
        if manager is not None:
            opts = replace(session) if session is not None else SessionOptions(controller=self.name)
            if not opts.watches:
                opts.watches = [t.wire for t in self.mirror.watched_types()]
            self.session = ManagerSession(
                manager,
                opts,
                status=self.heartbeat_status,
                on_start=self._on_start,
                on_drain=self._on_drain,
                on_stop=self._on_stop,
            )
            tasks["session"] = asyncio.create_task(self.session.run(), name=f"{self.name}-session")
        else:
            # Alone, the instance is active from the moment its watch opens: the stream's
            # own snapshot already holds everything the informer held then.
            self._on_start(0, barrier=self.mirror.has_synced())
        try:
            done, _ = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # the mirror's or the session's error, if any
        finally:
            await self._stop_workers(graceful=True)
            await self.context.close_events()
            if self.session is not None:
                with contextlib.suppress(Exception):
                    await self.session.close()
            for task in tasks.values():
                task.cancel()
            for task in tasks.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _on_start(self, epoch: int, *, barrier: bool = True) -> None:
        if self._workers is not None:
            return
        log.info("controller %s: active (epoch %d), starting workers", self.name, epoch)
        # The pool's queue already holds what changed while standing by, with the events'
        # trace contexts, so the first reconciles continue those events' traces.
        self._workers = asyncio.create_task(self._work(barrier), name=f"{self.name}-workers")

    async def _work(self, barrier: bool) -> None:
        await self.mirror.wait_synced()  # usually long done: the mirror syncs while standing by
        if barrier:
            # The watch predates this start: what the predecessor wrote just before it
            # stopped may still be on its way to this mirror; reconciling without it
            # would, say, create a Job's pod again.
            started = time.monotonic()
            await self.mirror.catch_up()
            log.info(
                "controller %s: mirror caught up with the informer in %.3fs",
                self.name,
                time.monotonic() - started,
            )
        log.info("controller %s: %d workers", self.name, self.options.max_concurrent_reconciles)
        self._enqueue_primary()
        resync = None
        if self.options.resync_period:
            resync = asyncio.create_task(self._resync(self.options.resync_period))
        try:
            await self.pool.run()
        finally:
            if resync is not None:
                resync.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await resync

    def _enqueue_primary(self) -> None:
        if self.primary == ANY_TYPE:
            return  # no type of its own: its keys come from the followed types' changes
        for obj in self.mirror.objects(self.primary):
            self.pool.queue.add(Request(obj.namespace, obj.name))

    async def _resync(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            self._enqueue_primary()

    async def _on_drain(self) -> None:
        await self._stop_workers(graceful=True)

    async def _on_stop(self, reason: str) -> None:
        log.info("controller %s: no longer active (%s), stopping workers", self.name, reason)
        await self._stop_workers(graceful=False)

    async def _stop_workers(self, *, graceful: bool) -> None:
        task, self._workers = self._workers, None
        if task is None:
            return
        task.cancel()
        if not graceful:
            await asyncio.sleep(0)
            task.cancel()  # a second cancellation skips the grace period
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self.pool = self._new_pool()  # a fresh queue collects events while standing by

    def _new_pool(self) -> WorkerPool:
        return WorkerPool(
            self.name,
            _Guarded(self.reconciler, self),  # type: ignore[arg-type]
            options=WorkerOptions(
                max_concurrent_reconciles=self.options.max_concurrent_reconciles,
                shutdown_grace_seconds=self.options.shutdown_grace_seconds,
                registry=self.options.registry,
                max_retries=self.options.max_retries,
                backoff_base_seconds=self.options.backoff_base_seconds,
                backoff_max_seconds=self.options.backoff_max_seconds,
                queue_name=self.options.queue_name,
            ),
        )


class _Guarded:
    """Runs each reconcile only while holding the lease, with the mirror's reads guarded
    against copies older than the controller's own writes."""

    def __init__(self, inner: Reconciler, controller: Controller[Any]) -> None:
        self.inner = inner
        self.controller = controller

    async def reconcile(self, request: Request) -> Result:
        if not self.controller.may_reconcile():
            # The workers are about to be stopped; whoever is active next reconciles it.
            return Result(requeue_after=1.0)
        try:
            with guard_reads(self.controller.mirror):
                return await self.inner.reconcile(request)
        except StaleRead as err:
            log.debug("%s: %s: %s; waiting for it", self.controller.name, request, err)
            self.controller.requeue_when_current(request, err.obj)
            return Result()


class ControllerBuilder(Generic[R]):
    """Fluent declaration of a controller: one primary type, owned and mapped types,
    observers, indexes, options and flags; :meth:`complete` gives the definition."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._primary: Resource | None = None
        self._sources: list[_SourceSpec[R]] = []
        self._observers: list[Observer[R]] = []
        self._options = ControllerOptions()
        self._indexers: dict[str, Indexer] = {}
        self._flags: list[Callable[[argparse.ArgumentParser], object]] = []
        self._beside: tuple[str, ...] | None = None
        self._alone: tuple[str, ...] = ()
        self._enabled_by_default = True
        self._description = ""
        self._every: EveryType | None = None
        self._every_from_flags: Callable[[argparse.Namespace, EveryType], EveryType] | None = None

    def for_every_type(
        self,
        mapper: ChangeMapper[R],
        *predicates: Predicate,
        verbs: Sequence[str] = ("list", "watch"),
        ignored: Iterable[tuple[str, str]] = (),
        period: float = 30.0,
        fields: Sequence[str] | None = None,
        metadata_only: bool = True,
        from_flags: Callable[[argparse.Namespace, EveryType], EveryType] | None = None,
    ) -> ControllerBuilder[R]:
        """In place of a primary type, every type the API server serves with all of
        ``verbs`` but the ``ignored`` (group, plural) pairs, followed as discovery changes
        (every ``period`` seconds; :mod:`steward.runtime.everytype`): each change of any of
        them goes to ``mapper(reconciler, change)``, which says which keys it concerns (any
        hashable key: the reconciler is handed what the mapper queued). Metadata only by
        default (``fields`` adds paths). ``from_flags(flags, spec)`` adjusts the spec to
        the controller's parsed flags. Other sources may be declared beside it; their
        types are watched as declared."""
        if self._primary is not None:
            raise ValueError(f"controller {self.name!r} already has a primary type")
        self._primary = ANY_TYPE
        sub = subscription(fields=fields, metadata_only=metadata_only)
        self._every = EveryType(tuple(verbs), frozenset(ignored), period, sub)
        self._every_from_flags = from_flags
        self._sources.append(
            _SourceSpec(ANY_TYPE, "every", predicates, change_mapper=mapper, subscription=sub)
        )
        return self

    def for_(
        self,
        rtype: Resource,
        *predicates: Predicate,
        fields: Sequence[str] | None = None,
        metadata_only: bool = False,
        label_selector: str = "",
        field_selector: str = "",
    ) -> ControllerBuilder[R]:
        """The primary type: each change queues the object's own key. Its ``kind`` is
        needed for :meth:`owns`, :meth:`adopts`, Events and children.

        Every source takes ``fields`` (the paths its reconciler reads of each object, a
        projection) and ``metadata_only``; the default is the whole object. The informer
        then sends only those paths, and withholds changes that touch none of them
        (steward.runtime.subscriptions; reading another path raises ProjectionError).
        ``label_selector`` and ``field_selector`` (the informer's: ``metadata.name``,
        ``metadata.namespace``) narrow the primary type to the objects they select, as
        for :meth:`watches` (a controller of one ConfigMap receives no other)."""
        if self._primary is not None:
            raise ValueError(f"controller {self.name!r} already has a primary type")
        self._primary = rtype
        sub = subscription(
            fields=fields,
            metadata_only=metadata_only,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        self._sources.append(_SourceSpec(rtype, "object", predicates, subscription=sub))
        return self

    def _needs_kind(self, what: str) -> Resource:
        if self._primary is None or not self._primary.kind:
            raise ValueError(f"{what}() needs for_() first, of a resource with its kind")
        return self._primary

    def owns(
        self,
        rtype: Resource,
        *predicates: Predicate,
        expect: bool = False,
        orphans: bool = False,
        fields: Sequence[str] | None = None,
        metadata_only: bool = False,
    ) -> ControllerBuilder[R]:
        """A type whose objects the primary type controls: a change queues the key of the
        controlling owner (old and new, when the controller changed). With ``expect``,
        the controller's expectations of the owner are lowered first as the mirror shows
        each child appear or go (:func:`~steward.runtime.children.expectation_observer`):
        declare it when the reconciler creates or deletes them with
        :meth:`Context.children`.

        Only objects the primary's kind controls are received (and with ``orphans``,
        those without a controller too); ``fields`` and ``metadata_only`` as for
        :meth:`for_`."""
        primary = self._needs_kind("owns")
        sub = subscription(
            owned_by=[primary], orphans=orphans, fields=fields, metadata_only=metadata_only
        )
        self._sources.append(
            _SourceSpec(rtype, "owner", predicates, expect=expect, subscription=sub)
        )
        return self

    def adopts(
        self,
        rtype: Resource,
        *predicates: Predicate,
        selector: SelectorOf = spec_selector,
        fields: Sequence[str] | None = None,
        metadata_only: bool = False,
    ) -> ControllerBuilder[R]:
        """A type whose orphans the primary type adopts: an orphan's change queues every
        object of the primary type in its namespace whose ``selector`` (default
        ``spec.selector``) matches its labels
        (:class:`~steward.runtime.source.EnqueueAdopters`). Only orphans are received
        by this source; ``fields`` and ``metadata_only`` as for :meth:`for_`."""
        self._needs_kind("adopts")
        sub = subscription(owned_by=(), orphans=True, fields=fields, metadata_only=metadata_only)
        self._sources.append(
            _SourceSpec(rtype, "adopters", predicates, selector=selector, subscription=sub)
        )
        return self

    def watches(
        self,
        rtype: Resource,
        mapper: Mapper[R],
        *predicates: Predicate,
        **reads: Any,
    ) -> ControllerBuilder[R]:
        """Any other type: ``mapper(reconciler, obj)`` says which keys a changed object
        concerns (for an update, the old object's keys too). A mapper that raises is
        logged and queues nothing. ``reads`` narrow what is received, as
        :func:`~steward.runtime.subscriptions.subscription` takes them: ``owned_by``
        (resource types of the controller owners kept), ``orphans``,
        ``label_selector``, ``field_selector``, ``fields``, ``metadata_only`` and
        ``selected_by`` (``(SERVICES, "spec.selector")``: only the objects some object
        of that type selects)."""
        self._sources.append(
            _SourceSpec(rtype, "mapped", predicates, mapper, subscription=subscription(**reads))
        )
        return self

    def watches_changes(
        self,
        rtype: Resource,
        mapper: ChangeMapper[R],
        *predicates: Predicate,
        **reads: Any,
    ) -> ControllerBuilder[R]:
        """Any other type, mapped by the whole change: ``mapper(reconciler, change)`` says
        which keys it concerns, seeing the old and the new object at once (for keys that
        depend on what changed). A mapper that raises is logged and queues nothing.
        ``reads`` as for :meth:`watches`."""
        self._sources.append(
            _SourceSpec(
                rtype,
                "changed",
                predicates,
                change_mapper=mapper,
                subscription=subscription(**reads),
            )
        )
        return self

    def reads(self, rtype: Resource, **reads: Any) -> ControllerBuilder[R]:
        """A type the reconciler reads from the mirror but whose changes queue nothing
        (upstream's listers without event handlers: the HPA controller's pods, read at
        each periodic sync). ``reads`` as for :meth:`watches`."""
        self._sources.append(_SourceSpec(rtype, "read", (), subscription=subscription(**reads)))
        return self

    def observe(self, observer: Observer[R]) -> ControllerBuilder[R]:
        """Run ``observer(reconciler, change)`` for every change, before any key is queued
        (the place to lower expectations; see the module docs for the order)."""
        self._observers.append(observer)
        return self

    def with_options(self, options: ControllerOptions) -> ControllerBuilder[R]:
        """Default options (the host's flags override workers and namespace)."""
        self._options = options
        return self

    def with_index(self, name: str, indexer: Indexer) -> ControllerBuilder[R]:
        """Declare an index of the mirror (for ``mirror.by_index(type, name, value)``)."""
        self._indexers[name] = indexer
        return self

    def flags(self, add: Callable[[argparse.ArgumentParser], object]) -> ControllerBuilder[R]:
        """Declare flags of the controller's own (``add(parser)`` adds them); the parsed
        values are the reconciler's ``ctx.flags``."""
        self._flags.append(add)
        return self

    def beside_upstream(
        self, flags: Sequence[str] | None, alone: Sequence[str] = ()
    ) -> ControllerBuilder[R]:
        """How the local control plane runs this controller: ``flags`` let it run beside
        upstream's controller of the same name (None: never together), ``alone`` are
        given when upstream's is off."""
        self._beside = tuple(flags) if flags is not None else None
        self._alone = tuple(alone)
        return self

    def disabled_by_default(self) -> ControllerBuilder[R]:
        """Off unless named (``--controllers=*,name``), as upstream keeps its controller of
        the same name (:attr:`ControllerDefinition.enabled_by_default`)."""
        self._enabled_by_default = False
        return self

    def describe(self, text: str) -> ControllerBuilder[R]:
        """What ``--help`` says the controller does."""
        self._description = text
        return self

    @overload
    def complete(self, reconciler: ReconcileFunction) -> ControllerDefinition[Any]: ...
    @overload
    def complete(self, reconciler: Factory[R]) -> ControllerDefinition[R]: ...
    def complete(self, reconciler: Factory[R] | ReconcileFunction) -> ControllerDefinition[Any]:
        """The definition. ``reconciler`` is either a factory taking the :class:`Context`
        (a class whose ``__init__`` takes it will do) whose result has ``async def
        reconcile(request)``, or one ``async def reconcile(ctx, request)``."""
        if self._primary is None:
            raise ValueError(f"controller {self.name!r} needs a primary type: call for_()")
        return ControllerDefinition(
            name=self.name,
            primary=self._primary,
            factory=reconciler,  # type: ignore[arg-type]
            sources=tuple(self._sources),
            observers=tuple(self._observers),
            indexers=tuple(self._indexers.items()),
            options=self._options,
            add_flags=tuple(self._flags),
            beside_upstream=self._beside,
            alone=self._alone,
            enabled_by_default=self._enabled_by_default,
            description=self._description,
            every=self._every,
            every_from_flags=self._every_from_flags,
        )
