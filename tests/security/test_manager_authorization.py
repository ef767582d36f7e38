"""The manager: an identity registers only the controller names RBAC lets it ``register``
(resource ``controllers.steward.io``, the controller's name as resource name), so another
identity can neither take a name over nor wait on it as a standby; the operator RPCs need
``enable`` and ``disable``, the reads ``get`` and ``list``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import grpc
import pytest

from steward.runtime.session import ManagerSession, SessionOptions
from steward.security import ClientSecurity
from steward.serving.security import STEWARD_GROUP
from steward.v1 import manager_pb2 as pb
from steward.v1 import manager_pb2_grpc as pb_grpc
from tests.manager.conftest import RunningManager
from tests.security.conftest import Channels, Pki, Rbac, rand, rpc_error

pytestmark = pytest.mark.integration

_T = TypeVar("_T")

PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED


class SessionThread:
    """A runtime :class:`ManagerSession` running on an event loop of its own."""

    def __init__(self, address: str, controller: str, security: ClientSecurity) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.options = SessionOptions(controller=controller, security=security)

        async def make() -> ManagerSession:
            return ManagerSession(address, self.options)

        self.session = self.call(make())
        self.run = asyncio.run_coroutine_threadsafe(self.session.run(), self.loop)

    def call(self, coro: Coroutine[Any, Any, _T], timeout: float = 60.0) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def wait_active(self, timeout: float = 30.0) -> None:
        self.call(asyncio.wait_for(self.session.active.wait(), timeout), timeout + 5)

    def close(self) -> None:
        try:
            self.call(self.session.close())
            self.run.result(30)
        finally:
            # gRPC's own tasks of the Sessions the manager ended (each reconnection's
            # request stream) and their async generators end here, not when the loop
            # is garbage.
            with contextlib.suppress(Exception):
                self.call(_cancel_the_rest(), 30)
            with contextlib.suppress(Exception):
                self.call(self.loop.shutdown_asyncgens(), 30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            self.loop.close()


async def _cancel_the_rest() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def register(
    stub: pb_grpc.ManagerServiceStub, controller: str, standby: bool
) -> tuple[list[pb.SessionResponse], grpc.RpcError | None]:
    """A raw Session that registers and then stays open: what the manager answered
    before ending it, and how it ended (None if it answered and kept it open)."""
    done = threading.Event()

    def requests() -> Iterator[pb.SessionRequest]:
        yield pb.SessionRequest(
            registration=pb.Registration(
                controller=controller,
                instance_id=f"intruder-{uuid.uuid4().hex[:6]}",
                language="python",
                standby=standby,
            )
        )
        done.wait(30)

    call = stub.Session(requests(), timeout=30)
    responses: list[pb.SessionResponse] = []
    try:
        for response in call:
            responses.append(response)
            if response.HasField("registration_result"):
                return responses, None
    except grpc.RpcError as err:
        return responses, err
    finally:
        done.set()
        call.cancel()
    return responses, None


def test_one_identity_cannot_take_another_identitys_controller_name(
    secure_manager: RunningManager, pki: Pki, rbac: Rbac, channels: Channels
) -> None:
    name = f"alpha-{rand()}"
    owner, intruder, operator = (f"test:{who}-{rand()}" for who in ("owner", "intruder", "op"))
    registers = rbac.cluster_role(
        [
            {
                "apiGroups": [STEWARD_GROUP],
                "resources": ["controllers"],
                "resourceNames": [name],
                "verbs": ["register"],
            }
        ]
    )
    rbac.bind(registers, owner)
    reads = rbac.cluster_role(
        [{"apiGroups": [STEWARD_GROUP], "resources": ["controllers"], "verbs": ["get", "list"]}]
    )
    rbac.bind(reads, operator)
    rbac.wait_allowed(owner, "register", "controllers", group=STEWARD_GROUP, name=name)
    rbac.wait_allowed(operator, "list", "controllers", group=STEWARD_GROUP)
    assert not rbac.allowed(intruder, "register", "controllers", group=STEWARD_GROUP, name=name)

    active = SessionThread(secure_manager.address, name, pki.client(owner))
    try:
        active.wait_active()
        stub = channels.manager(pki.client(intruder), secure_manager.address)
        for standby in (True, False):
            responses, err = register(stub, name, standby)
            assert err is not None, f"standby={standby}: registered: {responses}"
            details = err.details() or ""
            assert err.code() == PERMISSION_DENIED, f"{err.code()}: {details}"
            assert f"{intruder} (certificate) may not register" in details, details
            assert repr(name) in details, details
            assert not responses

        # The registry knows the owner's instance only, still active.
        reader = channels.manager(pki.client(operator), secure_manager.address)
        found = reader.GetController(pb.GetControllerRequest(name=name), timeout=30).controller
        assert found.holder == active.options.instance_id
        assert [i.instance_id for i in found.instances] == [active.options.instance_id]
        assert active.session.holds_lease()
        listed = reader.ListControllers(pb.ListControllersRequest(), timeout=30)
        assert name in {c.name for c in listed.controllers}

        # Neither may the intruder read the registry.
        err = rpc_error(lambda: stub.GetController(pb.GetControllerRequest(name=name)))
        assert err.code() == PERMISSION_DENIED, err.details()
        err = rpc_error(lambda: stub.ListControllers(pb.ListControllersRequest()))
        assert err.code() == PERMISSION_DENIED, err.details()
    finally:
        active.close()


def test_operator_rpcs_need_enable_and_disable(
    secure_manager: RunningManager, pki: Pki, rbac: Rbac, channels: Channels
) -> None:
    name = f"alpha-{rand()}"
    owner, operator = f"test:owner-{rand()}", f"test:op-{rand()}"
    rbac.bind(
        rbac.cluster_role(
            [
                {
                    "apiGroups": [STEWARD_GROUP],
                    "resources": ["controllers"],
                    "resourceNames": [name],
                    "verbs": ["register"],
                }
            ]
        ),
        owner,
    )
    rbac.bind(
        rbac.cluster_role(
            [{"apiGroups": [STEWARD_GROUP], "resources": ["controllers"], "verbs": ["get"]}]
        ),
        operator,
    )
    rbac.wait_allowed(owner, "register", "controllers", group=STEWARD_GROUP, name=name)
    rbac.wait_allowed(operator, "get", "controllers", group=STEWARD_GROUP, name=name)
    active = SessionThread(secure_manager.address, name, pki.client(owner))
    try:
        active.wait_active()
        stub = channels.manager(pki.client(operator), secure_manager.address)

        err = rpc_error(lambda: stub.DisableController(pb.DisableControllerRequest(name=name)))
        assert err.code() == PERMISSION_DENIED, err.details()
        assert f"may not disable controllers.steward.io {name!r}" in (err.details() or "")
        err = rpc_error(lambda: stub.EnableController(pb.EnableControllerRequest(name=name)))
        assert err.code() == PERMISSION_DENIED, err.details()
        assert f"may not enable controllers.steward.io {name!r}" in (err.details() or "")
        found = stub.GetController(pb.GetControllerRequest(name=name), timeout=30).controller
        assert found.enabled and found.holder == active.options.instance_id

        rbac.bind(
            rbac.cluster_role(
                [
                    {
                        "apiGroups": [STEWARD_GROUP],
                        "resources": ["controllers"],
                        "resourceNames": [name],
                        "verbs": ["enable", "disable"],
                    }
                ]
            ),
            operator,
        )
        rbac.wait_allowed(operator, "disable", "controllers", group=STEWARD_GROUP, name=name)
        disabled = stub.DisableController(pb.DisableControllerRequest(name=name), timeout=30)
        assert not disabled.controller.enabled
        enabled = stub.EnableController(pb.EnableControllerRequest(name=name), timeout=30)
        assert enabled.controller.enabled
    finally:
        active.close()


@pytest.mark.parametrize("verb", ["enable", "disable"])
def test_an_operator_verb_is_checked_per_controller_name(
    secure_manager: RunningManager, pki: Pki, rbac: Rbac, channels: Channels, verb: str
) -> None:
    """A grant naming one controller does not cover another."""
    allowed_name, other = f"alpha-{rand()}", f"beta-{rand()}"
    operator = f"test:op-{rand()}"
    rbac.bind(
        rbac.cluster_role(
            [
                {
                    "apiGroups": [STEWARD_GROUP],
                    "resources": ["controllers"],
                    "resourceNames": [allowed_name],
                    "verbs": [verb],
                }
            ]
        ),
        operator,
    )
    rbac.wait_allowed(operator, verb, "controllers", group=STEWARD_GROUP, name=allowed_name)
    stub = channels.manager(pki.client(operator), secure_manager.address)
    if verb == "enable":
        err = rpc_error(lambda: stub.EnableController(pb.EnableControllerRequest(name=other)))
    else:
        err = rpc_error(lambda: stub.DisableController(pb.DisableControllerRequest(name=other)))
    assert err.code() == PERMISSION_DENIED, err.details()
    assert repr(other) in (err.details() or "")


def test_a_revoked_register_ends_the_session_and_the_lease(
    secure_manager: RunningManager, pki: Pki, rbac: Rbac, channels: Channels
) -> None:
    """Revoking ``register`` ends the active instance's Session at the next re-check: it
    stops being active, and the manager names no holder of the name any more."""
    name = f"revoked-{rand()}"
    owner, operator = (f"test:{who}-{rand()}" for who in ("owner", "op"))
    registers = rbac.cluster_role(
        [
            {
                "apiGroups": [STEWARD_GROUP],
                "resources": ["controllers"],
                "resourceNames": [name],
                "verbs": ["register"],
            }
        ]
    )
    binding = rbac.bind(registers, owner)
    reads = rbac.cluster_role(
        [{"apiGroups": [STEWARD_GROUP], "resources": ["controllers"], "verbs": ["get"]}]
    )
    rbac.bind(reads, operator)
    rbac.wait_allowed(owner, "register", "controllers", group=STEWARD_GROUP, name=name)
    rbac.wait_allowed(operator, "get", "controllers", group=STEWARD_GROUP, name=name)
    reader = channels.manager(pki.client(operator), secure_manager.address)

    active = SessionThread(secure_manager.address, name, pki.client(owner))
    try:
        active.wait_active()
        rbac.unbind(binding)
        rbac.wait_allowed(
            owner, "register", "controllers", group=STEWARD_GROUP, name=name, expect=False
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = reader.GetController(pb.GetControllerRequest(name=name), timeout=30)
            if not active.session.active.is_set() and not found.controller.holder:
                break
            time.sleep(0.5)
        assert not active.session.active.is_set(), "still active after the revocation"
        found = reader.GetController(pb.GetControllerRequest(name=name), timeout=30)
        assert not found.controller.holder, found.controller
    finally:
        active.close()
