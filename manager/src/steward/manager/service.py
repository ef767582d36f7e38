"""The gRPC ManagerService: the Session stream and the unary controller RPCs over the registry.

# Errors
Each refusal ends only the call that caused it, with the registry's status code (see
:mod:`steward.manager.registry`). A Session whose first request is not a Registration,
that sends an empty request or a second Registration, or that registers nothing within
the registration timeout, ends with INVALID_ARGUMENT (DEADLINE_EXCEEDED for the timeout);
a holder whose stream breaks keeps its lease until it lapses. A replica that is not the
leader answers every RPC with UNAVAILABLE naming the leader. An unexpected failure is
logged and answered INTERNAL; it never stops the process.

# Limits
Bytes that are not a valid request message (truncated, corrupt, bad UTF-8) are
INVALID_ARGUMENT, for a unary call and for any message of a Session alike; a message over
gRPC's receive limit (4 MiB) is RESOURCE_EXHAUSTED before it reaches the service. A
caller may hold at most ``max_sessions_per_peer`` Sessions at once; one more is
RESOURCE_EXHAUSTED. A caller is its identity when callers are authenticated (RBAC), else
its connection (a client process's channels to one address usually share one).
Status messages keep at most
the first kilobyte of what they echo, so a refusal always fits in the response's
metadata. What a registration or heartbeat may carry is bounded by the registry
(:mod:`steward.manager.registry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import grpc

from steward.manager.enablement import InvalidNameError, validate_name
from steward.manager.registry import Close, Connection, Registry, RegistryError
from steward.serving.security import DEVELOPMENT, STEWARD_GROUP, AuthError, Guard, Identity
from steward.v1 import manager_pb2 as pb
from steward.v1 import manager_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_Context = grpc.aio.ServicerContext[Any, Any]

MAX_STATUS_MESSAGE = 1024
"""Bytes of UTF-8 a status message keeps (the rest is cut, saying how long it was)."""
DEFAULT_MAX_SESSIONS_PER_PEER = 100


class MalformedRequest:
    """What a request decodes to when its bytes are not a valid message (see
    :func:`add_to_server`); the service answers INVALID_ARGUMENT with :attr:`message`."""

    def __init__(self, message_type: str, error: Exception) -> None:
        self.message = f"malformed {message_type}: {error}"


def lenient(message_type: Any) -> Callable[[bytes], Any]:
    """A request deserializer that returns a :class:`MalformedRequest` instead of raising
    (gRPC would answer UNKNOWN, or break the Session, and log a traceback)."""
    name = message_type.DESCRIPTOR.full_name

    def decode(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except Exception as err:  # DecodeError and whatever else bad bytes provoke
            return MalformedRequest(name, err)

    return decode


class ManagerService(pb_grpc.ManagerServiceServicer):
    """Serves :class:`Registry`; ``not_leader`` says who leads when this replica does not."""

    def __init__(
        self,
        registry: Registry,
        not_leader: Callable[[], str | None],
        registration_timeout: float = 30.0,
        max_sessions_per_peer: int = DEFAULT_MAX_SESSIONS_PER_PEER,
        guard: Guard | None = None,
    ) -> None:
        self.registry = registry
        self.guard = guard if guard is not None else Guard(DEVELOPMENT, None)
        self.not_leader = not_leader
        self.registration_timeout = registration_timeout
        self.max_sessions_per_peer = max_sessions_per_peer
        """Sessions one caller may hold at once; one more is RESOURCE_EXHAUSTED."""
        self.connections: set[Connection] = set()

    async def _identify(self, context: _Context) -> Identity:
        try:
            return await self.guard.identify(context)
        except AuthError as err:
            await _abort(context, err.code, err.message)

    async def _authorize(self, identity: Identity, verb: str, name: str = "") -> None:
        """Raises RegistryError PERMISSION_DENIED unless ``identity`` may ``verb`` the
        controller ``name`` (RBAC: resource ``controllers`` of group ``steward.io``)."""
        if not self.guard.enabled:
            return
        if name:
            try:
                validate_name(name)
            except InvalidNameError as err:
                raise RegistryError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from err
        try:
            await self.guard.require(identity, verb, STEWARD_GROUP, "controllers", name=name)
        except AuthError as err:
            raise RegistryError(err.code, err.message) from err

    async def _check_leader(self, context: _Context) -> None:
        why = self.not_leader()
        if why is not None:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, why)

    async def Session(
        self,
        request_iterator: AsyncIterator[pb.SessionRequest | MalformedRequest],
        context: _Context,
    ) -> AsyncIterator[pb.SessionResponse]:
        """One instance's stream: a reader task feeds the registry, this loop writes."""
        await self._check_leader(context)
        identity = await self._identify(context)
        peer = context.peer() or "unknown"
        # Limits count per caller: its identity when callers are authenticated, else
        # its connection.
        caller = f"user {identity.user}" if self.guard.enabled else f"connection {peer}"
        held = sum(1 for c in self.connections if c.caller == caller)
        if held >= self.max_sessions_per_peer:
            await _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{caller} already holds {held} Sessions, the most the manager allows "
                "(--max-sessions-per-peer)",
            )
        conn = Connection(peer=peer, caller=caller)
        self.connections.add(conn)
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read(request_iterator, conn, identity))
        recheck = loop.create_task(self._recheck(conn, identity)) if self.guard.enabled else None
        try:
            while True:
                item = await conn.outbox.get()
                if isinstance(item, Close):
                    if item.code == grpc.StatusCode.OK:
                        return
                    await _abort(context, item.code, item.message)
                yield item
        finally:
            reader.cancel()
            if recheck is not None:
                recheck.cancel()
            self.connections.discard(conn)
            self.registry.disconnected(conn)

    async def _recheck(self, conn: Connection, identity: Identity) -> None:
        """Re-authorize a registered Session every interval: when ``register`` of its
        name is revoked, the Session ends PERMISSION_DENIED (its lease lapses as after a
        broken stream, and a standby allowed to hold the name takes over). The API
        server being away keeps the Session."""
        interval = self.guard.security.recheck_interval
        while not conn.closed:
            await asyncio.sleep(interval)
            if not conn.controller or conn.closed:
                continue
            try:
                await self._authorize(identity, "register", conn.controller)
            except RegistryError as err:
                if err.code == grpc.StatusCode.UNAVAILABLE:
                    log.warning("cannot re-authorize %s's Session now: %s", identity, err.message)
                    continue
                log.info("ending %s's Session of %s: %s", identity, conn.controller, err.message)
                conn.close(err.code, err.message)
                return

    async def _read(
        self,
        requests: AsyncIterator[pb.SessionRequest | MalformedRequest],
        conn: Connection,
        identity: Identity,
    ) -> None:
        try:
            try:
                first = await asyncio.wait_for(anext(requests), self.registration_timeout)
            except StopAsyncIteration:
                conn.close(grpc.StatusCode.INVALID_ARGUMENT, "stream ended before registering")
                return
            except TimeoutError:
                conn.close(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no registration within {self.registration_timeout:g}s",
                )
                return
            if isinstance(first, MalformedRequest):
                conn.close(grpc.StatusCode.INVALID_ARGUMENT, first.message)
                return
            kind = first.WhichOneof("kind")
            if kind != "registration":
                conn.close(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the first request must be a registration, got {kind or 'an empty request'}",
                )
                return
            await self._authorize(identity, "register", first.registration.controller)
            await self.registry.register(conn, first.registration)
            async for request in requests:
                if isinstance(request, MalformedRequest):
                    conn.close(grpc.StatusCode.INVALID_ARGUMENT, request.message)
                    return
                kind = request.WhichOneof("kind")
                if kind == "heartbeat":
                    ack = self.registry.heartbeat(conn, request.heartbeat)
                    conn.send(pb.SessionResponse(heartbeat_ack=ack))
                elif kind == "deregistration":
                    await self.registry.deregister(conn, request.deregistration.reason)
                    conn.close(grpc.StatusCode.OK)
                    return
                else:
                    conn.close(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "already registered: expected a heartbeat or a deregistration, got "
                        f"{kind or 'an empty request'}",
                    )
                    return
            # Half-closed without deregistering: like a broken stream.
            conn.close(grpc.StatusCode.OK)
        except RegistryError as err:
            conn.close(err.code, err.message)
        except asyncio.CancelledError:
            raise
        except grpc.RpcError as err:
            conn.close(grpc.StatusCode.CANCELLED, f"stream broke: {err}")
        except Exception as err:
            if conn.closed:
                return  # the stream was ended by the registry; reading it then fails
            log.exception("session of %s failed", conn.instance_id or conn.peer)
            conn.close(grpc.StatusCode.INTERNAL, f"internal error: {err}")

    async def _unary(
        self, context: _Context, fn: Callable[[], Any], request: Any, verb: str, name: str = ""
    ) -> Any:
        if isinstance(request, MalformedRequest):
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, request.message)
        await self._check_leader(context)
        identity = await self._identify(context)
        try:
            await self._authorize(identity, verb, name)
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result
        except RegistryError as err:
            await _abort(context, err.code, err.message)
        except Exception as err:
            log.exception("request failed")
            await _abort(context, grpc.StatusCode.INTERNAL, f"internal error: {err}")

    async def ListControllers(
        self, request: pb.ListControllersRequest, context: _Context
    ) -> pb.ListControllersResponse:
        """Every known controller."""
        found = await self._unary(context, self.registry.list_controllers, request, "list")
        return pb.ListControllersResponse(controllers=found)

    async def GetController(
        self, request: pb.GetControllerRequest, context: _Context
    ) -> pb.GetControllerResponse:
        """One controller."""
        found = await self._unary(
            context, lambda: self.registry.get(request.name), request, "get", _name(request)
        )
        return pb.GetControllerResponse(controller=found)

    async def EnableController(
        self, request: pb.EnableControllerRequest, context: _Context
    ) -> pb.EnableControllerResponse:
        """Enable a controller at run time."""
        found = await self._unary(
            context,
            lambda: self.registry.set_enabled(request.name, True),
            request,
            "enable",
            _name(request),
        )
        return pb.EnableControllerResponse(controller=found)

    async def DisableController(
        self, request: pb.DisableControllerRequest, context: _Context
    ) -> pb.DisableControllerResponse:
        """Disable a controller at run time: DRAIN then STOP its active instance."""
        found = await self._unary(
            context,
            lambda: self.registry.set_enabled(request.name, False),
            request,
            "disable",
            _name(request),
        )
        return pb.DisableControllerResponse(controller=found)

    def close_all(self, code: grpc.StatusCode, message: str) -> None:
        """End every open Session stream with ``code`` (shutting down)."""
        for conn in list(self.connections):
            with contextlib.suppress(Exception):
                conn.close(code, message)


