"""Base + overlay merge of ClusterPolicy documents.

Rules (the ones a person expects from "my pool's file on top of the base"): maps merge key by
key, lists and scalars from the overlay replace the base's, and ``null`` deletes the key. Nulls
left anywhere are dropped too: the apiserver prunes null values of non-nullable CRD fields, so
keeping them would only make our view differ from what the cluster stores.
"""

from __future__ import annotations

from typing import Any

from gitops_gpu.fleet.yamlio import Document, PathKey


def prune_nulls(data: Any) -> Any:
    """A deep copy of ``data`` without null map values."""
    if isinstance(data, dict):
        return {k: prune_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [prune_nulls(v) for v in data]
    return data


def merge(base: Any, overlay: Any) -> Any:
    """``overlay`` merged over ``base``; neither input is modified."""
    if not isinstance(base, dict) or not isinstance(overlay, dict):
        return prune_nulls(overlay)
    return merge_shared(prune_nulls(base), overlay)  # a fresh copy: the result is the caller's


def merge_shared(base: dict[Any, Any], overlay: dict[Any, Any]) -> dict[Any, Any]:
    """``overlay`` merged over ``base`` (null-free) by the rules above, without copying
    what the overlay leaves alone: the result shares those maps and lists with ``base``, so it
    is for reading only. 2,000 pools over one base cost one base, and a check that has judged
    a shared part once (preflight/schema.py) knows it for every pool."""
    out = dict(base)
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_shared(out[key], value)
        else:
            out[key] = prune_nulls(value)
    return out


def origin(path: PathKey, overlay: Document | None, base: Document | None) -> tuple[str, int]:
    """The file and line a merged field came from: the overlay if it wrote the field (or the
    closest ancestor of it), else the base."""
    p = tuple(path)
    while p:
        for doc in (overlay, base):
            if doc is not None and doc.has(p):
                return doc.file, doc.positions[p][0]
        p = p[:-1]
    doc = overlay or base
    return (doc.file, doc.where(())[0]) if doc else ("", 0)
