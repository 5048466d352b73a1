"""Preflight against AICR recipes: where a pool deviates from the recipe it names.

A pool names its recipe in pool.yaml (``spec.recipe``: an overlay name, or criteria);
``check --recipes DIR`` resolves it (recipe_resolve.py) and compares the recipe's
gpu-operator component with what the pool compiles to:

- the driver version (Helm ``driver.version``) with the pool's NVIDIADriver version (GG052);
- the chart version with the cluster's ``gpuOperatorVersion`` in fleet.yaml (GG053);
- every other value the recipe pins that is a ClusterPolicy field (the CRD schema says which:
  chart-only values such as ``operator.resources`` and fields the CRD marks deprecated are not
  compared) with the pool's merged ClusterPolicy, CRD defaults included (GG054). A value the
  pool leaves unset and the CRD does not default is not a contradiction; env lists compare
  per variable name;
- with live nodes (``--kubeconfig``): the recipe's cluster constraints, Kubernetes version and
  node OS (NFD labels), against the cluster (GG055).

Deviations are warnings, errors with ``spec.recipePolicy: enforce`` in fleet.yaml. A recipe that
does not resolve (GG050) and a malformed recipe file (GG051) are always errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet.compiled import CompiledFleet, PoolTarget
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.fleet.models import RecipeRef
from gitops_gpu.fleet.yamlio import PathKey, dotted
from gitops_gpu.preflight import checks, compat, recipe_live, recipe_values
from gitops_gpu.preflight.findings import Finding, Severity
from gitops_gpu.preflight.recipe_catalog import Catalog, RecipeFileError, load_catalog
from gitops_gpu.preflight.recipe_resolve import Resolved, ResolveError, component_values, resolve
from gitops_gpu.preflight.schema import CrdSchema

OPERATOR = "gpu-operator"


@dataclass(frozen=True)
class Context:
    repo: FleetRepo
    compiled: CompiledFleet
    cluster_policy_schema: CrdSchema
    nodes: Mapping[str, Sequence[Mapping[str, Any]]]
    server_versions: Mapping[str, str]  # cluster -> "v1.36.3" (live only)


def _file_finding(exc: RecipeFileError) -> Finding:
    return Finding.make(
        "GG051", exc.message, file=exc.file, line=exc.line, fix=exc.fix, source=exc.file
    )


def check(ctx: Context, recipes_dir: Path | str | None) -> list[Finding]:
    """Recipe findings for every pool that names a recipe (pool.yaml spec.recipe)."""
    if recipes_dir is not None and not Path(recipes_dir).is_dir():
        raise FleetError(
            f"recipes directory {recipes_dir} does not exist",
            file=str(recipes_dir),
            fix="pass --recipes the recipes/ directory of an AICR checkout",
        )
    pools = sorted(n for n, p in ctx.repo.pools.items() if p.model.spec.recipe is not None)
    if not pools:
        return []
    if recipes_dir is None:
        return [
            _finding(
                ctx,
                "GG056",
                name,
                "recipe",
                f"pool '{name}' names an AICR recipe but check ran without --recipes, so it "
                "is not compared",
                fix="run `gitops-gpu check --recipes DIR` with DIR the recipes/ directory of "
                "an AICR checkout",
            )
            for name in pools
        ]
    try:
        catalog = load_catalog(Path(recipes_dir), str(recipes_dir))
    except RecipeFileError as exc:
        return [_file_finding(exc)]  # the rest of preflight still runs
    out: list[Finding] = []
    for name in pools:
        ref = ctx.repo.pools[name].model.spec.recipe
        assert ref is not None
        try:
            out += _compare(ctx, catalog, name, resolve(catalog, ref.name, _criteria(ref)))
        except RecipeFileError as exc:  # a values file the recipe names is malformed
            out.append(_file_finding(exc))
        except ResolveError as exc:
            out.append(
                _on_recipe(ctx, name)(
                    "GG050",
                    f"recipe {_key(ref)} does not resolve in {recipes_dir}: {exc.message}",
                    fix=exc.fix,
                )
            )
    return out


def _key(ref: RecipeRef) -> str:
    if ref.name is not None:
        return f"'{ref.name}'"
    crit = _criteria(ref) or {}
    return "criteria(" + ", ".join(f"{k}={v}" for k, v in crit.items() if v) + ")"


def _criteria(ref: RecipeRef) -> dict[str, str | None] | None:
    return ref.criteria.model_dump() if ref.criteria is not None else None


def _severity(ctx: Context, code: str) -> Severity | None:
    enforce = ctx.repo.fleet.spec.recipe_policy == "enforce"
    return Severity.ERROR if enforce and code in ("GG052", "GG053", "GG054", "GG055") else None


def _finding(
    ctx: Context,
    code: str,
    pool: str,
    anchor: str,
    message: str,
    *,
    fix: str,
    source: str = "",
    where: tuple[str, int] | None = None,
) -> Finding:
    file, line = where or _pool_where(ctx.repo, pool, ("spec", anchor))
    return Finding.make(
        code,
        message,
        file=file,
        line=line,
        fix=fix,
        pool=pool,
        source=source,
        cluster=ctx.repo.pools[pool].model.spec.cluster,
        field=anchor,
        severity=_severity(ctx, code),
    )


def _on_recipe(ctx: Context, pool: str) -> recipe_live.MakeFinding:
    """Findings on the pool's ``spec.recipe``, each message after "pool 'NAME': "."""

    def make(code: str, message: str, *, fix: str, source: str = "") -> Finding:
        return _finding(
            ctx, code, pool, "recipe", f"pool '{pool}': {message}", fix=fix, source=source
        )

    return make


