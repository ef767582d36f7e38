"""A controller: mirror → sources → work queue → workers → reconciler, wired and run as one.

Build one with :class:`ControllerBuilder` (``ControllerManagedBy(mgr).For(..).Owns(..)`` in
controller-runtime)::

    controller = (
        ControllerBuilder("configmap-labeller")
        .for_(CONFIGMAPS, kind="ConfigMap")
        .complete(channel, lambda mirror: Labeller(mirror, api))
    )
    await controller.run()          # blocks until cancelled

# Start-up and shutdown
``run`` starts the mirror, waits until every watched type has synced (a reconcile never
sees a half-filled cache), then runs the workers. Cancelling ``run`` stops taking work,
lets in-flight reconciles finish within the grace period, and closes the watch. If the
informer refuses the watch for good, ``run`` raises
:class:`~steward.runtime.mirror.MirrorError`.

# With a manager
Given a manager address, the controller registers with it
(:class:`~steward.runtime.session.ManagerSession`) and runs its workers only while the
manager says it is the active instance: START starts them (after a full resync of the
primary type, so nothing that changed while standing by is missed), DRAIN stops them
gracefully, STOP or a lost lease stops them at once — the lease is lost before another
instance may start, so two instances never reconcile together. Before its first reconcile
a promoted instance waits until its mirror holds everything the informer holds
(:meth:`~steward.runtime.mirror.Mirror.catch_up`). Every worker also checks
the lease before each reconcile. The mirror keeps syncing while standing by, so a
promoted standby starts with a warm cache. Heartbeats carry the pool's status. Shutdown
deregisters, so a standby takes over without waiting for the lease to lapse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import grpc
from prometheus_client import CollectorRegistry

from steward.kube import KubeClient
from steward.runtime.mirror import Change, Indexer, Mirror, MirrorOptions, TypeKey, type_key
from steward.runtime.reconcile import Reconciler, Request, Result
from steward.runtime.session import ManagerSession, SessionOptions
from steward.runtime.source import (
    EnqueueMapped,
    EnqueueObject,
    EnqueueOwner,
    Mapper,
    Predicate,
    Source,
)
from steward.runtime.workers import WorkerOptions, WorkerPool, WorkerStatus
from steward.runtime.workqueue import TraceContext
from steward.v1 import informer_pb2 as pb
from steward.v1 import manager_pb2

log = logging.getLogger(__name__)


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
    """Every so many seconds, enqueue every object of the primary type again (level
    triggering's safety net). None (the default) for never."""
    shutdown_grace_seconds: float = 30.0
    """How long in-flight reconciles may finish on shutdown. Defaults to 30."""
    registry: CollectorRegistry | None = field(default=None, compare=False)
    """Prometheus registry for the controller's metrics; None for the global one."""


class Controller:
    """One controller, wired; see the module docs. Use :class:`ControllerBuilder`."""

    def __init__(
        self,
        name: str,
        channel: grpc.aio.Channel,
        primary: pb.ResourceType,
        sources: Sequence[tuple[pb.ResourceType, Source]],
        reconciler: Reconciler | Callable[[Mirror], Reconciler],
        options: ControllerOptions | None = None,
        indexers: dict[str, Indexer] | None = None,
    ) -> None:
        self.name = name
        self.options = options or ControllerOptions()
        types = {type_key(primary): primary}
        for rtype, _ in sources:
            types.setdefault(type_key(rtype), rtype)
        self.primary = type_key(primary)
        self.mirror = Mirror(
            channel,
            types.values(),
            MirrorOptions(
                namespace=self.options.namespace,
                label_selector=self.options.label_selector,
                subscriber=name,
            ),
            indexers,
        )
        self.reconciler: Reconciler = (
            cast(Reconciler, reconciler)
            if hasattr(reconciler, "reconcile") and not isinstance(reconciler, type)
            else reconciler(self.mirror)  # a factory (a class taking the mirror, too)
        )
        self.session: ManagerSession | None = None
        self._workers: asyncio.Task[None] | None = None
        self.pool = self._new_pool()
        self._routes: dict[TypeKey, list[Source]] = {}
        for rtype, source in sources:
            self._routes.setdefault(type_key(rtype), []).append(source)
        self.mirror.add_handler(self._dispatch)

    def _dispatch(self, change: Change) -> None:
        for source in self._routes.get(change.obj.type, ()):
            source.handle(change, self._enqueue)

    def _enqueue(self, key: Request, context: TraceContext | None) -> None:
        self.pool.queue.add(key, context)

    def status(self) -> WorkerStatus:
        """Queue depth, busy workers, reconcile counts and the last error, now."""
        return self.pool.status()

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

    async def run(self, manager: str | None = None, session: SessionOptions | None = None) -> None:
        """Run until cancelled (see the module docs). With ``manager`` (host:port), run the
        workers only while the manager makes this instance active."""
        if manager is None:
            await self._run_alone()
            return
        opts = session or SessionOptions(controller=self.name)
        if not opts.watches:
            opts.watches = list(self.mirror.watched_types())
        self.session = ManagerSession(
            manager,
            opts,
            status=self.heartbeat_status,
            on_start=self._on_start,
            on_drain=self._on_drain,
            on_stop=self._on_stop,
        )
        mirror = asyncio.create_task(self.mirror.run(), name=f"{self.name}-mirror")
        session_task = asyncio.create_task(self.session.run(), name=f"{self.name}-session")
        try:
            done, _ = await asyncio.wait(
                {mirror, session_task}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                task.result()  # the mirror's or the session's error, if any
        finally:
            await self._stop_workers(graceful=True)
            with contextlib.suppress(Exception):
                await self.session.close()
            for task in (session_task, mirror):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # Manager callbacks ---------------------------------------------------------------------
    def _on_start(self, epoch: int) -> None:
        if self._workers is not None:
            return
        log.info("controller %s: active (epoch %d), starting workers", self.name, epoch)
        # The pool's queue already holds what changed while standing by, with the events'
        # trace contexts, so the first reconciles continue those events' traces.
        self._workers = asyncio.create_task(self._work(), name=f"{self.name}-workers")

    async def _work(self) -> None:
        await self.mirror.wait_synced()  # usually long done: the mirror syncs while standing by
        # Read barrier: what the predecessor wrote just before it stopped may still be on its
        # way to this mirror; reconciling without it would, say, create a Job's pod again.
        started = time.monotonic()
        await self.mirror.catch_up()
        log.info(
            "controller %s: mirror caught up with the informer in %.3fs",
            self.name,
            time.monotonic() - started,
        )
        for obj in self.mirror.objects(self.primary):
            self.pool.queue.add(Request(obj.namespace, obj.name))
        await self.pool.run()

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
            _Fenced(self.reconciler, self),
            options=WorkerOptions(
                max_concurrent_reconciles=self.options.max_concurrent_reconciles,
                shutdown_grace_seconds=self.options.shutdown_grace_seconds,
                registry=self.options.registry,
            ),
        )

    def fence(self, *clients: KubeClient) -> None:
        """Refuse the writes of ``clients`` while this instance does not hold the lease
        (their :attr:`~steward.kube.KubeClient.write_fence`): after a pause past the
        renew deadline, even a write already queued is not sent."""
        for api in clients:
            api.write_fence = self.may_reconcile

    def may_reconcile(self) -> bool:
        """True unless a manager session exists and this instance does not hold the lease."""
        return self.session is None or self.session.holds_lease()

    async def _run_alone(self) -> None:
        mirror = asyncio.create_task(self.mirror.run(), name=f"{self.name}-mirror")
        try:
            synced = asyncio.create_task(self.mirror.wait_synced())
            done, _ = await asyncio.wait({mirror, synced}, return_when=asyncio.FIRST_COMPLETED)
            if mirror in done:
                synced.cancel()
                mirror.result()  # raises the mirror's error
                return
            log.info(
                "controller %s: caches synced, starting %d workers",
                self.name,
                self.options.max_concurrent_reconciles,
            )
            tasks = [asyncio.create_task(self.pool.run(), name=f"{self.name}-workers")]
            if self.options.resync_period:
                tasks.append(asyncio.create_task(self._resync(self.options.resync_period)))
            try:
                done, _ = await asyncio.wait(
                    {mirror, tasks[0]}, return_when=asyncio.FIRST_COMPLETED
                )
                if mirror in done:
                    mirror.result()
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        finally:
            mirror.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mirror

    async def _resync(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            for obj in self.mirror.objects(self.primary):
                self.pool.queue.add(Request(obj.namespace, obj.name))


class _Fenced:
    """Checks the lease before every reconcile, so none starts after the lease is lost."""

    def __init__(self, inner: Reconciler, controller: Controller) -> None:
        self.inner = inner
        self.controller = controller

    async def reconcile(self, request: Request, contexts: Sequence[TraceContext]) -> Result:
        if not self.controller.may_reconcile():
            # The workers are about to be stopped; whoever is active next reconciles it.
            return Result(requeue_after=1.0)
        return await self.inner.reconcile(request, contexts)


class ControllerBuilder:
    """Fluent wiring of a :class:`Controller`: one primary type, owned and mapped types."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._primary: pb.ResourceType | None = None
        self._primary_kind = ""
        self._sources: list[tuple[pb.ResourceType, Source]] = []
        self._options = ControllerOptions()
        self._indexers: dict[str, Indexer] = {}

    def for_(
        self, rtype: pb.ResourceType, *predicates: Predicate, kind: str = ""
    ) -> ControllerBuilder:
        """The primary type: each change enqueues the object's own key. ``kind`` (e.g.
        "Job") is needed when the controller also :meth:`owns` other types."""
        if self._primary is not None:
            raise ValueError(f"controller {self.name!r} already has a primary type")
        self._primary = rtype
        self._primary_kind = kind
        self._sources.append((rtype, EnqueueObject(predicates)))
        return self

    def owns(self, rtype: pb.ResourceType, *predicates: Predicate) -> ControllerBuilder:
        """A type whose objects the primary type controls: a change enqueues the key of the
        controlling owner (when it is of the primary kind)."""
        if self._primary is None or not self._primary_kind:
            raise ValueError("owns() needs for_(..., kind=...) first")
        source = EnqueueOwner(self._primary.group, self._primary_kind, predicates)
        self._sources.append((rtype, source))
        return self

    def watches(
        self, rtype: pb.ResourceType, mapper: Mapper, *predicates: Predicate
    ) -> ControllerBuilder:
        """Any other type: ``mapper`` says which keys a changed object concerns."""
        self._sources.append((rtype, EnqueueMapped(mapper, predicates)))
        return self

    def with_options(self, options: ControllerOptions) -> ControllerBuilder:
        self._options = options
        return self

    def with_index(self, name: str, indexer: Indexer) -> ControllerBuilder:
        """Declare an index of the mirror (for ``mirror.by_index(type, name, value)``)."""
        self._indexers[name] = indexer
        return self

    def complete(
        self, channel: grpc.aio.Channel, reconciler: Reconciler | Callable[[Mirror], Reconciler]
    ) -> Controller:
        """Build the controller. ``reconciler`` may be a factory taking the mirror."""
        if self._primary is None:
            raise ValueError(f"controller {self.name!r} needs a primary type: call for_()")
        return Controller(
            self.name,
            channel,
            self._primary,
            self._sources,
            reconciler,
            self._options,
            self._indexers,
        )
