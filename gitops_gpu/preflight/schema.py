"""Validate objects against the upstream CRDs' structural OpenAPI v3 schemas, offline.

A small validator of our own (no jsonschema dependency) that follows what the apiserver does
with a structural schema: null values of non-nullable fields are pruned, ``default`` values
count as present for ``required``, ``x-kubernetes-int-or-string`` accepts an int or a string,
``x-kubernetes-preserve-unknown-fields`` keeps unknown fields. Unknown fields elsewhere are an
error here although the apiserver would prune them silently: a field dropped on the floor is
exactly the stale-CRD trap (gpu-operator#186, #139) we want to catch before it ships.

CEL rules (``x-kubernetes-validations``): the ones we can translate are in ``_CEL``; transition
rules (``oldSelf``) are immutability checks that preflight does against ``--base`` instead;
any other rule is skipped deliberately and listed in ``CrdSchema.skipped_rules``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet.yamlio import PathKey
from gitops_gpu.preflight import crd_cache

Schema = dict[str, Any]
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}
_DEFAULT_NODE_SELECTOR_RULE = (
    "has(self.default) && self.default ? !has(self.nodeSelector) || "
    "size(self.nodeSelector) == 0 : true"
)
# CEL rule text -> the same predicate in Python (self is the object the rule sits on).
_CEL: dict[str, Callable[[Any], bool]] = {
    _DEFAULT_NODE_SELECTOR_RULE: lambda s: (
        not (isinstance(s, dict) and s.get("default") is True) or not s.get("nodeSelector")
    ),
}


@dataclass(frozen=True)
class SchemaIssue:
    path: PathKey
    message: str
    fix: str


@dataclass
class CrdSchema:
    api_version: str
    kind: str
    source: str
    schema: Schema
    skipped_rules: list[tuple[str, str]] = field(default_factory=list)  # (path, rule)

    def validate(self, obj: Any, memo: Memo | None = None) -> list[SchemaIssue]:
        """The issues of ``obj``. ``memo`` (one per batch of read-only objects, e.g. every
        pool's merged policy, which share the base's maps): a map or list judged once is
        not judged again; its issues are repeated at the path it has in each object."""
        out: list[_Issue] = []
        _check(obj, self.schema, (), out, _Run(self.kind, memo))
        return [SchemaIssue(path, f"{_dot(path)}: {message}", fix) for path, message, fix in out]


# (id of a map or list, id of its schema) -> (the value, kept so the id stays its own; the
# issues found in it, paths relative to it)
Memo = dict[tuple[int, int], tuple[Any, tuple["_Issue", ...]]]
_Issue = tuple[PathKey, str, str]  # path, message, fix


@dataclass(frozen=True)
class _Run:
    kind: str
    memo: Memo | None


def _type_name(v: Any) -> str:
    for name, test in _TYPES.items():
        if name != "number" and test(v):
            return name
    return "number" if _TYPES["number"](v) else "null" if v is None else type(v).__name__


def _dot(path: PathKey) -> str:
    s = ""
    for p in path:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s or "<root>"


def _issue(out: list[_Issue], path: PathKey, message: str, fix: str) -> None:
    out.append((path, message, fix))


def _check(value: Any, schema: Schema, path: PathKey, out: list[_Issue], run: _Run) -> None:
    if value is None:
        return  # pruned by the apiserver unless nullable, and then null is allowed
    memo = run.memo
    if memo is not None and type(value) in (dict, list):
        key = (id(value), id(schema))
        hit = memo.get(key)
        if hit is None:
            found: list[_Issue] = []
            _check_value(value, schema, (), found, run)
            hit = memo[key] = (value, tuple(found))
        out.extend(((*path, *rel), message, fix) for rel, message, fix in hit[1])
        return
    _check_value(value, schema, path, out, run)


def _check_value(value: Any, schema: Schema, path: PathKey, out: list[_Issue], run: _Run) -> None:
    if schema.get("x-kubernetes-int-or-string"):
        if not (_TYPES["integer"](value) or isinstance(value, str)):
            _issue(
                out,
                path,
                f"expected an integer or a string, got {_type_name(value)}",
                "write a number like 1 or a string like '25%'",
            )
            return
    elif "type" in schema and not _TYPES[schema["type"]](value):
        _issue(
            out,
            path,
            f"expected {schema['type']}, got {_type_name(value)} {value!r}",
            _type_fix(schema["type"], value),
        )
        return
    for key in ("anyOf", "oneOf"):
        if key in schema and not schema.get("x-kubernetes-int-or-string"):
            ok = sum(1 for sub in schema[key] if not _sub_issues(value, sub, path, run))
            if ok == 0 or (key == "oneOf" and ok > 1):
                _issue(
                    out, path, f"does not match {key} of the schema", "see the CRD for this field"
                )
    for sub in schema.get("allOf", []):
        _check(value, sub, path, out, run)
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(e) for e in schema["enum"])
        _issue(
            out,
            path,
            f"unsupported value {value!r}: supported values: {allowed}",
            f"use one of {allowed}",
        )
    if isinstance(value, str):
        _check_string(value, schema, path, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, out)
    elif isinstance(value, list):
        _check_array(value, schema, path, out, run)
    elif isinstance(value, dict):
        _check_object(value, schema, path, out, run)
    for rule in schema.get("x-kubernetes-validations", []):
        _check_rule(value, rule, path, out, run)


def _sub_issues(value: Any, schema: Schema, path: PathKey, run: _Run) -> list[_Issue]:
    sub: list[_Issue] = []
    _check(value, schema, path, sub, run)
    return sub


def _type_fix(expected: str, value: Any) -> str:
    if expected == "boolean" and str(value).lower() in ("yes", "no", "on", "off", "y", "n"):
        return (
            "write true or false (in YAML 1.2, which gitops-gpu reads, yes/no/on/off are strings)"
        )
    if expected == "string" and not isinstance(value, dict | list):
        return f"quote the value ('{value}') so YAML reads it as a string"
    return f"write a value of type {expected}"


def _check_string(value: str, schema: Schema, path: PathKey, out: list[_Issue]) -> None:
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        _issue(
            out,
            path,
            f"{value!r} does not match pattern {schema['pattern']!r}",
            "correct the value's format",
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        _issue(out, path, f"longer than {schema['maxLength']} characters", "shorten it")
    if "minLength" in schema and len(value) < schema["minLength"]:
        _issue(out, path, f"shorter than {schema['minLength']} characters", "lengthen it")


def _check_number(value: float, schema: Schema, path: PathKey, out: list[_Issue]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        _issue(out, path, f"{value} is not a finite number", "write a finite number")
        return
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and (value < lo or (schema.get("exclusiveMinimum") and value == lo)):
        _issue(out, path, f"{value} is below the minimum {lo}", f"use a value >= {lo}")
    if hi is not None and (value > hi or (schema.get("exclusiveMaximum") and value == hi)):
        _issue(out, path, f"{value} is above the maximum {hi}", f"use a value <= {hi}")
    rng = _INT_RANGES.get(schema.get("format", ""))
    if rng and not rng[0] <= value <= rng[1]:
        _issue(out, path, f"{value} does not fit {schema['format']}", "use a smaller number")


def _check_array(
    value: list[Any], schema: Schema, path: PathKey, out: list[_Issue], run: _Run
) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        _issue(out, path, f"more than {schema['maxItems']} items", "remove items")
    if "minItems" in schema and len(value) < schema["minItems"]:
        _issue(out, path, f"fewer than {schema['minItems']} items", "add items")
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _check(item, items, (*path, i), out, run)
    kind = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if kind == "set" or (kind == "map" and keys):
        seen: list[Any] = []
        for i, item in enumerate(value):
            ident = (
                item
                if kind == "set"
                else tuple(item.get(k) for k in keys)
                if isinstance(item, dict)
                else item
            )
            if ident in seen:
                _issue(out, (*path, i), f"duplicate entry {ident!r}", "remove the duplicate")
            seen.append(ident)


def _check_object(
    value: dict[str, Any], schema: Schema, path: PathKey, out: list[_Issue], run: _Run
) -> None:
    props: dict[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, sub in value.items():
        if key in props:
            _check(sub, props[key], (*path, key), out, run)
        elif isinstance(extra, dict):
            _check(sub, extra, (*path, key), out, run)
        elif not (
            extra is True
            or schema.get("x-kubernetes-preserve-unknown-fields")
            or (not props and schema.get("type") == "object" and extra is None)
        ):
            known = ", ".join(sorted(props))
            _issue(
                out,
                (*path, key),
                f"unknown field {key!r} (not in the {run.kind} CRD)",
                f"remove it or fix its spelling (known here: {known}); the apiserver would "
                "silently drop it",
            )
    for key in schema.get("required", []):
        if key not in value and "default" not in props.get(key, {}):
            _issue(out, (*path, key), "required field is missing", f"add {key!r}")


def _check_rule(
    value: Any, rule: dict[str, Any], path: PathKey, out: list[_Issue], run: _Run
) -> None:
    text = str(rule.get("rule", ""))
    if "oldSelf" in text:
        return  # transition rule: checked against --base (immutable fields)
    test = _CEL.get(" ".join(text.split()))
    if test is None:
        return  # recorded in skipped_rules when the CRD was loaded
    if not test(value):
        _issue(
            out,
            path,
            str(rule.get("message") or f"violates rule {text}"),
            "change the object so the CRD's validation rule holds",
        )


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _walk_rules(schema: Schema, path: str) -> Iterator[tuple[str, str]]:
    for rule in schema.get("x-kubernetes-validations", []):
        text = " ".join(str(rule.get("rule", "")).split())
        if "oldSelf" not in text and text not in _CEL:
            yield path, text
    for key, sub in schema.get("properties", {}).items():
        yield from _walk_rules(sub, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _walk_rules(schema[key], f"{path}[]")


def load_crds(crds_dir: Path) -> dict[tuple[str, str], CrdSchema]:
    """(apiVersion, kind) -> schema for every CRD version in ``crds_dir``."""
    d = Path(crds_dir)
    if not d.is_dir():
        raise FleetError(
            f"CRD directory {d} does not exist",
            file=str(d),
            fix="pass --crds with the GPU Operator's config/crd/bases directory",
        )
    stamp = tuple(
        (p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(d.glob("*.y*ml"))
    )
    return dict(_load_crds(str(d.resolve()), stamp))


@functools.lru_cache(maxsize=8)
def _load_crds(
    directory: str, stamp: tuple[tuple[str, int, int], ...]
) -> dict[tuple[str, str], CrdSchema]:
    out: dict[tuple[str, str], CrdSchema] = {}
    for name, _, _ in stamp:
        for doc in crd_cache.load_all(Path(directory) / name):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec.get("versions", []):
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if not schema:
                    continue
                api = f"{spec['group']}/{version['name']}"
                crd = CrdSchema(api, spec["names"]["kind"], name, schema)
                crd.skipped_rules = list(_walk_rules(schema, ""))
                out[(api, crd.kind)] = crd
    return out
