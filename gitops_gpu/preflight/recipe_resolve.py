"""Resolve an AICR recipe the way AICR's recipe builder does (pkg/recipe, v0.11 snapshot).

- **By criteria**: every overlay whose criteria match the query (asymmetric: an overlay field
  that is empty or ``any`` matches any query value; a specific overlay value matches only the
  same query value, never a query ``any``) is a candidate; candidates that are an ancestor
  (through ``spec.base``) of another candidate are dropped, the remaining leaves are merged
  least specific first (specificity = number of specific criteria, ties by name), each through
  its whole inheritance chain, a chain overlay merged once.
- **By name**: that overlay's chain alone.
- Every chain starts at ``overlays/base.yaml``. Merging: constraints by name (later wins);
  componentRefs by name, scalar fields later-non-empty-wins, ``overrides`` deep-merged,
  dependencyRefs and manifestFiles added; mixins named by any merged overlay are then
  composed in, and a mixin constraint or component identity that collides is an error.
- Registry defaults fill a component's chart version the recipe leaves out.
- Helm values of a component: ``components/<name>/values.yaml``, then its ``valuesFile`` when
  that is another file, then ``overrides`` (maps merge, anything else replaces).

A query that only the base (or only wildcard overlays) matches does not resolve: a recipe
for nothing in particular is not something a pool can follow. Every value keeps the
``file:line`` it came from, so a finding can cite it.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitops_gpu.fleet.yamlio import Document, PathKey
from gitops_gpu.preflight.recipe_catalog import (
    CRITERIA_FIELDS,
    Catalog,
    ComponentRef,
    Constraint,
    Recipe,
)
from gitops_gpu.preflight.recipe_values import leaves

# AICR's own criteria values (pkg/recipe/criteria.go); values any overlay uses count too.
KNOWN = {
    "service": {"eks", "gke", "aks", "oke", "kind", "lke", "bcm"},
    "accelerator": {"a100", "b200", "gb200", "gb300", "h100", "h200", "l40", "rtx-pro-6000"},
    "intent": {"training", "inference"},
    "os": {"ubuntu", "rhel", "cos", "amazonlinux", "talos"},
    "platform": {"dynamo", "kubeflow", "nim", "runai", "slurm"},
}
ALIASES = {
    "service": {"self-managed": "any", "self": "any", "vanilla": "any"},
    "os": {"al2": "amazonlinux", "al2023": "amazonlinux"},
}
_IDENTITY = ("type", "source", "version", "valuesFile", "chart", "dependencyRefs")


class ResolveError(Exception):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


@dataclass
class MergedComponent:
    name: str
    fields: dict[str, Any]
    origins: dict[str, str]  # field -> file:line that set it
    overrides: dict[str, Any]
    override_origins: dict[PathKey, str]


@dataclass
class Resolved:
    asked: str  # "h100-eks-ubuntu-training" or "criteria(service=eks, ...)"
    applied: list[str]  # overlay names merged, base first
    constraints: dict[str, Constraint]
    components: dict[str, MergedComponent]
    unmatched: list[str] = field(default_factory=list)  # query fields no overlay was specific to

    @property
    def leaf(self) -> str:
        return self.applied[-1]


def normalise(key: str, value: str | None) -> str:
    v = (value or "").strip().lower()
    v = ALIASES.get(key, {}).get(v, v)
    return v or "any"


def _field_matches(recipe_value: str, query_value: str) -> bool:
    if recipe_value in ("", "any"):
        return True
    return query_value not in ("", "any") and recipe_value == query_value


def matches(criteria: Mapping[str, str], query: Mapping[str, str]) -> bool:
    return all(_field_matches(criteria.get(k, ""), query.get(k, "any")) for k in CRITERIA_FIELDS)


def specificity(criteria: Mapping[str, str]) -> int:
    return sum(1 for k in CRITERIA_FIELDS if criteria.get(k, "any") not in ("", "any"))


def chain(cat: Catalog, name: str, referrer: str = "") -> list[Recipe]:
    """base first, ``name`` last; a cycle or a missing parent is a ResolveError."""
    out: list[Recipe] = []
    seen: list[str] = []
    current, via = name, referrer
    while current not in ("", "base"):
        if current in seen:
            loop = " -> ".join([*seen[seen.index(current) :], current])
            files = ", ".join(cat.overlays[n].file for n in seen[seen.index(current) :])
            raise ResolveError(
                f"cycle in spec.base: {loop} ({files})",
                "make spec.base chains end at the base recipe",
            )
        seen.append(current)
        recipe = cat.overlays.get(current)
        if recipe is None:
            where = f" (spec.base of {via})" if via else ""
            near = difflib.get_close_matches(current, sorted(cat.overlays), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(near)}?" if near else f"{len(cat.overlays)} known"
            raise ResolveError(
                f"no recipe named '{current}'{where} ({hint})",
                "use one of the known overlay names, or criteria",
            )
        out.append(recipe)
        via = f"{recipe.name} at {recipe.file}"
        current = recipe.base
    return [cat.base, *reversed(out)]


def _merge_ref(into: MergedComponent, ref: ComponentRef) -> None:
    for key, value in ref.fields.items():
        if isinstance(value, list):
            have = into.fields.setdefault(key, [])
            have.extend(v for v in value if v not in have)
        elif value != "":
            into.fields[key] = value
            into.origins[key] = _pos(ref.doc, (*ref.path, key))
    for path, value, origin in _leaves(ref.overrides, ref.doc, (*ref.path, "overrides")):
        _set(into.overrides, path, value)
        into.override_origins[path] = origin


def _pos(doc: Document, path: PathKey) -> str:
    return f"{doc.file}:{doc.where(path)[0]}"


def _leaves(
    data: Mapping[str, Any], doc: Document, at: PathKey, prefix: PathKey = ()
) -> Iterator[tuple[PathKey, Any, str]]:
    for key, value in data.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            yield from _leaves(value, doc, at, path)
        else:
            yield path, copy.deepcopy(value), _pos(doc, (*at, *path))


def _set(tree: dict[str, Any], path: PathKey, value: Any) -> None:
    node = tree
    for key in path[:-1]:
        child = node.get(str(key))
        if not isinstance(child, dict):
            child = node[str(key)] = {}
        node = child
    last = str(path[-1])
    if value == {} and isinstance(node.get(last), dict):
        return  # an empty map merges into a map (AICR deepMergeMap), it does not clear it
    node[last] = value


def _merge(spec: Resolved, recipe: Recipe) -> None:
    for c in recipe.constraints:
        spec.constraints[c.name] = c
    for ref in recipe.components:
        merged = spec.components.setdefault(ref.name, MergedComponent(ref.name, {}, {}, {}, {}))
        _merge_ref(merged, ref)


def _mixins(cat: Catalog, spec: Resolved, recipes: list[Recipe]) -> None:
    names: list[str] = []
    for r in recipes:
        names.extend(m for m in r.mixins if m not in names)
    for name in names:
        mixin = cat.mixins.get(name)
        if mixin is None:
            users = ", ".join(r.file for r in recipes if name in r.mixins)
            raise ResolveError(
                f"mixin '{name}' (named by {users}) is not in {cat.show('mixins/')}",
                "add the mixin file or remove it from spec.mixins",
            )
        for c in mixin.constraints:
            if c.name in spec.constraints:
                raise ResolveError(
                    f"mixin '{name}' constraint {c.name} ({c.origin}) collides with "
                    f"{spec.constraints[c.name].origin}",
                    "a constraint may come from the inheritance chain or a mixin, not both",
                )
        for ref in mixin.components:
            clash = [k for k in _IDENTITY if ref.fields.get(k)] + (
                ["overrides"] * bool(ref.overrides)
            )
            if ref.name in spec.components and clash:
                raise ResolveError(
                    f"mixin '{name}' sets {clash[0]} of component {ref.name} ({ref.origin}), "
                    "which the inheritance chain already declares",
                    "mixins may only add namespace or manifest files to an existing component",
                )
        _merge(spec, mixin)


def resolve(cat: Catalog, name: str | None, criteria: Mapping[str, str | None] | None) -> Resolved:
    """The merged recipe for an overlay ``name`` or for query ``criteria``."""
    if name is not None:
        recipes = chain(cat, name)
        asked = name
        unmatched: list[str] = []
    else:
        query = {k: normalise(k, (criteria or {}).get(k)) for k in CRITERIA_FIELDS}
        _check_values(cat, query)
        asked = "criteria(" + ", ".join(f"{k}={v}" for k, v in query.items() if v != "any") + ")"
        recipes, unmatched = _by_criteria(cat, query, asked)
    spec = Resolved(asked, [], {}, {}, unmatched)
    for recipe in recipes:
        if recipe.name in spec.applied:
            continue
        spec.applied.append(recipe.name)
        _merge(spec, recipe)
    _mixins(cat, spec, recipes)
    for comp in spec.components.values():
        default = cat.default_versions.get(comp.name)
        if not comp.fields.get("version") and default:
            comp.fields["version"] = default
            comp.origins["version"] = cat.show("registry.yaml")
    return spec


def _check_values(cat: Catalog, query: Mapping[str, str]) -> None:
    for key, value in query.items():
        used = {r.criteria.get(key, "") for r in cat.overlays.values()}
        known = (KNOWN[key] | used) - {"", "any"}
        if value != "any" and value not in known:
            raise ResolveError(
                f"criteria {key} '{value}' is not an AICR value (known: "
                f"{', '.join(sorted(known))})",
                f"use one of the known {key} values, or leave {key} out for any",
            )


def _by_criteria(
    cat: Catalog, query: Mapping[str, str], asked: str
) -> tuple[list[Recipe], list[str]]:
    found = [r for r in cat.overlays.values() if r.criteria and matches(r.criteria, query)]
    ancestors: set[str] = set()
    for r in found:
        for parent in chain(cat, r.name)[1:-1]:
            ancestors.add(parent.name)
    leaves = sorted(
        (r for r in found if r.name not in ancestors),
        key=lambda r: (specificity(r.criteria), r.name),
    )
    if not any(specificity(r.criteria) for r in leaves):
        raise ResolveError(
            f"no overlay of {cat.show('overlays/')} matches {asked} (only generic overlays "
            "would apply)",
            "check the criteria against the overlays' spec.criteria, or name the recipe",
        )
    recipes: list[Recipe] = []
    for leaf in leaves:
        recipes.extend(chain(cat, leaf.name))
    specific = {k for r in recipes for k in CRITERIA_FIELDS if r.criteria.get(k, "any") != "any"}
    unmatched = [f"{k}={v}" for k, v in query.items() if v != "any" and k not in specific]
    return recipes, unmatched


def component_values(
    cat: Catalog, comp: MergedComponent
) -> tuple[dict[str, Any], dict[PathKey, str]]:
    """The component's Helm values and, per leaf path, the file:line that set it."""
    values: dict[str, Any] = {}
    origins: dict[PathKey, str] = {}
    base_file = f"components/{comp.name}/values.yaml"
    values_file = str(comp.fields.get("valuesFile") or "")
    files = [base_file] if values_file != base_file else []
    files += [values_file] if values_file else []
    for rel in files:
        doc = cat.values_doc(rel)
        if doc is None:
            if rel == values_file:
                raise ResolveError(
                    f"values file {cat.show(rel)} (valuesFile of {comp.name}, "
                    f"{comp.origins.get('valuesFile', '?')}) does not exist",
                    "fix the valuesFile path in the overlay",
                )
            continue
        for path, value, origin in _leaves(doc.data or {}, doc, ()):
            _set(values, path, value)
            origins[path] = origin
    for path, value in leaves(comp.overrides):
        _set(values, path, value)
        origins[path] = comp.override_origins.get(path, "?")
    return values, origins
