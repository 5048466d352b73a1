"""What changes between a cluster's CRD and another release's, on plain schemas (pure).

Helm installs a chart's ``crds/`` once and never upgrades them, so a cluster upgraded with
``helm upgrade`` alone keeps the old CRDs: the apiserver prunes every field the old schema
lacks, silently (NVIDIA/gpu-operator#139, #186, #431, #602). Three questions, one per
finding: which stored versions a new CRD would drop (the apiserver refuses that update,
GG093); which fields an object sets that the live schema lacks (pruned on apply, GG094); which
fields the release's schema has that the live one lacks (the CRDs are stale, GG095).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gitops_gpu.fleet.yamlio import PathKey

Schema = Mapping[str, Any]


def versions(crd: Mapping[str, Any]) -> dict[str, Schema]:
    """version name -> its openAPIV3Schema."""
    out: dict[str, Schema] = {}
    for v in (crd.get("spec") or {}).get("versions") or []:
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if isinstance(schema, dict):
            out[str(v.get("name"))] = schema
    return out


def dropped_stored_versions(live: Mapping[str, Any], target: Mapping[str, Any]) -> list[str]:
    """Versions the cluster stores objects in that ``target`` no longer lists."""
    stored = (live.get("status") or {}).get("storedVersions") or []
    listed = {str(v.get("name")) for v in (target.get("spec") or {}).get("versions") or []}
    return [str(v) for v in stored if str(v) not in listed]


def _free(schema: Schema) -> bool:
    """Anything goes below: the apiserver keeps unknown fields here."""
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or (
        schema.get("additionalProperties") is True
    )


def pruned(schema: Schema, value: Any, path: PathKey = ()) -> Iterator[PathKey]:
    """The paths in ``value`` the apiserver would drop under ``schema`` (topmost only)."""
    if _free(schema):
        return
    if isinstance(value, dict):
        props: Mapping[str, Schema] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                yield from pruned(props[key], sub, (*path, key))
            elif isinstance(extra, dict):
                yield from pruned(extra, sub, (*path, key))
            elif props or schema.get("type") != "object":
                yield (*path, key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from pruned(schema["items"], item, (*path, i))


def missing(live: Schema, target: Schema, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Dotted paths ``target`` declares that ``live`` lacks (topmost only; ``[]`` marks a
    list's items)."""
    if _free(live):
        return
    live_props: Mapping[str, Schema] = live.get("properties") or {}
    for key, sub in (target.get("properties") or {}).items():
        here = (*path, key)
        if key not in live_props:
            if live.get("properties") is not None or path:
                yield ".".join(here)
            continue
        yield from missing(live_props[key], sub, here)
    live_items, target_items = live.get("items"), target.get("items")
    if isinstance(live_items, dict) and isinstance(target_items, dict):
        yield from missing(
            live_items, target_items, (*path[:-1], f"{path[-1]}[]") if path else ("[]",)
        )
    live_extra, target_extra = live.get("additionalProperties"), target.get("additionalProperties")
    if isinstance(live_extra, dict) and isinstance(target_extra, dict):
        yield from missing(live_extra, target_extra, (*path, "*"))


def dotted(path: PathKey) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
