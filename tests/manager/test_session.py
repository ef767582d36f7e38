"""Registration, duplicate refusal, standby promotion and run-time disabling, with
in-process instances against an in-process manager."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest

from steward.runtime.session import RegistrationRefusedError
from steward.v1 import manager_pb2 as pb
from tests.manager.conftest import RunningManager
from tests.manager.instances import Instance, eventually

pytestmark = pytest.mark.integration


@pytest.mark.asyncio
async def test_first_instance_is_active_and_heartbeats(manager: RunningManager) -> None:
    a = Instance(manager.address, "copier", "copier-a")
    try:
        await eventually(a.session.holds_lease, what="a active")
        assert a.events.log == ["start 1"]
        assert a.session.epoch == 1
        assert (a.session.lease_duration, a.session.renew_deadline) == (3.0, 2.0)
        got = manager.stub.GetController(pb.GetControllerRequest(name="copier")).controller
        assert got.state == pb.CONTROLLER_STATE_ACTIVE
        assert got.holder == "copier-a" and got.epoch == 1
        assert [i.instance_id for i in got.instances] == ["copier-a"]
    finally:
        await a.close()


@pytest.mark.asyncio
async def test_duplicate_is_refused_and_first_keeps_running(manager: RunningManager) -> None:
    a = Instance(manager.address, "copier", "copier-a")
    try:
        await eventually(a.session.holds_lease, what="a active")
        b = Instance(manager.address, "copier", "copier-b", standby=False)
        with pytest.raises(RegistrationRefusedError) as refused:
            await asyncio.wait_for(b.task, 10)
        assert refused.value.code == grpc.StatusCode.ALREADY_EXISTS
        assert "copier-a" in refused.value.message
        assert b.events.log == []
        # The first instance is unharmed: still active, still heartbeating, same epoch.
        beats = a.session._sequence
        await asyncio.sleep(4 * a.session.retry_period)
        assert a.session._sequence >= beats + 3
        assert a.session.holds_lease() and a.session.epoch == 1
        assert a.events.log == ["start 1"]
        got = manager.stub.GetController(pb.GetControllerRequest(name="copier")).controller
        assert got.holder == "copier-a" and got.epoch == 1
    finally:
        await a.close()


@pytest.mark.asyncio
async def test_standby_is_promoted_when_the_active_deregisters(manager: RunningManager) -> None:
    a = Instance(manager.address, "copier", "copier-a", standby=True)
    await eventually(a.session.holds_lease, what="a active")
    b = Instance(manager.address, "copier", "copier-b", standby=True)
    try:
        await eventually(lambda: b.session.role == pb.ROLE_STANDBY, what="b standby")
        assert b.session.holder == "copier-a"
        got = manager.stub.GetController(pb.GetControllerRequest(name="copier")).controller
        assert [(i.instance_id, i.role) for i in got.instances] == [
            ("copier-a", pb.ROLE_ACTIVE),
            ("copier-b", pb.ROLE_STANDBY),
        ]
        await a.close()
        assert a.events.log == ["start 1", "stop"]
        # A clean deregistration hands over at once, well before a lease would lapse.
        await eventually(b.session.holds_lease, within=2.5, what="b promoted")
        assert b.events.log == ["start 2"]
        got = manager.stub.GetController(pb.GetControllerRequest(name="copier")).controller
        assert got.holder == "copier-b" and got.epoch == 2
    finally:
        await a.close()
        await b.close()


@pytest.mark.asyncio
async def test_disabling_drains_then_stops(manager: RunningManager) -> None:
    a = Instance(manager.address, "copier", "copier-a", standby=True)
    await eventually(a.session.holds_lease, what="a active")
    b = Instance(manager.address, "copier", "copier-b", standby=True)
    try:
        await eventually(lambda: b.session.role == pb.ROLE_STANDBY, what="b standby")
        got = manager.stub.DisableController(pb.DisableControllerRequest(name="copier"))
        assert not got.controller.enabled
        await asyncio.wait_for(a.task, 10)  # run() returns after STOP
        await asyncio.wait_for(b.task, 10)
        assert a.events.log == ["start 1", "drain", "drained", "stop"]
        assert a.session.commands == [
            pb.COMMAND_TYPE_START,
            pb.COMMAND_TYPE_DRAIN,
            pb.COMMAND_TYPE_STOP,
        ]
        assert b.session.commands == [pb.COMMAND_TYPE_STOP]
        assert b.events.log == []
        got2 = manager.stub.GetController(pb.GetControllerRequest(name="copier")).controller
        assert got2.state == pb.CONTROLLER_STATE_DISABLED and got2.holder == ""
        assert got2.enablement_reason == "DisableController"

        # Disabled: new registrations are refused, and retried by the session.
        c = Instance(manager.address, "copier", "copier-c")
        await asyncio.sleep(1.0)
        assert not c.session.registered.is_set() and not c.task.done()

        # Enabled again: the waiting instance registers and becomes active.
        manager.stub.EnableController(pb.EnableControllerRequest(name="copier"))
        await eventually(c.session.holds_lease, what="c active after enabling")
        assert c.session.epoch == 2
        await c.close()
    finally:
        await a.close()
        await b.close()


@pytest.mark.asyncio
async def test_controllers_flags_apply_at_registration(
    start_manager: Callable[..., RunningManager],
) -> None:
    manager = start_manager(controllers=["*", "-job"], disabled_by_default=["ttl"])
    listed = manager.stub.ListControllers(pb.ListControllersRequest()).controllers
    assert [(c.name, c.enabled) for c in listed] == [("job", False), ("ttl", False)]
    for name in ("job", "ttl"):
        call = manager.stub.Session(
            iter(
                [
                    pb.SessionRequest(
                        registration=pb.Registration(controller=name, instance_id=f"{name}-1")
                    )
                ]
            )
        )
        with pytest.raises(grpc.RpcError) as err:
            list(call)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "disabled" in (err.value.details() or "")
    ok = Instance(manager.address, "cronjob", "cronjob-1")
    try:
        await eventually(ok.session.holds_lease, what="cronjob active")
    finally:
        await ok.close()


@pytest.mark.asyncio
async def test_kube_controller_managers_families_follow_the_leader_and_its_controllers(
    manager: RunningManager,
) -> None:
    """Dashboards built for kube-controller-manager read ``leader_election_master_status``
    and ``running_managed_controllers``: the leading manager reports its Lease held, and
    a controller as running while an instance of it is active, and not once it left."""
    registry = manager.server.metrics.registry

    def sample(metric: str, **labels: str) -> float | None:
        return registry.get_sample_value(metric, labels)

    assert sample("leader_election_master_status", name="steward-manager") == 1
    a = Instance(manager.address, "copier", "copier-a")
    try:
        await eventually(a.session.holds_lease, what="a active")
        running = {"name": "copier", "manager": "steward"}
        await eventually(lambda: sample("running_managed_controllers", **running) == 1)
    finally:
        await a.close()
    await eventually(lambda: sample("running_managed_controllers", **running) == 0)
