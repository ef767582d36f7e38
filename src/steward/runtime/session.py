"""The instance side of the manager's Session: register, heartbeat, obey commands, fence.

A :class:`ManagerSession` keeps one controller instance registered with the manager
(``steward.v1.ManagerService/Session``). It sends a heartbeat with the instance's status
every retry period, runs the START / DRAIN / STOP callbacks, and exposes
:attr:`ManagerSession.active` and :meth:`ManagerSession.holds_lease`, which a runtime
checks before taking work.

# Fencing
The instance reconciles only while the manager keeps acknowledging its heartbeats:
:meth:`ManagerSession.holds_lease` is true only until ``renew_deadline`` after *sending*
the last heartbeat the manager acknowledged as ACTIVE with the current epoch. The
manager renews the lease when that heartbeat *arrives* (later) and promotes nobody
before ``lease_duration`` after it; since ``renew_deadline < lease_duration``, this
instance has stopped before any other starts. START itself only arms this: the instance
becomes active once a heartbeat sent after the START is acknowledged in time.

# Recovery
When the stream breaks (manager restart, new leader, network), the session keeps its
state and reconnects with exponential backoff (from ``reconnect_initial`` up to the
retry period), registering again with the same instance id; the manager recognises the
holder and it stays active with the same epoch, provided that happens before the renew
deadline — otherwise it drops ``active`` (``on_stop``) and waits for a new START.
ALREADY_EXISTS and INVALID_ARGUMENT end :meth:`ManagerSession.run` with
:class:`RegistrationRefusedError`; FAILED_PRECONDITION (controller disabled) and every
other failure is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from steward.security import PLAINTEXT, ClientSecurity
from steward.v1 import informer_pb2, manager_pb2, manager_pb2_grpc

log = logging.getLogger(__name__)

RUNTIME_VERSION = "0.1.0"

StatusFn = Callable[[], manager_pb2.InstanceStatus | None]
"""Returns the instance's current status for a heartbeat (or None for an empty one)."""
StartFn = Callable[[int], Awaitable[None] | None]
"""Called with the epoch when the instance becomes active."""
DrainFn = Callable[[], Awaitable[None] | None]
"""Called on DRAIN: stop taking work, finish what is in flight, then return."""
StopFn = Callable[[str], Awaitable[None] | None]
"""Called with the reason when the instance stops being active (STOP, lease lost, close)."""


def default_instance_id() -> str:
    """``<hostname>-<pid>-<random>``: unique per process."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class RegistrationRefusedError(Exception):
    """The manager refused the registration for good (ALREADY_EXISTS, INVALID_ARGUMENT)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclass
class SessionOptions:
    """Who the instance is and how it reconnects. Only ``controller`` is required."""

    controller: str
    """Controller name (a DNS-1123 label)."""
    instance_id: str = field(default_factory=default_instance_id)
    """This process's id; defaults to hostname-pid-random."""
    language: str = "python"
    """Language of the runtime. Defaults to python."""
    runtime_version: str = RUNTIME_VERSION
    """Version of the runtime."""
    watches: Sequence[informer_pb2.ResourceType] = ()
    """Resource types the controller watches (for the operators' view)."""
    standby: bool = False
    """Wait as a standby when another instance holds the name. Defaults to False."""
    reconnect_initial: float = 0.1
    """First reconnect delay in seconds; doubles up to the retry period. Defaults to 0.1."""
    stop_timeout: float = 5.0
    """Seconds :meth:`ManagerSession.close` waits for the manager's goodbye. Defaults to 5."""
    security: ClientSecurity = PLAINTEXT
    """How to dial the manager (mTLS files, token); a new channel, with the files read
    again, on every reconnection. Defaults to plaintext (development)."""


class _End(enum.Enum):
    RECONNECT = "reconnect"
    STOPPED = "stopped"


