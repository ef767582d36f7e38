"""Waiting in tests: poll a check until it holds, or fail saying what was awaited."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(
    check: Callable[[], Any],
    what: str,
    within: float = 120.0,
    *,
    actual: Callable[[], Any] | None = None,
) -> Any:
    """Poll ``check`` every 0.25 s until it returns something truthy, and return that; fail
    after ``within`` seconds, naming ``what`` and the last value seen, or, when ``check``
    is a comparison whose value says nothing (``False``), what ``actual`` returns then."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.25)
    seen = f"actual: {actual()!r}" if actual is not None else f"last: {last!r}"
    pytest.fail(f"timed out after {within:.0f}s waiting for {what} ({seen})")


async def until(check: Callable[[], Any], what: str, within: float = 60.0) -> Any:
    """:func:`wait_for` for a check of the test's own event loop (a mirror, a controller's
    status, or an awaitable one: an API read): polled every 0.05 s, without blocking the
    loop."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out after {within:.0f}s waiting for {what} (last: {last!r})")
