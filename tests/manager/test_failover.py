"""Failover with real instance processes: SIGKILL and SIGSTOP of the active instance, and a
manager restart. Activity logs prove that no two instances ever reconcile at once."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from steward.cluster.process import free_port
from steward.manager import Timing
from steward.v1 import manager_pb2 as pb
from tests.manager.conftest import RunningManager
from tests.manager.instances import InstanceProcess, assert_never_overlap, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAPSED = "previous holder's lease lapsed"
"""The registry's reason for a promotion after the holder's lease ran out."""


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., InstanceProcess]]:
    """Start instance processes; all are killed after the test."""
    started: list[InstanceProcess] = []

    def start(target: str, instance_id: str, controller: str = "copier") -> InstanceProcess:
        proc = InstanceProcess(target, controller, instance_id, tmp_path / f"{instance_id}.log")
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()


def registered_as(proc: InstanceProcess, role: str) -> Callable[[], bool]:
    return lambda: any(k == "registered" and w == [role] for k, w, _ in proc.lines())


@pytest.mark.asyncio
async def test_sigkill_active_standby_takes_over_once_the_lease_lapses(
    manager: RunningManager, spawn: Callable[..., InstanceProcess]
) -> None:
    """A killed holder's session ends without a deregistration: its lease must lapse (no
    heartbeat renews it) before the standby is promoted, never be released at the
    stream's end as on a clean leave (a holder whose stream broke may still be running).
    How soon the standby starts is a matter of the lease's numbers, not checked here."""
    a = spawn(manager.address, "copier-a")
    await eventually(lambda: a.first("tick") is not None, 30, "a ticking")
    b = spawn(manager.address, "copier-b")
    await eventually(registered_as(b, "ROLE_STANDBY"), 30, "b standing by")
    await asyncio.sleep(1.0)
    killed = a.signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    await eventually(lambda: b.first("start") is not None, 30, "b started")
    b_start = b.first("start")
    assert b_start is not None
    assert b_start > killed
    # What handed the lease to B: A's lease lapsed, once, and B acquired it for that reason.
    metrics = manager.server.metrics.registry
    copier = {"controller": "copier"}
    reasons = {
        labels["reason"]: value
        for family in metrics.collect()
        if family.name == "steward_manager_lease_acquisitions"
        for name, labels, value, *_ in family.samples
        if name.endswith("_total") and labels["controller"] == "copier"
    }
    assert metrics.get_sample_value("steward_manager_lease_lapses_total", copier) == 1
    assert reasons.get(LAPSED) == 1, reasons
    await eventually(lambda: len(b.intervals()) == 1 and b.intervals()[0][1] > b_start + 0.5)
    assert [w for k, w, _ in b.lines() if k == "start"] == [["2"]]
    assert_never_overlap(a, b)
    got = manager.stub.GetController(pb.GetControllerRequest(name="copier")).controller
    assert got.holder == "copier-b" and got.epoch == 2


@pytest.mark.asyncio
async def test_frozen_active_stops_before_the_standby_starts(
    manager: RunningManager, spawn: Callable[..., InstanceProcess]
) -> None:
    a = spawn(manager.address, "copier-a")
    await eventually(lambda: a.first("tick") is not None, 30, "a ticking")
    b = spawn(manager.address, "copier-b")
    await eventually(registered_as(b, "ROLE_STANDBY"), 30, "b standing by")
    frozen = a.signal(signal.SIGSTOP)
    await eventually(lambda: b.first("start") is not None, 30, "b started")
    await asyncio.sleep(0.5)
    # A wakes up while B reconciles: it must see at once that its lease is gone.
    woke = a.signal(signal.SIGCONT)

    # It either reads the manager's STOP and exits, or its own fence wins the race and it
    # registers again, as a standby of B.
    def settled() -> bool:
        if a.proc.poll() is not None:
            return True
        return any(
            k == "registered" and w == ["ROLE_STANDBY"] and t > woke for k, w, t in a.lines()
        )

    await eventually(settled, 15, "a exits or stands by")
    assert a.proc.poll() in (None, 0), a.stderr_text()
    await asyncio.sleep(0.5)
    ticks_after_wake = [t for k, _, t in a.lines() if k == "tick" and t >= frozen]
    assert ticks_after_wake == [], (woke, ticks_after_wake)
    assert_never_overlap(a, b)
    assert b.proc.poll() is None and len(b.intervals()) == 1


@pytest.mark.asyncio
async def test_manager_restart_keeps_the_active_instance(
    start_manager: Callable[..., RunningManager], spawn: Callable[..., InstanceProcess]
) -> None:
    timing = Timing(lease_duration=6.0, renew_deadline=4.0, retry_period=0.5)
    listen = f"127.0.0.1:{free_port()}"
    first = start_manager(listen=listen, timing=timing)
    a = spawn(first.address, "copier-a")
    await eventually(lambda: a.first("tick") is not None, 30, "a ticking")
    b = spawn(first.address, "copier-b")
    await eventually(registered_as(b, "ROLE_STANDBY"), 30, "b standing by")
    before = first.stub.GetController(pb.GetControllerRequest(name="copier")).controller
    assert (before.holder, before.epoch) == ("copier-a", 1)

    first.stop()
    restarted_at = time.time()
    second = start_manager(listen=listen, timing=timing)

    def recovered() -> bool:
        got = second.stub.GetController(pb.GetControllerRequest(name="copier")).controller
        return [(i.instance_id, i.role) for i in got.instances] == [
            ("copier-a", pb.ROLE_ACTIVE),
            ("copier-b", pb.ROLE_STANDBY),
        ]

    await eventually(recovered, 20, "both instances back")
    after = second.stub.GetController(pb.GetControllerRequest(name="copier")).controller
    assert (after.holder, after.epoch) == ("copier-a", 1)
    # Stay past a full lease duration: nobody is promoted, A never stopped.
    await asyncio.sleep(timing.lease_duration + 1)
    after = second.stub.GetController(pb.GetControllerRequest(name="copier")).controller
    assert (after.holder, after.epoch, after.state) == ("copier-a", 1, pb.CONTROLLER_STATE_ACTIVE)
    assert [k for k, _, _ in a.lines() if k in ("start", "stop")] == ["start"]
    assert b.first("start") is None
    assert any(k == "tick" and t > restarted_at + timing.lease_duration for k, _, t in a.lines())
    assert sum(1 for k, _, _ in a.lines() if k == "registered") >= 2
