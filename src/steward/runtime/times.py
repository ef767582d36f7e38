"""Timestamps as the API server writes and reads them (RFC 3339, UTC, "Z")."""

from __future__ import annotations

from datetime import UTC, datetime
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