def _name(request: Any) -> str:
    return "" if isinstance(request, MalformedRequest) else str(request.name)


async def _abort(context: _Context, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, bounded_message(message))
    raise AssertionError("unreachable")  # pragma: no cover - abort raises


def bounded_message(message: str, limit: int = MAX_STATUS_MESSAGE) -> str:
    """``message`` cut to ``limit`` bytes of UTF-8, saying how long it was: a status
    message travels in the response's metadata, which clients cap (8 KiB by default)."""
    encoded = message.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return message
    kept = encoded[:limit].decode("utf-8", "ignore")
    return f"{kept}... (cut; {len(message)} characters in all)"


def add_to_server(service: ManagerService, server: grpc.aio.Server) -> None:
    """Register ``service`` like the generated ``add_ManagerServiceServicer_to_server``,
    except that undecodable requests reach it as :class:`MalformedRequest`."""
    methods = pb.DESCRIPTOR.services_by_name["ManagerService"].methods_by_name
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "Session": grpc.stream_stream_rpc_method_handler(
            service.Session,
            request_deserializer=lenient(pb.SessionRequest),
            response_serializer=pb.SessionResponse.SerializeToString,
        )
    }
    unary: dict[str, tuple[Callable[..., Any], Any]] = {
        "ListControllers": (service.ListControllers, pb.ListControllersRequest),
        "GetController": (service.GetController, pb.GetControllerRequest),
        "EnableController": (service.EnableController, pb.EnableControllerRequest),
        "DisableController": (service.DisableController, pb.DisableControllerRequest),
    }
    for method, (behaviour, request_type) in unary.items():
        response_type = methods[method].output_type.full_name.rsplit(".", 1)[-1]
        handlers[method] = grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=lenient(request_type),
            response_serializer=getattr(pb, response_type).SerializeToString,
        )
    assert set(handlers) == set(methods), "every RPC of the service is registered"
    name = pb.DESCRIPTOR.services_by_name["ManagerService"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
