"""What the controllers' tests share, built on :mod:`tests.services`: Steward's controller
run against a local control plane, the test's namespaces and API clients, waiting, and
the two sides of a differential scenario.

# A controller under test
A controller runs in this process, bound to an informer by a plaintext channel and to the
API server as its own identity (a key of the cluster's identities, with only its RBAC of
``deploy/rbac/``), watching the test's namespace (or every namespace):

- in the test's event loop: :func:`in_loop_informer` serves the informer there, and
  :func:`controllers` yields a :class:`Starter`, which starts the controller as often as
  the test says (:class:`Running`), every instance stopped at the end;
- on a loop of its own in a background thread (:class:`ControllerHost`, one informer for a
  package), started for each test's namespace and stopped after it: for tests that read
  and write the cluster synchronously while the controller works.

# Namespaces and clients
Setup and checks use the admin kubeconfig (:func:`admin_kube`). A test's namespace is
fresh (:func:`tests.services.new_namespace`, once pods may be made in it) and dropped
afterwards with whatever finalizers the test left on its pods (:func:`scoped_namespace`).
:func:`kube`, :func:`upstream_kube` and :func:`upstream_namespace` are fixtures of the
session's ``cluster`` (every upstream controller on) for a conftest to import. What no
component of a test's cluster keeps up (a node's Lease, a namespace's ``default``
ServiceAccount) a test renews on a thread of :func:`renewing` while it runs.

# Differential scenarios
A scenario runs on two sides, Steward's controller on one and upstream's on the other,
and compares what each wrote: with two control planes of a package's own, a
:class:`Side` each (the fixtures :func:`steward` and :func:`upstream`, for a conftest to
import beside its own ``steward_host``, ``upstream_plane`` and ``side_kind``); with
Steward's plane and the session's ``cluster``, the plane's own fixtures and
:func:`upstream_namespace`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from steward.cluster import LocalCluster
from steward.informer import InformerOptions, InformerServer
from steward.kube import ConflictError, KubeClient, NotFoundError, load_access
from steward.runtime.controller import Controller, ControllerDefinition
from steward.serving.security import DEVELOPMENT
from tests.services import RunningInformer, new_namespace

_T = TypeVar("_T")
_S = TypeVar("_S", bound="Side")

USER_AGENT = "steward-controller-test"
"""The user agent of the tests' own admin clients."""
LABELS = {"foo": "bar"}
"""The labels of upstream's integration tests (``labelMap()``)."""

log = logging.getLogger(__name__)


# Clients and namespaces ------------------------------------------------------------------
def admin_kube(
    plane: LocalCluster, user_agent: str = USER_AGENT, *, workers: int = 4
) -> Iterator[KubeClient]:
    """For a fixture to yield from: a raw JSON client with ``plane``'s admin kubeconfig
    (the test's own reads and writes), closed after."""
    api = KubeClient(load_access(str(plane.kubeconfig)), user_agent=user_agent, workers=workers)
    try:
        yield api
    finally:
        api.close()


def in_parallel(work: Callable[[Any], _T], items: Sequence[Any], workers: int = 8) -> list[_T]:
    """``work`` of each item on a pool of ``workers`` threads; the results in the items'
    order (the first exception raised is raised here)."""
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(work, items))


