"""The registry: who holds each controller name, who stands by, leases, promotion, enablement.

Everything here runs on one asyncio loop. A controller's record changes under its own
lock whenever the change is written to the API server first (taking or handing over the
lease, enablement); heartbeats only touch memory and have their renewal written in the
background, coalesced.

# Fencing
At most one instance of a name is ever active. An active instance's lease is renewed when
one of its heartbeats arrives (``expiry = arrival + lease_duration``). Another instance is
promoted only once ``expiry`` has passed, or at once after the holder deregistered
cleanly. The instance side stops reconciling when none of its heartbeats has been
acknowledged within ``renew_deadline`` of sending it; since ``renew_deadline <
lease_duration`` and a heartbeat is sent before it arrives, the old instance has stopped
before the new one is sent START. A registry that recovers the Leases (restart, new
leader) cannot know when the holders last renewed, so it gives each of them a full
``lease_duration`` from the moment it read them (client-go's observed-time rule).

# Errors
Refusals raise :class:`RegistryError` with the gRPC status code to answer:
INVALID_ARGUMENT (malformed names), NOT_FOUND (unknown controller), ALREADY_EXISTS
(name held, the message names the holder), FAILED_PRECONDITION (disabled), UNAVAILABLE
(the API server could not record a change; nothing changed), ABORTED (the stream no
longer speaks for the lease holder), RESOURCE_EXHAUSTED (a controller has
``max_standbys`` standbys already).

# Limits
What an instance sends is kept in memory, written to its Lease's annotations (which the
API server caps at 256 KiB) and shown by ListControllers, so it is bounded: a
registration's language and runtime version are at most :data:`MAX_INFO` characters, it
names at most :data:`MAX_WATCHES` watched types whose fields are at most
:data:`MAX_TYPE_FIELD` characters (else INVALID_ARGUMENT); a heartbeat's
``status.last_error`` is kept up to :data:`MAX_LAST_ERROR` characters (the rest is cut);
a controller has at most ``max_standbys`` standbys.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from steward.kube import ApiError
from steward.manager.enablement import Enablement, InvalidNameError, validate_name
from steward.manager.leases import ControllerLease, LeaseStore
from steward.manager.metrics import ManagerMetrics
from steward.v1 import informer_pb2, manager_pb2

log = logging.getLogger(__name__)

_INSTANCE_ID = re.compile(r"^[\x21-\x7e]{1,253}$")

MAX_INFO = 256
"""Longest language or runtime_version a registration may carry."""
MAX_WATCHES = 64
"""Most watched types a registration may name."""
MAX_TYPE_FIELD = 253
"""Longest group, version or resource of a watched type."""
MAX_LAST_ERROR = 4096
"""Characters of a heartbeat's status.last_error the registry keeps."""
DEFAULT_MAX_STANDBYS = 16


@dataclass(frozen=True)
class Timing:
    """Lease numbers; kube-controller-manager's defaults."""

    lease_duration: float = 15.0
    """Seconds a lease lives after its last renewal. Defaults to 15."""
    renew_deadline: float = 10.0
    """Seconds an instance may reconcile after sending an unacknowledged heartbeat.
    Defaults to 10; must be less than lease_duration."""
    retry_period: float = 2.0
    """Seconds between heartbeats. Defaults to 2; must be less than renew_deadline."""
    drain_timeout: float = 30.0
    """Seconds a draining instance has before it is sent STOP anyway. Defaults to 30."""

    def check(self) -> None:
        """Raise ValueError unless 0 < retry_period < renew_deadline < lease_duration."""
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "lease numbers must satisfy 0 < retry period < renew deadline < lease "
                f"duration, got {self.retry_period}, {self.renew_deadline}, "
                f"{self.lease_duration}"
            )
        if self.drain_timeout <= 0:
            raise ValueError(f"drain timeout must be positive, got {self.drain_timeout}")


class RegistryError(Exception):
    """A refused request: ``code`` is the gRPC status to answer, ``message`` says why."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Close:
    """Put in a connection's outbox to end its stream with this status."""

    code: grpc.StatusCode
    message: str = ""


