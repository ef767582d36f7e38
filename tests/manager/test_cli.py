"""``steward controllers``: the operators' table from ListControllers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from steward import cli
from tests.manager.conftest import RunningManager
from tests.manager.instances import Instance, eventually

pytestmark = pytest.mark.integration


@pytest.mark.asyncio
async def test_controllers_table(
    start_manager: Callable[..., RunningManager], capsys: pytest.CaptureFixture[str]
) -> None:
    manager = start_manager(controllers=["*", "-job"])
    a = Instance(manager.address, "copier", "copier-a", standby=True)
    await eventually(a.session.holds_lease, what="a active")
    b = Instance(manager.address, "copier", "copier-b", standby=True)
    try:
        await eventually(lambda: b.session.registered.is_set(), what="b standby")
        code = await asyncio.to_thread(cli.main, ["controllers", "--manager", manager.address])
        assert code == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == [
            "NAME",
            "STATE",
            "ACTIVE",
            "STANDBYS",
            "QUEUE",
            "RECONCILES/S",
            "LAST",
            "ERROR",
        ]
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        assert rows["copier"][:6] == ["copier", "active", "copier-a", "(epoch", "1)", "copier-b"]
        assert rows["job"][:3] == ["job", "disabled", "-"]
    finally:
        await a.close()
        await b.close()


def test_controllers_without_a_manager(capsys: pytest.CaptureFixture[str]) -> None:
    from steward.serving import free_port

    code = cli.main(["controllers", "--manager", f"127.0.0.1:{free_port()}", "--timeout", "2"])
    assert code == 1
    assert "UNAVAILABLE" in capsys.readouterr().err