def drop_namespace(kube: KubeClient, ns: str) -> None:
    """Delete the namespace, first clearing finalizers a test left on its pods."""
    with contextlib.suppress(NotFoundError):
        for pod in kube.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items") or ():
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(NotFoundError, ConflictError):
                    kube.request(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                        {"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )
        with contextlib.suppress(ConflictError):  # being deleted already
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")


def scoped_namespace(kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """For a fixture to yield from: a fresh namespace named after the test, once pods may
    be made in it; dropped after (:func:`drop_namespace`)."""
    ns = new_namespace(kube, request)
    try:
        yield ns
    finally:
        drop_namespace(kube, ns)


@pytest.fixture
def kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of the session's cluster, where upstream's controllers run."""
    yield from admin_kube(cluster)


@pytest.fixture
def upstream_kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of the session's cluster: the upstream side of a scenario."""
    yield from admin_kube(cluster)


@pytest.fixture
def upstream_namespace(upstream_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of the session's cluster, dropped afterwards."""
    yield from scoped_namespace(upstream_kube, request)


# Paths, reads and writes ----------------------------------------------------------------
def resource_path(prefix: str, ns: str, plural: str, name: str = "") -> str:
    """The path of a namespaced collection (``prefix``: ``/api/v1``, ``/apis/apps/v1``),
    or of one object of it."""
    base = f"{prefix}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def update(
    kube: KubeClient,
    path: str,
    change: Callable[[dict[str, Any]], None],
    failure: str,
    *,
    subresource: str = "",
) -> dict[str, Any]:
    """Read the object at ``path``, ``change`` it and PUT it (to ``subresource``, e.g.
    ``/status``), again on a conflict; after 20 conflicts fail with ``failure``."""
    for _ in range(20):
        obj = kube.request("GET", path)
        change(obj)
        try:
            return kube.request("PUT", path + subresource, obj)
        except ConflictError:
            continue
    raise AssertionError(failure)


def now() -> str:
    """The time as the API server writes it (RFC 3339, seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# Waiting ---------------------------------------------------------------------------------
async def eventually(
    check: Callable[[], Any],
    what: str,
    within: float = 120.0,
    interval: float = 0.25,
    *,
    failure: Callable[[Any], str] | None = None,
) -> Any:
    """Poll ``check`` (in a thread) until it returns something truthy; return that. After
    ``within`` seconds fail naming ``what`` and the last value seen, or with what
    ``failure`` makes of that value."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(interval)
    pytest.fail(failure(last) if failure else f"timed out waiting for {what} (last: {last!r})")


async def stays(check: Callable[[], Any], what: str, for_seconds: float) -> None:
    """Fail as soon as ``check`` (in a thread) is falsy within ``for_seconds``."""
    deadline = time.monotonic() + for_seconds
    while time.monotonic() < deadline:
        if not await asyncio.to_thread(check):
            pytest.fail(f"{what} did not hold")
        await asyncio.sleep(0.25)


# Kept up in the background ---------------------------------------------------------------
@contextlib.contextmanager
def renewing(
    every: float, step: Callable[[], None], name: str, *, at_once: bool = True
) -> Iterator[None]:
    """Run ``step`` every ``every`` seconds (counted from the end of its last run) on a
    daemon thread named ``name`` while the block runs: a heartbeat no kubelet sends, an
    object no controller of the cluster makes.

    With ``at_once`` ``step`` first runs in the caller, before the block starts, and what
    it raises is the caller's: the block never starts against a cluster that refuses the
    step. Without it the first run is the thread's, ``every`` seconds in.

    # Errors
    On the thread an exception of ``step`` is logged (a warning, with its traceback) and
    the next run comes on time: a passing API error must not end the renewal. On exit
    the thread is told to stop and joined for at most ten seconds; a step stuck longer in
    a request is left to end on its daemon thread."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            try:
                step()
            except Exception:
                log.warning("%s: a run failed, again in %g s", name, every, exc_info=True)

    if at_once:
        step()
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


# A controller in the test's event loop ---------------------------------------------------
@contextlib.asynccontextmanager
async def in_loop_informer(plane: LocalCluster) -> AsyncIterator[str]:
    """A plaintext informer in the test's event loop, as the cluster's ``informer``
    identity: its address while the block runs."""
    async with in_loop_informer_server(plane) as server:
        yield f"127.0.0.1:{server.port}"


@contextlib.asynccontextmanager
async def in_loop_informer_server(plane: LocalCluster) -> AsyncIterator[InformerServer]:
    """:func:`in_loop_informer`, yielding the server itself (its fan-out's counts, its
    metrics)."""
    server = InformerServer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(plane.component_kubeconfig("informer")),
        )
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class Running:
    """A controller running in this event loop until :meth:`stop`."""

    def __init__(self, controller: Controller[Any]) -> None:
        self.controller = controller
        self.task = asyncio.create_task(controller.run())

    async def stop(self) -> None:
        """Cancel the controller; one that died on its own raises here, failing the test
        that ran it."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class Starter:
    """Starts instances of one controller (when a test says so, as often as it says):
    ``workers`` workers and the flags ``flags`` unless told otherwise, watching
    ``namespace`` (empty: every namespace)."""

    def __init__(
        self,
        definition: ControllerDefinition[Any],
        channel: grpc.aio.Channel,
        api: KubeClient,
        namespace: str = "",
        *,
        workers: int = 2,
        flags: Sequence[str] = (),
    ) -> None:
        self.definition = definition
        self.channel = channel
        self.api = api
        self.namespace = namespace
        self.workers = workers
        self.flags = tuple(flags)
        self.running: list[Running] = []
        self.mirrors: list[asyncio.Task[None]] = []

    def new(self, *flags: str, workers: int | None = None) -> Controller[Any]:
        """The controller with ``flags`` besides the starter's, bound but not running: the
        definition's options (queue name, resync period) with the starter's workers and
        namespace, and a resync period a flag of the controller's own sets (as
        ``--resource-quota-sync-period`` does), as the controller host gives them."""
        parsed = self.definition.flag_parser().parse_args([*self.flags, *flags])
        defaults = self.definition.options
        options = replace(
            defaults,
            max_concurrent_reconciles=self.workers if workers is None else workers,
            namespace=self.namespace,
            resync_period=getattr(parsed, "resync_period", defaults.resync_period),
        )
        return self.definition.new(self.channel, self.api, options, parsed)

    def start(self, *flags: str, workers: int | None = None) -> Running:
        """Run an instance (see :meth:`new`) until the end of the test."""
        running = Running(self.new(*flags, workers=workers))
        self.running.append(running)
        return running

    def run_mirror(self, controller: Controller[Any]) -> asyncio.Task[None]:
        """Run only the controller's mirror (no workers): the test reconciles by hand."""
        task = asyncio.create_task(controller.mirror.run())
        self.mirrors.append(task)
        return task

    async def stop(self) -> None:
        """Stop every instance and mirror started."""
        for running in self.running:
            await running.stop()
        for task in self.mirrors:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def controllers(
    definition: ControllerDefinition[Any],
    kubeconfig: Path,
    informer: str,
    namespace: str = "",
    *,
    workers: int = 2,
    flags: Sequence[str] = (),
) -> AsyncIterator[Starter]:
    """A :class:`Starter` of ``definition`` with the API client of ``kubeconfig`` (the
    controller's own identity) and a channel to ``informer``; whatever it started is
    stopped when the block ends."""
    api = KubeClient(
        load_access(str(kubeconfig)), user_agent=f"steward-{definition.name}", workers=8
    )
    try:
        async with grpc.aio.insecure_channel(informer) as channel:
            starter = Starter(definition, channel, api, namespace, workers=workers, flags=flags)
            try:
                yield starter
            finally:
                await starter.stop()
    finally:
        api.close()


# A controller on a loop of its own --------------------------------------------------------
class ControllerHost(RunningInformer):
    """Steward's informer for a control plane, and one controller beside it while a test
    runs, on an event loop of their own in a background thread: the controller as
    ``identity`` (a key of the cluster's identities, with only its RBAC of
    ``deploy/rbac/``), ``workers`` workers, its own ``flags``, watching one namespace."""

    def __init__(
        self,
        plane: LocalCluster,
        definition: ControllerDefinition[Any],
        identity: str,
        *,
        workers: int,
        flags: tuple[str, ...] = (),
    ) -> None:
        super().__init__(str(plane.component_kubeconfig("informer")), DEVELOPMENT)
        self.plane = plane
        self.definition = definition
        self.identity = identity
        self.workers = workers
        self.flags = flags
        self._controller: contextlib.AsyncExitStack | None = None

    def call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self._call(coro)

    def start(self, namespace: str) -> None:
        """Start the controller for ``namespace`` (one at a time)."""

        async def run() -> None:
            stack = contextlib.AsyncExitStack()
            starter = await stack.enter_async_context(
                controllers(
                    self.definition,
                    self.plane.component_kubeconfig(self.identity),
                    self.address,
                    namespace,
                    workers=self.workers,
                    flags=self.flags,
                )
            )
            self._controller = stack
            starter.start()

        self.call(run())

    def stop_controller(self) -> None:
        """Stop the controller (a controller that died on its own raises here: the test
        that ran it fails)."""

        async def stop() -> None:
            stack, self._controller = self._controller, None
            if stack is not None:
                await stack.aclose()

        self.call(stop())

    def close(self) -> None:
        try:
            self.stop_controller()
        finally:
            self.stop()


def hosted(
    plane: LocalCluster,
    definition: ControllerDefinition[Any],
    identity: str,
    *,
    workers: int,
    flags: tuple[str, ...] = (),
) -> Iterator[ControllerHost]:
    """For a fixture to yield from: a :class:`ControllerHost`, closed after."""
    host = ControllerHost(plane, definition, identity, workers=workers, flags=flags)
    try:
        yield host
    finally:
        host.close()


# The two sides of a differential scenario -------------------------------------------------
@dataclass
class Side:
    """One side of a scenario: its control plane, the plane's admin client and the test's
    namespace there. A controller's tests add their paths, reads and writes."""

    name: str
    kube: KubeClient
    ns: str
    plane: LocalCluster

    @property
    def pods_path(self) -> str:
        return resource_path("/api/v1", self.ns, "pods")

    def cleanup(self) -> None:
        """Undo what the test made outside its namespace (which goes anyway): nothing."""


@contextlib.contextmanager
def _side(
    kind: type[_S], name: str, plane: LocalCluster, request: pytest.FixtureRequest
) -> Iterator[_S]:
    kube = KubeClient(load_access(str(plane.kubeconfig)), user_agent=f"{USER_AGENT}-{name}")
    try:
        side = kind(name=name, kube=kube, ns=new_namespace(kube, request), plane=plane)
        try:
            yield side
        finally:
            try:
                side.cleanup()
            finally:
                drop_namespace(kube, side.ns)
    finally:
        kube.close()


@pytest.fixture
def steward(
    steward_host: ControllerHost, side_kind: type[Side], request: pytest.FixtureRequest
) -> Iterator[Side]:
    """The Steward side (a ``side_kind``): a fresh namespace of ``steward_host``'s plane,
    the host's controller watching it while the test runs."""
    with _side(side_kind, "steward", steward_host.plane, request) as side:
        steward_host.start(side.ns)
        try:
            yield side
        finally:
            steward_host.stop_controller()


@pytest.fixture
def upstream(
    upstream_plane: LocalCluster, side_kind: type[Side], request: pytest.FixtureRequest
) -> Iterator[Side]:
    """The upstream side (a ``side_kind``): a fresh namespace of ``upstream_plane``, where
    kube-controller-manager runs the controller."""
    with _side(side_kind, "upstream", upstream_plane, request) as side:
        yield side
