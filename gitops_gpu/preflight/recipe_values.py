"""Which Helm values of a recipe the pool's ClusterPolicy contradicts (pure).

A recipe pins GPU Operator Helm values; the ones that are ClusterPolicy fields (the CRD schema
says which; chart-only values such as ``operator.resources`` and fields whose description
starts with "Deprecated" are left out) are compared with the pool's merged ClusterPolicy, CRD
defaults included. A value the pool leaves unset where the CRD has no default is not a
contradiction; lists of ``{name, value}`` (env) compare per name; versions compare without
a leading ``v``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from gitops_gpu.fleet.yamlio import PathKey

_MISSING = object()
SKIP = {("driver", "version")}  # compared on its own (recipe_check: GG052)


def contradictions(
    values: Mapping[str, Any], policy: Mapping[str, Any], schema: Mapping[str, Any], label: str
) -> Iterator[tuple[PathKey, str]]:
    """(path, "what the pool has where the recipe pins what") per contradicted value."""
    for path, want in leaves(values):
        if path in SKIP:
            continue
        node = _schema_at(schema, path)
        if node is None:
            continue
        have = _pool_value(policy, node, path)
        if have is _MISSING:
            continue
        for detail in _contradicts(want, have, label):
            yield path, detail


def _schema_at(schema: Mapping[str, Any], path: PathKey) -> Mapping[str, Any] | None:
    node: Mapping[str, Any] = schema["properties"]["spec"]
    for key in path:
        props = node.get("properties") or {}
        if key not in props:
            return None
        node = props[key]
        if str(node.get("description", "")).startswith("Deprecated"):
            return None
    return node


def _pool_value(doc: Mapping[str, Any], schema: Mapping[str, Any], path: PathKey) -> Any:
    node: Any = doc.get("spec") or {}
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return schema.get("default", _MISSING)
        node = node[key]
    return node


def leaves(values: Mapping[str, Any], prefix: PathKey = ()) -> Iterator[tuple[PathKey, Any]]:
    """(path, value) per leaf of nested Helm values; an empty mapping is a leaf."""
    for key, value in values.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


def _contradicts(want: Any, have: Any, label: str) -> list[str]:
    if isinstance(want, list) and isinstance(have, list) and _named(want) and _named(have):
        theirs = {e["name"]: e.get("value") for e in have}
        return [
            f"{e['name']}={_show(theirs[e['name']])} where {label} pins {_show(e.get('value'))}"
            for e in want
            if e["name"] in theirs and str(theirs[e["name"]]) != str(e.get("value"))
        ]
    if _same(want, have):
        return []
    return [f"{_show(have)} where {label} pins {_show(want)}"]


def _named(items: list[Any]) -> bool:
    return all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in items)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, int | float | str) and isinstance(b, int | float | str):
        return str(a) == str(b) or re.sub(r"^v", "", str(a)) == re.sub(r"^v", "", str(b))
    return bool(a == b)
