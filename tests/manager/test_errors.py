"""Bad input to every RPC gets a clear status code and harms no other instance."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator

import grpc
import pytest

from steward.v1 import manager_pb2 as pb
from steward.v1 import manager_pb2_grpc as pb_grpc
from tests.manager.conftest import RunningManager
from tests.manager.instances import Instance, eventually

pytestmark = pytest.mark.integration


def registration(controller: str = "copier", instance_id: str = "x-1") -> pb.SessionRequest:
    return pb.SessionRequest(
        registration=pb.Registration(controller=controller, instance_id=instance_id)
    )


async def session_status(
    stub: pb_grpc.ManagerServiceAsyncStub, requests: list[pb.SessionRequest]
) -> tuple[grpc.StatusCode, str, list[pb.SessionResponse]]:
    """Send ``requests``, read until the stream ends; (code, details, responses)."""

    async def send() -> AsyncIterator[pb.SessionRequest]:
        for request in requests:
            yield request

    call = stub.Session(send())
    got = []
    try:
        async for response in call:
            got.append(response)
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details() or "", got
    return await call.code(), await call.details() or "", got


SESSION_CASES = [
    pytest.param([registration(controller="Copier")], "DNS-1123", id="bad-name"),
    pytest.param([registration(controller="")], "empty", id="empty-name"),
    pytest.param([registration(instance_id="")], "instance id", id="empty-instance"),
    pytest.param([registration(instance_id="a b")], "instance id", id="space-instance"),
    pytest.param(
        [pb.SessionRequest(heartbeat=pb.Heartbeat(sequence=1))],
        "registration",
        id="heartbeat-first",
    ),
    pytest.param([pb.SessionRequest()], "registration", id="empty-first"),
    pytest.param(
        [registration(controller="other"), registration(controller="other")],
        "already registered",
        id="second-registration",
    ),
    pytest.param(
        [registration(controller="other"), pb.SessionRequest()],
        "already registered",
        id="empty-after-registration",
    ),
    pytest.param([], "before registering", id="no-request"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("requests", "says"), SESSION_CASES)
async def test_bad_sessions_are_refused_and_harm_no_one(
    manager: RunningManager, requests: list[pb.SessionRequest], says: str
) -> None:
    healthy = Instance(manager.address, "copier", "copier-a")
    try:
        await eventually(healthy.session.holds_lease, what="healthy active")
        async with grpc.aio.insecure_channel(manager.address) as channel:
            stub = pb_grpc.ManagerServiceStub(channel)
            code, details, _ = await session_status(stub, requests)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, details
            assert says in details
            # An impostor with the holder's name but another id is refused...
            code, details, _ = await session_status(stub, [registration("copier", "copier-z")])
            assert code == grpc.StatusCode.ALREADY_EXISTS and "copier-a" in details
        # ... and the healthy instance never noticed.
        beats = healthy.session._sequence
        await eventually(lambda: healthy.session._sequence >= beats + 2, what="heartbeats")
        assert healthy.session.holds_lease()
        assert healthy.events.log == ["start 1"]
    finally:
        await healthy.close()


@pytest.mark.asyncio
async def test_undecodable_bytes_end_only_that_stream(manager: RunningManager) -> None:
    healthy = Instance(manager.address, "copier", "copier-a")
    try:
        await eventually(healthy.session.holds_lease, what="healthy active")
        async with grpc.aio.insecure_channel(manager.address) as channel:
            raw = channel.stream_stream(
                "/steward.v1.ManagerService/Session",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )

            async def garbage() -> AsyncIterator[bytes]:
                yield b"\xff\xff\xff\xff not a protobuf"

            call = raw(garbage())
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in call:
                    pass
            assert err.value.code() != grpc.StatusCode.OK
        beats = healthy.session._sequence
        await eventually(lambda: healthy.session._sequence >= beats + 2, what="heartbeats")
        assert healthy.session.holds_lease() and healthy.events.log == ["start 1"]
    finally:
        await healthy.close()


@pytest.mark.asyncio
async def test_a_newer_stream_of_the_same_instance_replaces_the_old(
    manager: RunningManager,
) -> None:
    """A second stream of the same instance id replaces the first one, which ends ABORTED."""
    async with grpc.aio.insecure_channel(manager.address) as channel:
        stub = pb_grpc.ManagerServiceStub(channel)
        first = stub.Session()
        await first.write(registration("copier", "copier-a"))
        result = await asyncio.wait_for(first.read(), 10)
        assert isinstance(result, pb.SessionResponse)
        assert result.registration_result.role == pb.ROLE_ACTIVE
        second = stub.Session()
        await second.write(registration("copier", "copier-a"))
        again = await asyncio.wait_for(second.read(), 10)
        assert isinstance(again, pb.SessionResponse)
        assert again.registration_result.role == pb.ROLE_ACTIVE
        assert again.registration_result.epoch == result.registration_result.epoch

        async def read_to_end() -> None:
            while await asyncio.wait_for(first.read(), 10) is not grpc.aio.EOF:
                pass

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await read_to_end()
        assert err.value.code() == grpc.StatusCode.ABORTED
        await second.write(pb.SessionRequest(deregistration=pb.Deregistration(reason="done")))
        while await asyncio.wait_for(second.read(), 10) is not grpc.aio.EOF:
            pass  # START, then the end of the stream
        assert await asyncio.wait_for(second.code(), 10) == grpc.StatusCode.OK


def unary_cases() -> Iterator[tuple[str, object, grpc.StatusCode, str]]:
    for rpc, request in (
        ("GetController", pb.GetControllerRequest),
        ("EnableController", pb.EnableControllerRequest),
        ("DisableController", pb.DisableControllerRequest),
    ):
        yield rpc, request(name="Not_A_Name"), grpc.StatusCode.INVALID_ARGUMENT, "DNS-1123"
        yield rpc, request(name=""), grpc.StatusCode.INVALID_ARGUMENT, "empty"
        yield rpc, request(name="nobody"), grpc.StatusCode.NOT_FOUND, "nobody"


@pytest.mark.parametrize(("rpc", "request_", "code", "says"), list(unary_cases()))
def test_bad_unary_requests(
    manager: RunningManager, rpc: str, request_: object, code: grpc.StatusCode, says: str
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        getattr(manager.stub, rpc)(request_, timeout=10)
    assert err.value.code() == code
    assert says in (err.value.details() or "")
    # The manager still answers.
    assert manager.stub.ListControllers(pb.ListControllersRequest(), timeout=10) is not None


def test_a_replica_that_is_not_the_leader_names_the_leader(
    manager: RunningManager, start_manager: Callable[..., RunningManager]
) -> None:
    replica = start_manager(identity="replica-2", wait_leading=False)
    with pytest.raises(grpc.RpcError) as err:
        replica.stub.ListControllers(pb.ListControllersRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    details = err.value.details() or ""
    assert "not the leader" in details
    assert manager.server.identity in details and manager.address in details
    with pytest.raises(grpc.RpcError) as err:
        list(replica.stub.Session(iter([registration()]), timeout=10))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    # The leader is unaffected.
    assert manager.stub.ListControllers(pb.ListControllersRequest(), timeout=10) is not None