class ManagerSession:
    """One controller instance's membership in the manager's registry (see module docs).

    :meth:`run` blocks until STOP, :meth:`close` or cancellation. Callbacks may be plain
    functions or coroutines; an exception in one is logged and does not end the session.
    """

    def __init__(
        self,
        target: str,
        options: SessionOptions,
        *,
        status: StatusFn | None = None,
        on_start: StartFn | None = None,
        on_drain: DrainFn | None = None,
        on_stop: StopFn | None = None,
    ) -> None:
        self.target = target
        self.options = options
        self._status = status
        self._on_start = on_start
        self._on_drain = on_drain
        self._on_stop = on_stop
        self.active = asyncio.Event()
        """Set while this instance may reconcile (also check :meth:`holds_lease`)."""
        self.registered = asyncio.Event()
        """Set once the manager has answered a registration."""
        self.role: manager_pb2.Role.ValueType = manager_pb2.ROLE_UNSPECIFIED
        self.epoch = 0
        """The epoch of the last START (the fencing token while active)."""
        self.holder = ""
        """For a standby, the active instance's id."""
        self.commands: list[manager_pb2.CommandType.ValueType] = []
        """Every command received, in order (for logs and tests)."""
        self.lease_duration = 15.0
        self.renew_deadline = 10.0
        self.retry_period = 2.0
        self._deadline = 0.0
        self._pending_start = False
        self._drained = False
        self._sequence = 0
        self._sent: dict[int, float] = {}
        self._call: (
            grpc.aio.StreamStreamCall[manager_pb2.SessionRequest, manager_pb2.SessionResponse]
            | None
        ) = None
        self._write_lock = asyncio.Lock()
        self._closing = False
        self._deregistered = False
        self._reconnect = asyncio.Event()

    # State --------------------------------------------------------------------------------
    def holds_lease(self) -> bool:
        """True while active and within the renew deadline of the last acknowledged
        heartbeat; checked against the clock now, so a process that was frozen sees False
        at once when it resumes."""
        return self.active.is_set() and time.monotonic() < self._deadline

    async def _call_back(
        self, fn: Callable[..., Awaitable[None] | None] | None, *args: object
    ) -> None:
        if fn is None:
            return
        try:
            result = fn(*args)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("session callback %s failed", getattr(fn, "__name__", fn))

    async def _become_active(self, deadline: float) -> None:
        self._pending_start = False
        self._deadline = deadline
        self.active.set()
        log.info("%s: active with epoch %d", self.options.controller, self.epoch)
        await self._call_back(self._on_start, self.epoch)

    async def _drop(self, reason: str) -> None:
        self._pending_start = False
        if self.active.is_set():
            self.active.clear()
            log.warning("%s: not active any more: %s", self.options.controller, reason)
            await self._call_back(self._on_stop, reason)

    # Running ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Stay registered until STOP or :meth:`close`; see the module docs for failures.

        Raises:
            RegistrationRefusedError: ALREADY_EXISTS or INVALID_ARGUMENT from the manager.
        """
        fence = asyncio.get_running_loop().create_task(self._fence())
        delay = self.options.reconnect_initial
        try:
            while not self._closing:
                try:
                    end = await self._connect_once()
                    if end is _End.STOPPED:
                        return
                    delay = self.options.reconnect_initial
                except RegistrationRefusedError:
                    await self._drop("registration refused")
                    raise
                except grpc.aio.AioRpcError as err:
                    if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
                        log.warning("%s: %s; retrying", self.options.controller, err.details())
                        delay = max(delay, self.retry_period)
                    elif err.code() in (
                        grpc.StatusCode.PERMISSION_DENIED,
                        grpc.StatusCode.UNAUTHENTICATED,
                    ):
                        # Retried (RBAC may be granted later), loudly and at the slowest
                        # pace: nothing changes until an operator acts.
                        log.error(
                            "%s: the manager refused this identity: %s %s; retrying",
                            self.options.controller,
                            err.code().name,
                            err.details(),
                        )
                        delay = max(delay, self.retry_period)
                    else:
                        log.info(
                            "%s: session ended: %s %s",
                            self.options.controller,
                            err.code().name,
                            err.details(),
                        )
                if self._closing:
                    return
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))  # noqa: S311 - jitter
                delay = min(delay * 2, self.retry_period)
        finally:
            fence.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fence
            if self.active.is_set():
                await self._drop("session ended")

    async def close(self, reason: str = "shutting down") -> None:
        """Stop being active (``on_stop``), deregister cleanly so a standby is promoted at
        once, and end :meth:`run`. Safe to call more than once or when not connected."""
        self._closing = True
        await self._drop(reason)
        call = self._call
        if call is not None and not self._deregistered:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await self._write(
                    manager_pb2.SessionRequest(
                        deregistration=manager_pb2.Deregistration(reason=reason)
                    )
                )
                self._deregistered = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.options.stop_timeout):
                        await call.code()
        self._reconnect.set()

    async def _write(self, request: manager_pb2.SessionRequest) -> None:
        call = self._call
        if call is None:
            return
        async with self._write_lock:
            await call.write(request)

    async def _heartbeat(self) -> None:
        self._sequence += 1
        status = None
        if self._status is not None:
            try:
                status = self._status()
            except Exception:
                log.exception("status callback failed")
        status = status if status is not None else manager_pb2.InstanceStatus()
        status.drained = self._drained
        self._sent[self._sequence] = time.monotonic()
        if len(self._sent) > 64:
            for seq in sorted(self._sent)[:-32]:
                del self._sent[seq]
        await self._write(
            manager_pb2.SessionRequest(
                heartbeat=manager_pb2.Heartbeat(sequence=self._sequence, status=status)
            )
        )

    async def _fence(self) -> None:
        """Drop ``active`` when the renew deadline passes without an acknowledgement."""
        while True:
            if self.active.is_set():
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    await self._drop(
                        f"no heartbeat acknowledged within the renew deadline "
                        f"({self.renew_deadline:g}s)"
                    )
                    self._reconnect.set()
                    continue
                await asyncio.sleep(min(remaining, 0.5))
            else:
                await asyncio.sleep(0.05)

    async def _connect_once(self) -> _End:
        opts = self.options
        async with opts.security.channel(self.target) as channel:
            stub = manager_pb2_grpc.ManagerServiceStub(channel)
            call = stub.Session()
            self._call = call
            self._reconnect.clear()
            self._sent.clear()
            try:
                sent = time.monotonic()
                await self._write(
                    manager_pb2.SessionRequest(
                        registration=manager_pb2.Registration(
                            controller=opts.controller,
                            instance_id=opts.instance_id,
                            language=opts.language,
                            runtime_version=opts.runtime_version,
                            watches=list(opts.watches),
                            standby=opts.standby,
                        )
                    )
                )
                first = await call.read()
                if first is grpc.aio.EOF:
                    return _End.RECONNECT
                assert isinstance(first, manager_pb2.SessionResponse)
                await self._registered(first.registration_result, sent)
                return await self._serve(call)
            except grpc.aio.AioRpcError as err:
                if err.code() in (
                    grpc.StatusCode.ALREADY_EXISTS,
                    grpc.StatusCode.INVALID_ARGUMENT,
                ):
                    raise RegistrationRefusedError(err.code(), err.details() or "") from err
                if err.code() == grpc.StatusCode.ABORTED:
                    await self._drop(err.details() or "aborted by the manager")
                raise
            finally:
                self._call = None
                call.cancel()

    async def _registered(self, result: manager_pb2.RegistrationResult, sent: float) -> None:
        self.lease_duration = result.lease_duration.ToNanoseconds() / 1e9 or self.lease_duration
        self.renew_deadline = result.renew_deadline.ToNanoseconds() / 1e9 or self.renew_deadline
        self.retry_period = result.retry_period.ToNanoseconds() / 1e9 or self.retry_period
        self.role = result.role
        self.holder = result.holder
        if result.role == manager_pb2.ROLE_ACTIVE and result.epoch == self.epoch:
            # The registration renewed our lease like a heartbeat would.
            if self.active.is_set():
                self._deadline = max(self._deadline, sent + self.renew_deadline)
        else:
            await self._drop(f"registered as {manager_pb2.Role.Name(result.role)}")
        self.registered.set()
        log.info(
            "%s: registered %s as %s (epoch %d)",
            self.options.controller,
            self.options.instance_id,
            manager_pb2.Role.Name(result.role),
            result.epoch,
        )

    async def _serve(
        self,
        call: grpc.aio.StreamStreamCall[manager_pb2.SessionRequest, manager_pb2.SessionResponse],
    ) -> _End:
        loop = asyncio.get_running_loop()
        beats = loop.create_task(self._beat_loop())
        reconnect = loop.create_task(self._reconnect.wait())
        reader = loop.create_task(self._read_loop(call))
        try:
            done, _ = await asyncio.wait({reader, reconnect}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                return reader.result()
            return _End.STOPPED if self._closing else _End.RECONNECT
        finally:
            for task in (beats, reconnect, reader):
                task.cancel()
            for task in (beats, reconnect, reader):
                # Failures of the helpers after the stream ended are moot; the caller
                # handles the stream's own status.
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task

    async def _beat_loop(self) -> None:
        while True:
            await self._heartbeat()
            await asyncio.sleep(self.retry_period)

    async def _read_loop(
        self,
        call: grpc.aio.StreamStreamCall[manager_pb2.SessionRequest, manager_pb2.SessionResponse],
    ) -> _End:
        drain: asyncio.Task[None] | None = None
        try:
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    return _End.STOPPED if self._deregistered else _End.RECONNECT
                assert isinstance(message, manager_pb2.SessionResponse)
                kind = message.WhichOneof("kind")
                if kind == "heartbeat_ack":
                    await self._acked(message.heartbeat_ack)
                elif kind == "command":
                    command = message.command
                    self.commands.append(command.type)
                    if command.type == manager_pb2.COMMAND_TYPE_START:
                        await self._start(command.epoch)
                    elif command.type == manager_pb2.COMMAND_TYPE_DRAIN:
                        drain = asyncio.get_running_loop().create_task(self._drain())
                    elif command.type == manager_pb2.COMMAND_TYPE_STOP:
                        await self._drop(f"STOP: {command.reason}")
                        self._closing = True
                        self._deregistered = True
                        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                            await self._write(
                                manager_pb2.SessionRequest(
                                    deregistration=manager_pb2.Deregistration(reason="told to stop")
                                )
                            )
        finally:
            if drain is not None:
                drain.cancel()

    async def _start(self, epoch: int) -> None:
        if self.active.is_set() and epoch == self.epoch:
            return
        await self._drop(f"restarted with epoch {epoch}")
        self.epoch = epoch
        self.role = manager_pb2.ROLE_ACTIVE
        self._pending_start = True
        self._drained = False
        await self._heartbeat()

    async def _acked(self, ack: manager_pb2.HeartbeatAck) -> None:
        sent = self._sent.pop(ack.sequence, None)
        if ack.role != manager_pb2.ROLE_ACTIVE or ack.epoch != self.epoch:
            if self.active.is_set():
                await self._drop(f"the manager says {manager_pb2.Role.Name(ack.role)}")
            return
        if sent is None:
            return
        deadline = sent + self.renew_deadline
        if time.monotonic() >= deadline:
            return  # too late to count
        if self._pending_start:
            await self._become_active(deadline)
        elif self.active.is_set():
            self._deadline = max(self._deadline, deadline)

    async def _drain(self) -> None:
        await self._call_back(self._on_drain)
        self._drained = True
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await self._heartbeat()
