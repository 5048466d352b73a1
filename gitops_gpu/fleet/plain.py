"""Copies of plain YAML data (maps, lists, strings, numbers, booleans, null).

Fleet data is copied where one pool's document must not share a map or list with another's.
Only maps and lists are copied; strings and numbers are immutable and shared, so a 2,000-pool
fleet holds one copy of its base's strings, not one per pool (a pickle round trip, as fast,
made each pool's strings anew: +53 MB). About 4x faster than :func:`copy.deepcopy`, which
pays for a memo and a type dispatch per object.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def copy(data: T) -> T:
    """A copy of ``data`` (plain YAML values) that shares no map or list with it."""
    return _copy(data)  # type: ignore[no-any-return]


def _copy(data: Any) -> Any:
    kind = type(data)
    if kind is dict:
        return {k: _copy(v) for k, v in data.items()}
    if kind is list:
        return [_copy(v) for v in data]
    return data