@dataclass(eq=False)
class Connection:
    """One Session stream. The registry sends on it through :meth:`send` / :meth:`close`."""

    peer: str = ""
    caller: str = ""
    """Who the limits count it against: ``user <name>`` or ``connection <peer>``."""
    instance_id: str = ""
    controller: str = ""
    registration: manager_pb2.Registration | None = None
    registered_at: float = 0.0
    """Wall-clock time of the registration."""
    last_heartbeat: float = 0.0
    """Wall-clock time of the last heartbeat."""
    status: manager_pb2.InstanceStatus = field(default_factory=manager_pb2.InstanceStatus)
    outbox: asyncio.Queue[manager_pb2.SessionResponse | Close] = field(
        default_factory=asyncio.Queue
    )
    closed: bool = False
    stop_sent: bool = False

    def send(self, message: manager_pb2.SessionResponse) -> None:
        """Queue a response; ignored once the connection is closed."""
        if not self.closed:
            self.outbox.put_nowait(message)

    def command(self, kind: manager_pb2.CommandType.ValueType, epoch: int, reason: str) -> None:
        """Queue a command."""
        if kind == manager_pb2.COMMAND_TYPE_STOP:
            self.stop_sent = True
        self.send(
            manager_pb2.SessionResponse(
                command=manager_pb2.Command(type=kind, epoch=epoch, reason=reason)
            )
        )

    def close(self, code: grpc.StatusCode, message: str = "") -> None:
        """End the stream with ``code`` after what is queued; later sends are dropped."""
        if not self.closed:
            self.outbox.put_nowait(Close(code, message))
            self.closed = True


@dataclass(eq=False)
class Record:
    """One controller name: its persisted Lease plus the live connections."""

    lease: ControllerLease
    active: Connection | None = None
    """The holder's connection, when connected."""
    expiry: float = 0.0
    """Monotonic time the holder's lease lapses; meaningful when lease.holder is set."""
    renewed_wall: float = 0.0
    standbys: list[Connection] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    draining: bool = False
    drain_deadline: float = 0.0
    dirty: bool = False
    persisted_renew: float = 0.0
    writer: asyncio.Task[None] | None = None
    samples: collections.deque[tuple[float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=16)
    )

    @property
    def name(self) -> str:
        return self.lease.controller


def _timestamp(wall: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(wall * 1e9))
    return ts


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def _total(status: manager_pb2.InstanceStatus) -> int:
    r = status.reconciles
    return r.success + r.requeue + r.error + r.terminal_error


def validate_instance_id(instance_id: str) -> str:
    """Return ``instance_id`` if it is 1-253 printable ASCII characters without spaces.

    Raises:
        RegistryError: INVALID_ARGUMENT saying what is wrong.
    """
    if not _INSTANCE_ID.match(instance_id):
        raise RegistryError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"instance id {instance_id[:80]!r} must be 1 to 253 printable ASCII characters "
            "without spaces",
        )
    return instance_id


def validate_registration(reg: manager_pb2.Registration) -> None:
    """Check the sizes of what a registration carries (see the module docs' limits).

    Raises:
        RegistryError: INVALID_ARGUMENT naming the field and its limit.
    """
    for field_name, value in (("language", reg.language), ("runtime_version", reg.runtime_version)):
        if len(value) > MAX_INFO:
            raise RegistryError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"registration {field_name} is {len(value)} characters long; the most is "
                f"{MAX_INFO}",
            )
    if len(reg.watches) > MAX_WATCHES:
        raise RegistryError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"registration names {len(reg.watches)} watched types; the most is {MAX_WATCHES}",
        )
    for i, w in enumerate(reg.watches):
        if max(len(w.group), len(w.version), len(w.resource)) > MAX_TYPE_FIELD:
            raise RegistryError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"registration watches[{i}] has a group, version or resource longer than "
                f"{MAX_TYPE_FIELD} characters",
            )


