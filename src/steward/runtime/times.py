"""Timestamps as the API server writes and reads them (RFC 3339, UTC, "Z"), and
durations as kube-controller-manager's flags take them (Go's)."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import Any


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it (with or without fractions of a
    second), or None when it is absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(when: datetime) -> str:
    """A timestamp the way the API server writes it: whole seconds, UTC, "Z"."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> datetime:
    """Now, in UTC (the default clock of the controllers' decisions)."""
    return datetime.now(UTC)


class InvalidDurationError(argparse.ArgumentTypeError, ValueError):
    """Text that is not a Go duration (a ValueError, and argparse shows its message)."""


_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(text: str) -> timedelta:
    """A duration as Go's ``time.ParseDuration`` reads it (``8760h``, ``1h30m``, ``1.5s``,
    ``300ms``, ``0``; a sign allowed): kube-controller-manager's duration flags, for an
    argparse ``type=``.

    Raises:
        InvalidDurationError: not such a duration.
    """
    rest = text.strip()
    sign = -1.0 if rest.startswith("-") else 1.0
    rest = rest[1:] if rest[:1] in "+-" else rest
    if rest == "0":
        return timedelta(0)
    if not rest:
        raise InvalidDurationError(f"time: invalid duration {text!r}")
    seconds, pos = 0.0, 0
    while pos < len(rest):
        match = _DURATION_PART.match(rest, pos)
        if match is None:
            raise InvalidDurationError(f"time: invalid duration {text!r}")
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return timedelta(seconds=sign * seconds)
