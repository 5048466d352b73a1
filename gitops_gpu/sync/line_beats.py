"""Node heartbeats told from a watch line's bytes, before the line is decoded.

Kubelets (and kwok) rewrite every Node's status every few minutes only to move
``lastHeartbeatTime``: at 10,000 nodes, 10,000 events a cycle, each decoded (~45 us) and
projected (~35 us) to find the projection unchanged. A line that differs from the node's last
applied line only in its volatile spans is such a heartbeat, and is answered without decoding.

The volatile spans are the object's ``resourceVersion`` (matched in the event's header, where
the apiserver writes it: ``{"type":..,"object":{"kind":"Node","apiVersion":"v1","metadata":
{"name":..,"uid":..,"resourceVersion":..``) and every ``"lastHeartbeatTime"`` or ``"time"``
(managedFields) holding an RFC 3339 time. Nothing a projection reads can hide there: a label
value cannot hold ``:``, the annotations read all carry a prefix (never the bare key
``time``), and a JSON string cannot contain an unescaped quote. A line that does not start
with that header (another shape, a DELETED, an ERROR) is always decoded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Decode = Callable[[bytes], Any]

# The event type a heartbeat line is answered with: the informer only moves its resourceVersion.
BEAT = "HEARTBEAT"
# Where a cached Node projection keeps its last applied line's fingerprint.
KEY = "_line"
_HEADER = re.compile(
    rb'\{"type":"(?:ADDED|MODIFIED)",(?P<object>"object":\{"kind":"Node","apiVersion":"v1",'
    rb'"metadata":\{"name":"(?P<name>[^"\\]+)","uid":"[^"\\]*","resourceVersion":")(?P<rv>\d+)"'
)
_TIMES = re.compile(rb'"(?:lastHeartbeatTime|time)":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"')


def fingerprint(line: bytes) -> tuple[str, str, int] | None:
    """(name, resourceVersion, hash of the line less its volatile spans) of a Node ADDED or
    MODIFIED line in the apiserver's shape; None for any other line."""
    m = _HEADER.match(line)
    if m is None:
        return None
    start, end = m.span("rv")
    # From the object on (ADDED or MODIFIED alike). hash() of bytes is SipHash, keyed per
    # process (unless PYTHONHASHSEED fixes the key): 64 bits, and no key to aim a line at.
    body = line[m.start("object") : start] + _TIMES.sub(b"", line[end:])
    return m["name"].decode(), m["rv"].decode(), hash(body)


class LineBeats:
    """The decoder that answers a node's heartbeat lines. Each cached Node projection carries
    its last applied line's fingerprint under ``KEY`` (set by the informer: ``remember``), so
    a re-listed cache, whose projections carry none, compares with nothing."""

    def __init__(self, lookup: Callable[[str], Obj | None]) -> None:
        self._lookup = lookup  # the informer's cached projection by name
        self.beats = 0  # lines answered without decoding

    def decoder(self, parse: Decode) -> Decode:
        """``parse``, except for a line whose fingerprint equals its cached node's: that gives
        a BEAT event carrying the name and the new resourceVersion. A parsed line's event
        carries its fingerprint under ``KEY`` for ``remember``."""

        def decode(line: bytes) -> Any:
            fp = fingerprint(line)
            if fp is None:
                return parse(line)
            name, rv, digest = fp
            cached = self._lookup(name)
            if cached is not None and cached.get(KEY) == digest:
                self.beats += 1
                return {"type": BEAT, "object": {"metadata": {"name": name, "resourceVersion": rv}}}
            event = parse(line)
            if isinstance(event, dict):
                event[KEY] = digest
            return event

        return decode

    @staticmethod
    def remember(event: Obj, cached: Obj) -> None:
        """``cached`` (the projection the cache now holds for ``event``'s node) stands for the
        event's line. A value set on a shared projection: readers never read ``KEY``."""
        digest = event.get(KEY)
        if digest is not None:
            cached[KEY] = digest
