"""The gRPC ManagerService: the Session stream and the unary controller RPCs over the registry.

# Errors
Each refusal ends only the call that caused it, with the registry's status code (see
:mod:`steward.manager.registry`). A Session whose first request is not a Registration,
that sends an empty request or a second Registration, or that registers nothing within
the registration timeout, ends with INVALID_ARGUMENT (DEADLINE_EXCEEDED for the timeout);
a holder whose stream breaks keeps its lease until it lapses. A replica that is not the
leader answers every RPC with UNAVAILABLE naming the leader. An unexpected failure is
logged and answered INTERNAL; it never stops the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import grpc

from steward.manager.registry import Close, Connection, Registry, RegistryError
from steward.v1 import manager_pb2 as pb
from steward.v1 import manager_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_Context = grpc.aio.ServicerContext[Any, Any]


class ManagerService(pb_grpc.ManagerServiceServicer):
    """Serves :class:`Registry`; ``not_leader`` says who leads when this replica does not."""

    def __init__(
        self,
        registry: Registry,
        not_leader: Callable[[], str | None],
        registration_timeout: float = 30.0,
    ) -> None:
        self.registry = registry
        self.not_leader = not_leader
        self.registration_timeout = registration_timeout
        self.connections: set[Connection] = set()

    async def _check_leader(self, context: _Context) -> None:
        why = self.not_leader()
        if why is not None:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, why)

    async def Session(
        self, request_iterator: AsyncIterator[pb.SessionRequest], context: _Context
    ) -> AsyncIterator[pb.SessionResponse]:
        """One instance's stream: a reader task feeds the registry, this loop writes."""
        await self._check_leader(context)
        conn = Connection(peer=context.peer())
        self.connections.add(conn)
        reader = asyncio.get_running_loop().create_task(self._read(request_iterator, conn))
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
            self.connections.discard(conn)
            self.registry.disconnected(conn)

    async def _read(self, requests: AsyncIterator[pb.SessionRequest], conn: Connection) -> None:
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
            kind = first.WhichOneof("kind")
            if kind != "registration":
                conn.close(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the first request must be a registration, got {kind or 'an empty request'}",
                )
                return
            await self.registry.register(conn, first.registration)
            async for request in requests:
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

    async def _unary(self, context: _Context, fn: Callable[[], Any]) -> Any:
        await self._check_leader(context)
        try:
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
        found = await self._unary(context, self.registry.list_controllers)
        return pb.ListControllersResponse(controllers=found)

    async def GetController(
        self, request: pb.GetControllerRequest, context: _Context
    ) -> pb.GetControllerResponse:
        """One controller."""
        found = await self._unary(context, lambda: self.registry.get(request.name))
        return pb.GetControllerResponse(controller=found)

    async def EnableController(
        self, request: pb.EnableControllerRequest, context: _Context
    ) -> pb.EnableControllerResponse:
        """Enable a controller at run time."""
        found = await self._unary(context, lambda: self.registry.set_enabled(request.name, True))
        return pb.EnableControllerResponse(controller=found)

    async def DisableController(
        self, request: pb.DisableControllerRequest, context: _Context
    ) -> pb.DisableControllerResponse:
        """Disable a controller at run time: DRAIN then STOP its active instance."""
        found = await self._unary(context, lambda: self.registry.set_enabled(request.name, False))
        return pb.DisableControllerResponse(controller=found)

    def close_all(self, code: grpc.StatusCode, message: str) -> None:
        """End every open Session stream with ``code`` (shutting down)."""
        for conn in list(self.connections):
            with contextlib.suppress(Exception):
                conn.close(code, message)


async def _abort(context: _Context, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("unreachable")  # pragma: no cover - abort raises
