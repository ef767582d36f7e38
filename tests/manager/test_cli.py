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
        code = await asyncio.to_thread(
            cli.main, ["controllers", "--manager", manager.address, "--insecure-plaintext"]
        )
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
    from steward.cluster.process import free_port

    code = cli.main(
        ["controllers", "--manager", f"127.0.0.1:{free_port()}", "--timeout", "2",
         "--insecure-plaintext"]
    )  # fmt: skip
    assert code == 1
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_controllers_needs_tls_files_or_plaintext_said_out_loud(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("STEWARD_TLS_CA_FILE", "STEWARD_TLS_CERT_FILE", "STEWARD_TLS_KEY_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("STEWARD_INSECURE_PLAINTEXT", raising=False)
    # Some credentials given: all must be, none is taken from the local cluster.
    argv = ["controllers", "--manager", "127.0.0.1:1", "--tls-ca-file", "ca.crt"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--tls-ca-file, --tls-cert-file and --tls-key-file" in err
    assert "--insecure-plaintext" in err
