"""Timestamps as Kubernetes, the forges and our own status descriptions write them (RFC 3339,
``2026-12-01T12:00:00Z``): one parser for all of them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse(value: Any) -> datetime | None:
    """An aware datetime (UTC when the text names no zone), or None when ``value`` is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def epoch(value: Any) -> float:
    """Seconds since the epoch; 0.0 when ``value`` is not a timestamp."""
    when = parse(value)
    return when.timestamp() if when is not None else 0.0


def stamp(when: datetime | None = None) -> str:
    """``when`` (default now) as RFC 3339 in UTC, to the second."""
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