def _pool_where(repo: FleetRepo, pool: str, path: PathKey) -> tuple[str, int]:
    doc = repo.pools[pool].pool_doc
    return doc.file, doc.where(path)[0]


def _compare(ctx: Context, cat: Catalog, pool: str, rec: Resolved) -> list[Finding]:
    target = ctx.compiled.pool(pool)
    out: list[Finding] = []
    label = f"recipe {rec.leaf}" + (f" ({rec.asked})" if rec.asked != rec.leaf else "")
    on_recipe = _on_recipe(ctx, pool)
    if rec.unmatched:
        out.append(
            on_recipe(
                "GG056",
                f"no overlay is specific to {', '.join(rec.unmatched)}; {label} is generic there",
                fix="name a recipe for this hardware, or add an overlay for it",
            )
        )
    comp = rec.components.get(OPERATOR)
    if comp is None:
        out.append(
            on_recipe(
                "GG056",
                f"{label} has no gpu-operator component to compare with",
                fix="name a GPU recipe",
            )
        )
        return out
    values, origins = component_values(cat, comp)
    out += _driver_version(ctx, pool, target, label, values, origins)
    out += _chart_version(ctx, pool, label, comp.fields.get("version"), comp.origins)
    out += _values(ctx, pool, label, values, origins)
    out += recipe_live.constraints(ctx, pool, label, rec, on_recipe)
    return out


def _driver_version(
    ctx: Context,
    pool: str,
    target: PoolTarget,
    label: str,
    values: Mapping[str, Any],
    origins: Mapping[PathKey, str],
) -> list[Finding]:
    want = (values.get("driver") or {}).get("version")
    if want is None or str(want) == str(target.driver_version):
        return []
    where = fleet_compile.locate(ctx.repo, pool, ("spec", "driver", "version"))
    have = target.driver_version or "no version (the operator's default)"
    return [
        _finding(
            ctx,
            "GG052",
            pool,
            "driver.version",
            f"pool '{pool}': driver {have} differs from "
            f"{label}'s {want} ({origins.get(('driver', 'version'), '?')})",
            fix=f"pin driver.version: {want}, or follow a recipe validated with {have}",
            source=origins.get(("driver", "version"), ""),
            where=where,
        )
    ]


def _chart_version(
    ctx: Context, pool: str, label: str, want: Any, origins: Mapping[str, str]
) -> list[Finding]:
    cluster = ctx.repo.pools[pool].model.spec.cluster
    have = compat.operator_version(ctx.repo, cluster)
    where = compat.operator_version_where(ctx.repo, cluster)
    if want is None:
        return []
    source = origins.get("version", "")
    if have is None:
        return [
            _finding(
                ctx,
                "GG056",
                pool,
                "gpuOperatorVersion",
                f"pool '{pool}': {label} pins GPU "
                f"Operator chart {want} ({source}); cluster '{cluster}' declares no "
                "gpuOperatorVersion, so the chart version is not compared",
                fix=f"set gpuOperatorVersion under spec.clusters[name={cluster}] in fleet.yaml",
                source=source,
                where=where,
            )
        ]
    if _v(have) == _v(str(want)):
        return []
    return [
        _finding(
            ctx,
            "GG053",
            pool,
            "gpuOperatorVersion",
            f"pool '{pool}': cluster '{cluster}' runs "
            f"GPU Operator {have}, {label} is validated with chart {want} ({source})",
            fix=f"move the cluster to GPU Operator {want}, or follow a recipe validated "
            f"with {have}",
            source=source,
            where=where,
        )
    ]


def _v(text: str) -> str:
    return text.strip().removeprefix("v")


def _values(
    ctx: Context,
    pool: str,
    label: str,
    values: Mapping[str, Any],
    origins: Mapping[PathKey, str],
) -> list[Finding]:
    policy = ctx.repo.policy_view(pool)
    schema = ctx.cluster_policy_schema.schema
    out: list[Finding] = []
    for path, detail in recipe_values.contradictions(values, policy, schema, label):
        field, source = dotted(path), origins.get(path, "")
        out.append(
            _finding(
                ctx,
                "GG054",
                pool,
                field,
                f"pool '{pool}': {field} is {detail} ({source})",
                fix=f"set {field} as the recipe does, or follow another recipe",
                source=source,
                where=fleet_compile.locate(ctx.repo, pool, ("spec", *path)),
            )
        )
    return out


def matched_nodes(ctx: Context, pool: str) -> list[Mapping[str, Any]]:
    target = ctx.compiled.pool(pool)
    return [n for n in ctx.nodes.get(target.cluster, []) if checks.matches(target.node_selector, n)]
