"""The controllers' HTTP health endpoint (steward.runtime.health.start_loop_health): what the
Job controller's liveness and readiness probes ask."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request

import pytest

from steward.runtime import health as runtime_health

pytestmark = [pytest.mark.unit, pytest.mark.asyncio]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def _get_async(url: str) -> tuple[int, str]:
    return await asyncio.to_thread(_get, url)


async def test_ok_while_the_loop_runs_and_503_once_it_stalls() -> None:
    health = runtime_health.LoopHealth("127.0.0.1:0", stale_after=1.0, interval=0.1)
    base = f"http://127.0.0.1:{health.port}"
    try:
        for path in ("/healthz", "/readyz", "/livez"):
            assert await _get_async(base + path) == (200, "ok\n")
        assert (await _get_async(base + "/metrics"))[0] == 404

        # Block the loop (as a synchronous call in a reconcile would); the server thread
        # answers anyway, and says the loop is stalled.
        answers: list[tuple[int, str]] = []

        def probe_while_blocked() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                code, body = _get(base + "/healthz")
                if code == 503:
                    answers.append((code, body))
                    return
                time.sleep(0.1)

        thread = asyncio.get_running_loop().run_in_executor(None, probe_while_blocked)
        deadline = time.monotonic() + 30
        while not answers and time.monotonic() < deadline:
            time.sleep(0.1)  # noqa: ASYNC251 - blocking the loop is the point
        await thread
        assert answers, "the endpoint never reported the stalled loop"
        assert answers[0][1].startswith("event loop stalled for ")

        # The loop runs again: healthy again.
        deadline = time.monotonic() + 30
        while (await _get_async(base + "/healthz"))[0] != 200:
            assert time.monotonic() < deadline, "still unhealthy after the loop resumed"
            await asyncio.sleep(0.1)
    finally:
        health.stop()


async def test_address_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime_health.HEALTH_LISTEN_ENV, raising=False)
    assert runtime_health.start_loop_health() is None
    monkeypatch.setenv(runtime_health.HEALTH_LISTEN_ENV, "127.0.0.1:0")
    health = runtime_health.start_loop_health()
    assert health is not None
    try:
        assert await _get_async(f"http://127.0.0.1:{health.port}/healthz") == (200, "ok\n")
    finally:
        health.stop()


async def test_a_malformed_address_is_refused() -> None:
    with pytest.raises(ValueError, match="expected host:port"):
        runtime_health.start_loop_health("8081")
