"""Waiting in tests: poll a check until it holds, or fail saying what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(check: Callable[[], Any], what: str, within: float = 120.0) -> Any:
    """Poll ``check`` every 0.25 s until it returns something truthy, and return that; fail
    after ``within`` seconds, naming ``what`` and the last value seen."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {within:.0f}s waiting for {what} (last: {last!r})")