def checked_name(name: str) -> str:
    """:func:`validate_name`, raising :class:`RegistryError` (INVALID_ARGUMENT)."""
    try:
        return validate_name(name)
    except InvalidNameError as err:
        raise RegistryError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None


class Registry:
    """The controllers, their holders and standbys (see the module docs).

    ``leading`` tells whether this manager may answer; the registry holds state only
    while :meth:`recover` has run and :meth:`reset` has not.
    """

    def __init__(
        self,
        store: LeaseStore,
        enablement: Enablement,
        timing: Timing,
        metrics: ManagerMetrics,
        leading: Callable[[], bool] = lambda: True,
        max_standbys: int = DEFAULT_MAX_STANDBYS,
    ) -> None:
        self.max_standbys = max_standbys
        """Standbys one controller may have; one more is refused RESOURCE_EXHAUSTED."""
        self.store = store
        self.enablement = enablement
        self.timing = timing
        self.metrics = metrics
        self.leading = leading
        self.records: dict[str, Record] = {}
        self.ready = False

    # Recovery and reset -----------------------------------------------------------------
    async def recover(self) -> None:
        """Load every controller Lease; holders get a full lease duration from now.

        Raises:
            ApiError: the Leases could not be read; the registry stays not ready.
        """
        await self.store.ensure_namespace()
        leases = await self.store.load_all()
        now = time.monotonic()
        self.records = {}
        overrides: dict[str, bool] = {}
        for lease in leases:
            record = Record(lease=lease)
            if lease.holder:
                record.expiry = now + self.timing.lease_duration
                record.renewed_wall = time.time()
            lease.standbys = []
            if lease.enabled_override is not None:
                overrides[lease.controller] = lease.enabled_override
            self.records[lease.controller] = record
        self.enablement.load_overrides(overrides)
        self.ready = True
        log.info(
            "recovered %d controllers from the Leases in %s: %s",
            len(leases),
            self.store.namespace,
            ", ".join(f"{n.controller}={n.holder or '-'}@{n.epoch}" for n in leases) or "none",
        )

    def reset(self, code: grpc.StatusCode, message: str) -> None:
        """Forget everything in memory and end every stream with ``code`` (leadership lost
        or shutting down). The Leases stay as they are for the next leader."""
        self.ready = False
        for record in self.records.values():
            if record.writer is not None:
                record.writer.cancel()
            for conn in [record.active, *record.standbys]:
                if conn is not None:
                    conn.close(code, message)
        self.records = {}

    def _require_ready(self) -> None:
        if not self.ready or not self.leading():
            raise RegistryError(
                grpc.StatusCode.UNAVAILABLE, "the manager is not serving the registry now"
            )

    def _record(self, name: str) -> Record:
        record = self.records.get(name)
        if record is None:
            record = Record(lease=ControllerLease(controller=name))
            self.records[name] = record
        return record

    # Registration -------------------------------------------------------------------------
    async def register(self, conn: Connection, reg: manager_pb2.Registration) -> None:
        """Register ``conn``: queue its RegistrationResult (and START when active).

        Raises:
            RegistryError: see the module docs; the connection gets nothing queued.
        """
        name = checked_name(reg.controller)
        validate_instance_id(reg.instance_id)
        validate_registration(reg)
        self._require_ready()
        decision = self.enablement.decide(name)
        if not decision.enabled:
            self.metrics.registrations.labels(name, "disabled").inc()
            raise RegistryError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"controller {name!r} is disabled ({decision.reason})",
            )
        record = self._record(name)
        async with record.lock:
            self._require_ready()
            now = time.monotonic()
            conn.instance_id = reg.instance_id
            conn.controller = name
            conn.registration = reg
            conn.registered_at = time.time()
            conn.last_heartbeat = conn.registered_at
            if record.lease.holder and record.expiry <= now:
                self._lapse(record, "lease expired")
                await self._promote(record, "previous holder's lease lapsed")
            lease = record.lease
            if lease.holder == reg.instance_id:
                # The holder again (reconnect or manager restart): it keeps its epoch.
                old = record.active
                if old is not None and old is not conn:
                    old.close(grpc.StatusCode.ABORTED, "replaced by a newer stream of the instance")
                record.active = conn
                self._renew(record, now)
                self._result(conn, manager_pb2.ROLE_ACTIVE, lease.epoch, "")
                conn.command(manager_pb2.COMMAND_TYPE_START, lease.epoch, "lease held")
                self.metrics.registrations.labels(name, "active").inc()
                log.info("%s: holder %s is back (epoch %d)", name, reg.instance_id, lease.epoch)
                return
            if lease.holder:
                if not reg.standby:
                    self.metrics.registrations.labels(name, "already_exists").inc()
                    connected = "connected" if record.active else "not connected"
                    raise RegistryError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"controller {name!r} is held by instance {lease.holder!r} (epoch "
                        f"{lease.epoch}, {connected}, lease expires in "
                        f"{max(0.0, record.expiry - now):.1f}s); register with standby to wait",
                    )
                others = [s for s in record.standbys if s.instance_id != reg.instance_id]
                if len(others) >= self.max_standbys:
                    raise RegistryError(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"controller {name!r} has {len(others)} standbys already, the most "
                        "the manager keeps (--max-standbys)",
                    )
                self._add_standby(record, conn)
                self._result(conn, manager_pb2.ROLE_STANDBY, lease.epoch, lease.holder)
                self.metrics.registrations.labels(name, "standby").inc()
                log.info("%s: %s stands by (holder %s)", name, reg.instance_id, lease.holder)
                return
            await self._acquire(record, conn, "registered")
            self._result(conn, manager_pb2.ROLE_ACTIVE, record.lease.epoch, "")
            conn.command(manager_pb2.COMMAND_TYPE_START, record.lease.epoch, "registered")
            self.metrics.registrations.labels(name, "active").inc()

    def _result(
        self, conn: Connection, role: manager_pb2.Role.ValueType, epoch: int, holder: str
    ) -> None:
        t = self.timing
        conn.send(
            manager_pb2.SessionResponse(
                registration_result=manager_pb2.RegistrationResult(
                    role=role,
                    epoch=epoch,
                    lease_duration=_duration(t.lease_duration),
                    renew_deadline=_duration(t.renew_deadline),
                    retry_period=_duration(t.retry_period),
                    holder=holder,
                )
            )
        )

    def _add_standby(self, record: Record, conn: Connection) -> None:
        for old in [s for s in record.standbys if s.instance_id == conn.instance_id]:
            old.close(grpc.StatusCode.ABORTED, "replaced by a newer stream of the instance")
            record.standbys.remove(old)
        record.standbys.append(conn)
        self._mark_dirty(record)

    async def _acquire(self, record: Record, conn: Connection, why: str) -> None:
        """Make ``conn`` the holder with a new epoch; written to the API server first.

        Raises:
            RegistryError: UNAVAILABLE when the write failed (nothing changed).
        """
        reg = conn.registration
        assert reg is not None
        new = copy.deepcopy(record.lease)
        wall = datetime.datetime.now(datetime.UTC)
        if new.epoch:
            new.transitions += 1
        new.epoch += 1
        new.holder = conn.instance_id
        new.acquire_time = new.renew_time = wall
        new.lease_duration = self.timing.lease_duration
        new.language = reg.language
        new.runtime_version = reg.runtime_version
        new.watches = [(w.group, w.version, w.resource) for w in reg.watches]
        new.standbys = [s.instance_id for s in record.standbys if s is not conn]
        try:
            await self.store.write(new)
        except ApiError as err:
            raise RegistryError(
                grpc.StatusCode.UNAVAILABLE,
                f"cannot record the lease of {record.name!r} in the API server: {err}",
            ) from err
        record.lease = new
        record.active = conn
        if conn in record.standbys:
            record.standbys.remove(conn)
        now = time.monotonic()
        self._renew(record, now)
        record.persisted_renew = now
        record.samples.clear()
        self.metrics.transitions.labels(record.name, why).inc()
        log.info("%s: %s active, epoch %d (%s)", record.name, conn.instance_id, new.epoch, why)

    def _renew(self, record: Record, now: float) -> None:
        record.expiry = now + self.timing.lease_duration
        record.renewed_wall = time.time()

    def _lapse(self, record: Record, why: str) -> None:
        """The holder's lease ended without a clean deregistration: forget the holder."""
        old = record.active
        log.warning("%s: lease of %s lapsed (%s)", record.name, record.lease.holder, why)
        if old is not None:
            old.command(manager_pb2.COMMAND_TYPE_STOP, record.lease.epoch, f"lease lost: {why}")
            old.close(grpc.StatusCode.ABORTED, f"lease lost: {why}")
        record.active = None
        record.lease.holder = ""
        self.metrics.lapses.labels(record.name).inc()
        self._mark_dirty(record)

    async def _promote(self, record: Record, why: str) -> None:
        """Hand the free lease to the first standby still connected (call under the lock)."""
        if record.lease.holder or not self.enablement.is_enabled(record.name):
            return
        while record.standbys:
            conn = record.standbys[0]
            if conn.closed:
                record.standbys.pop(0)
                continue
            try:
                await self._acquire(record, conn, why)
            except RegistryError as err:
                log.warning("%s: cannot promote %s yet: %s", record.name, conn.instance_id, err)
                return
            conn.command(manager_pb2.COMMAND_TYPE_START, record.lease.epoch, why)
            return

    # Heartbeats and leaving ----------------------------------------------------------------
    def heartbeat(self, conn: Connection, beat: manager_pb2.Heartbeat) -> manager_pb2.HeartbeatAck:
        """Record a heartbeat; renew the lease when ``conn`` is the active holder.

        Raises:
            RegistryError: ABORTED when ``conn`` is neither the holder nor a standby any
                more, or was told to STOP; UNAVAILABLE when this manager stopped leading.
        """
        self._require_ready()
        record = self.records.get(conn.controller)
        if record is None or conn.closed:
            raise RegistryError(grpc.StatusCode.ABORTED, "this stream holds no registration")
        conn.last_heartbeat = time.time()
        conn.status.CopyFrom(beat.status)
        if len(conn.status.last_error) > MAX_LAST_ERROR:
            conn.status.last_error = conn.status.last_error[:MAX_LAST_ERROR] + "... (cut)"
        now = time.monotonic()
        self.metrics.heartbeats.labels(record.name).inc()
        if conn is record.active and record.lease.holder == conn.instance_id:
            if conn.stop_sent:
                raise RegistryError(grpc.StatusCode.ABORTED, "told to stop; deregister")
            if record.expiry <= now:
                self._lapse(record, "lease expired before this heartbeat")
                raise RegistryError(grpc.StatusCode.ABORTED, "lease lost: expired")
            self._renew(record, now)
            record.samples.append((now, _total(beat.status)))
            if now - record.persisted_renew >= self.timing.retry_period:
                self._mark_dirty(record)
            if record.draining and beat.status.drained:
                conn.command(
                    manager_pb2.COMMAND_TYPE_STOP, record.lease.epoch, "controller disabled"
                )
            return manager_pb2.HeartbeatAck(
                sequence=beat.sequence, role=manager_pb2.ROLE_ACTIVE, epoch=record.lease.epoch
            )
        if conn in record.standbys:
            return manager_pb2.HeartbeatAck(
                sequence=beat.sequence, role=manager_pb2.ROLE_STANDBY, epoch=record.lease.epoch
            )
        raise RegistryError(grpc.StatusCode.ABORTED, "this instance no longer holds the lease")

    async def deregister(self, conn: Connection, reason: str) -> None:
        """``conn`` left cleanly: release its lease at once and promote a standby."""
        record = self.records.get(conn.controller)
        if record is None:
            return
        async with record.lock:
            if conn in record.standbys:
                record.standbys.remove(conn)
                self._mark_dirty(record)
            elif conn is record.active and record.lease.holder == conn.instance_id:
                log.info("%s: %s deregistered (%s)", record.name, conn.instance_id, reason)
                record.active = None
                record.lease.holder = ""
                record.draining = False
                self._mark_dirty(record)
                if self.ready and self.leading():
                    await self._promote(record, "previous holder deregistered")

    def disconnected(self, conn: Connection) -> None:
        """``conn``'s stream ended without deregistering: a standby is dropped, a holder
        keeps its lease until it lapses (it may reconnect)."""
        conn.closed = True
        record = self.records.get(conn.controller)
        if record is None:
            return
        if conn in record.standbys:
            record.standbys.remove(conn)
            self._mark_dirty(record)
        elif conn is record.active:
            log.info(
                "%s: session of holder %s ended; lease lapses in %.1fs unless it returns",
                record.name,
                conn.instance_id,
                max(0.0, record.expiry - time.monotonic()),
            )
            record.active = None

    # Periodic work ------------------------------------------------------------------------
    async def tick(self) -> None:
        """Lapse expired leases, promote standbys onto free leases, end overdue drains."""
        if not self.ready or not self.leading():
            return
        now = time.monotonic()
        for record in list(self.records.values()):
            due = (
                (record.lease.holder and record.expiry <= now)
                or (not record.lease.holder and record.standbys)
                or (record.draining and record.active and now >= record.drain_deadline)
            )
            if not due:
                continue
            async with record.lock:
                now = time.monotonic()
                if record.lease.holder and record.expiry <= now:
                    self._lapse(record, "no heartbeat renewed it")
                if not record.lease.holder:
                    await self._promote(record, "previous holder's lease lapsed")
                active = record.active
                if (
                    record.draining
                    and active is not None
                    and not active.stop_sent
                    and now >= record.drain_deadline
                ):
                    active.command(
                        manager_pb2.COMMAND_TYPE_STOP,
                        record.lease.epoch,
                        "controller disabled (drain timed out)",
                    )

    def _mark_dirty(self, record: Record) -> None:
        record.dirty = True
        if record.writer is None or record.writer.done():
            record.writer = asyncio.get_running_loop().create_task(self._write_back(record))

    async def _write_back(self, record: Record) -> None:
        """Write renewals and standby lists in the background, retrying every retry period."""
        while record.dirty and self.ready and self.records.get(record.name) is record:
            async with record.lock:
                record.dirty = False
                snap = copy.deepcopy(record.lease)
                if snap.holder:
                    snap.renew_time = datetime.datetime.fromtimestamp(
                        record.renewed_wall, datetime.UTC
                    )
                snap.standbys = [s.instance_id for s in record.standbys]
                started = time.monotonic()
                try:
                    await self.store.write(snap)
                except ApiError as err:
                    log.warning("%s: cannot write the Lease (will retry): %s", record.name, err)
                    record.dirty = True
                else:
                    record.lease.resource_version = snap.resource_version
                    record.lease.renew_time = snap.renew_time
                    record.lease.standbys = snap.standbys
                    record.persisted_renew = started
                    continue
            await asyncio.sleep(self.timing.retry_period)

    # Enablement ---------------------------------------------------------------------------
    def _known(self, name: str) -> Record | None:
        name = checked_name(name)
        self._require_ready()
        record = self.records.get(name)
        if record is None and name not in self.enablement.named():
            raise RegistryError(grpc.StatusCode.NOT_FOUND, f"no controller named {name!r} is known")
        return record

    async def set_enabled(self, name: str, enabled: bool) -> manager_pb2.Controller:
        """Enable or disable ``name`` at run time (written to its Lease first).

        Disabling sends DRAIN to the active instance (STOP follows once it reports
        drained, or after the drain timeout) and STOP to the standbys.

        Raises:
            RegistryError: INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE (see the module docs).
        """
        self._known(name)
        record = self._record(name)
        async with record.lock:
            new = copy.deepcopy(record.lease)
            new.enabled_override = enabled
            try:
                await self.store.write(new)
            except ApiError as err:
                raise RegistryError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"cannot record the enablement of {name!r} in the API server: {err}",
                ) from err
            record.lease.enabled_override = enabled
            record.lease.resource_version = new.resource_version
            self.enablement.overrides[name] = enabled
            log.info("%s: %s at run time", name, "enabled" if enabled else "disabled")
            if not enabled:
                for standby in record.standbys:
                    standby.command(
                        manager_pb2.COMMAND_TYPE_STOP, record.lease.epoch, "controller disabled"
                    )
                    standby.close(grpc.StatusCode.OK)
                record.standbys = []
                if record.active is not None and not record.draining:
                    record.draining = True
                    record.drain_deadline = time.monotonic() + self.timing.drain_timeout
                    record.active.command(
                        manager_pb2.COMMAND_TYPE_DRAIN, record.lease.epoch, "controller disabled"
                    )
                    if record.active.status.drained:
                        record.active.command(
                            manager_pb2.COMMAND_TYPE_STOP, record.lease.epoch, "controller disabled"
                        )
        return self.describe(record)

    # The operators' view ------------------------------------------------------------------
    def get(self, name: str) -> manager_pb2.Controller:
        """One controller.

        Raises:
            RegistryError: INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE.
        """
        record = self._known(name)
        if record is None:
            return self.describe(Record(lease=ControllerLease(controller=name)))
        return self.describe(record)

    def list_controllers(self) -> list[manager_pb2.Controller]:
        """Every known controller, by name.

        Raises:
            RegistryError: UNAVAILABLE when not leading.
        """
        self._require_ready()
        names = sorted(set(self.records) | self.enablement.named())
        return [
            self.describe(self.records.get(n) or Record(lease=ControllerLease(controller=n)))
            for n in names
        ]

    def describe(self, record: Record) -> manager_pb2.Controller:
        """The proto view of ``record``."""
        decision = self.enablement.decide(record.name)
        lease = record.lease
        now = time.monotonic()
        live_holder = bool(lease.holder) and record.expiry > now
        if not decision.enabled:
            state = (
                manager_pb2.CONTROLLER_STATE_DRAINING
                if live_holder
                else manager_pb2.CONTROLLER_STATE_DISABLED
            )
        elif live_holder and record.active is not None:
            state = manager_pb2.CONTROLLER_STATE_ACTIVE
        elif live_holder:
            state = manager_pb2.CONTROLLER_STATE_LAPSING
        else:
            state = manager_pb2.CONTROLLER_STATE_WAITING
        out = manager_pb2.Controller(
            name=record.name,
            state=state,
            enabled=decision.enabled,
            enablement_reason=decision.reason,
            holder=lease.holder,
            epoch=lease.epoch,
            watches=[
                informer_pb2.ResourceType(group=g, version=v, resource=r)
                for g, v, r in lease.watches
            ],
        )
        if lease.holder:
            out.renew_time.CopyFrom(_timestamp(record.renewed_wall))
        conns = [(record.active, manager_pb2.ROLE_ACTIVE)] + [
            (s, manager_pb2.ROLE_STANDBY) for s in record.standbys
        ]
        for conn, role in conns:
            if conn is None or conn.registration is None:
                continue
            out.instances.append(
                manager_pb2.InstanceInfo(
                    instance_id=conn.instance_id,
                    role=role,
                    language=conn.registration.language,
                    runtime_version=conn.registration.runtime_version,
                    registered_time=_timestamp(conn.registered_at),
                    last_heartbeat_time=_timestamp(conn.last_heartbeat),
                    status=conn.status,
                )
            )
        if len(record.samples) >= 2 and record.active is not None:
            (t0, n0), (t1, n1) = record.samples[0], record.samples[-1]
            if t1 > t0:
                out.reconciles_per_second = max(0, n1 - n0) / (t1 - t0)
        return out

    def session_counts(self) -> list[tuple[str, str, int]]:
        """(controller, role, connected instances) for the metrics."""
        rows = []
        for record in self.records.values():
            rows.append((record.name, "active", int(record.active is not None)))
            rows.append((record.name, "standby", len(record.standbys)))
        return rows
