"""``run_preflight``: every check over one fleet repo checkout, as a list of findings.

Order: tree (the fleet files are exported by the controller's rules, fleet/export.py: a clean
checkout is judged as its commit, a dirty one as its working tree) -> load (stops at the first
broken file set) -> compile -> CRD conformance -> compile
rules -> version matrix -> with ``base_rev``: immutable fields, blast radius and the plan ->
with a cluster: live node overlap and a server-side dry-run. Usage/IO problems (no such
directory, no CRDs, unknown revision, unreachable cluster) raise GitopsGpuError instead.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_gpu import names
from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import export, mig_layouts, scratch
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.export import TreeError
from gitops_gpu.fleet.loader import FleetRepo, RepoLoadError, load_repo
from gitops_gpu.fleet.models import DriverSettings
from gitops_gpu.preflight import (
    checks,
    compat,
    conformance,
    crd_source,
    history,
    images,
    live,
    matrix,
    mig_layout_check,
    operand_checks,
    operator_crds,
    operator_release,
    promql,
    recipe_check,
    recipe_live,
    removals,
    sharing_check,
    windows_check,
)
from gitops_gpu.preflight.disruption import Disruption, make_disruption
from gitops_gpu.preflight.findings import Finding, has_errors, sort_findings
from gitops_gpu.preflight.operator_release import Release
from gitops_gpu.preflight.plan import Plan, make_plan
from gitops_gpu.preflight.schema import load_crds

Nodes = Mapping[str, Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class PreflightResult:
    findings: list[Finding]
    compiled: CompiledFleet | None  # None when the repo does not load or compile
    plan: Plan | None = None  # with base_rev
    base_commit: str | None = None
    live_nodes: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    disruption: Disruption | None = None  # with base_rev: what the plan does to nodes
    releases: Mapping[str, Release] = field(default_factory=dict)  # cluster -> gpuOperator

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)


def run_preflight(
    repo_path: Path | str,
    *,
    commit: str | None = None,
    base_rev: str | None = None,
    crds_dir: Path | str | None = None,
    live_nodes: Nodes | None = None,
    kubeconfig: str | None = None,
    client_factory: live.ClientFactory | None = None,
    today: datetime.date | None = None,
    recipes_dir: Path | str | None = None,
    exported: bool = False,
    now: float | None = None,
) -> PreflightResult:
    """Check the fleet repo at ``repo_path``.

    ``commit`` is stamped on compiled objects (default: HEAD of the enclosing git repo).
    ``live_nodes`` (cluster -> Node objects) replaces declared GPU products and enables the
    node-overlap check; ``kubeconfig`` (or ``client_factory``, a context -> client callable)
    reads them from the clusters and adds a server-side dry-run. ``recipes_dir`` (an AICR
    recipes/ directory) compares pools that name a recipe with it (preflight/recipe_check.py).
    ``exported``: ``repo_path`` already is an export of the commit by fleet/export.py (the
    controller's checkout), read as it is. ``now``: when stage windows are judged from.
    """
    root = Path(repo_path)
    if not root.is_dir():
        raise FleetError(
            f"{root} is not a directory",
            file=str(root),
            fix="pass the path of a fleet repo checkout",
        )
    crds = load_crds(Path(crds_dir) if crds_dir else crd_source.from_env())
    sha = commit or history.head_commit(root) or "working-tree"
    # The loader reads an export, never the checkout itself: the same rules for submodules,
    # symlinks, special files and sizes as the controller's export of the commit.
    with scratch.scratch_dir("gitops-gpu-tree-") as tmp:
        notes: list[Finding] = []
        tree = root
        if not exported:
            try:
                found_tree = export.export_tree(root, Path(tmp))
            except TreeError as exc:
                return PreflightResult([tree_finding(exc)], None)
            tree = found_tree.root
            notes = [
                Finding.make("GG006", s.message, file=s.file, fix=s.fix) for s in found_tree.skipped
            ]
        try:
            repo = load_repo(tree)
        except RepoLoadError as exc:
            found = [
                Finding.make(e.code, e.message, file=e.file, line=e.line, fix=e.fix, field=e.field)
                for e in exc.errors
            ]
            return PreflightResult(sort_findings(found + notes), None)
        # Helm renders from the export too: the chart the controller would see.
        releases, notes_release = operator_release.releases(repo, tree)
    compiled, conflicts = fleet_compile.compile_checked(repo, sha)
    findings: list[Finding] = notes + notes_release + list(checks.conflicts(repo, conflicts))
    findings += operator_release.unstaged(repo, compiled)
    schema_findings = list(conformance.cluster_policies(repo, crds))
    findings += schema_findings
    findings += conformance.drivers(repo, compiled, crds, schema_findings)
    findings += conformance.skipped_rules(crds)
    findings += checks.static_overlaps(repo)
    findings += checks.managed_selector_labels(repo)
    findings += checks.no_effect(repo, compiled)
    findings += checks.auto_upgrade_unset(repo)
    findings += operand_checks.rolling_update(repo, compiled)
    findings += promql.metric_queries(repo)
    findings += windows_check.stage_windows(repo, compiled, time.time() if now is None else now)

    factory = client_factory or (live.kube_factory(kubeconfig) if kubeconfig else None)
    contexts = live.missing_contexts(repo, kubeconfig) if kubeconfig else []
    findings += contexts
    if contexts:
        factory = None  # never read or dry-run a cluster through the wrong context
    clients = {c.name: factory(c.context) for c in compiled.clusters.values()} if factory else {}
    nodes: Nodes = (
        live_nodes
        if live_nodes is not None
        else (live.read_nodes(compiled, clients) if clients else {})
    )
    if nodes:
        findings += checks.live_overlaps(repo, nodes)
    findings += _matrix(repo, compiled, nodes, today or datetime.date.today())
    versions = {c: v for c, cl in clients.items() if (v := recipe_live.server_version(cl))}
    ctx = recipe_check.Context(
        repo, compiled, crds[("nvidia.com/v1", "ClusterPolicy")], nodes, versions
    )
    findings += recipe_check.check(ctx, recipes_dir)
    env = {c: images.read_operator_env(cl) for c, cl in clients.items()} if clients else None
    findings += images.operand_images(repo, compiled, env)
    findings += sharing_check.config_files(repo)
    findings += sharing_check.keys(repo, compiled, clients)
    findings += sharing_check.fit(repo, compiled)
    findings += mig_layout_check.config_files(repo)
    if clients:
        findings += live.dry_run(repo, compiled, clients)
        findings += operator_crds.check(repo, compiled, clients, releases, crds)

    plan, base_sha, impact = None, None, None
    if base_rev:
        plan, base, base_sha, base_findings = _against_base(root, base_rev, repo, compiled, nodes)
        findings += base_findings
        if plan is not None:
            inv = live.inventory(compiled, base, nodes, clients) if clients else None
            impact = make_disruption(plan, base, compiled, inv)
    return PreflightResult(
        sort_findings(findings),
        None if conflicts else compiled,
        plan,
        base_sha,
        nodes,
        impact,
        releases,
    )


def tree_finding(exc: TreeError) -> Finding:
    """The finding for a tree the export refuses (GG005; GG001 for sizes and reads)."""
    return Finding.make(
        exc.code, exc.message, file=exc.file, line=exc.line, field=exc.field, fix=exc.fix
    )


def _against_base(
    root: Path, rev: str, repo: FleetRepo, head: CompiledFleet, nodes: Nodes
) -> tuple[Plan | None, CompiledFleet | None, str | None, list[Finding]]:
    try:
        base_repo, base_sha = history.load_revision(root, rev)
    except (RepoLoadError, TreeError) as exc:
        reason = (
            exc.errors[0].message
            if isinstance(exc, RepoLoadError)
            else f"{exc.file}: {exc.args[0].removeprefix(exc.file + ': ')}"
        )
        return (
            None,
            None,
            None,
            [
                Finding.make(
                    "GG040",
                    f"the fleet repo at {rev} does not load ({reason}): no plan, no "
                    "immutability or blast-radius check",
                    fix="compare with a revision that passed preflight",
                )
            ],
        )
    base, base_conflicts = fleet_compile.compile_checked(base_repo, base_sha)
    if base_conflicts:
        return (
            None,
            None,
            base_sha,
            [
                Finding.make(
                    "GG040",
                    f"the fleet repo at {rev} does not compile "
                    "(pools disagree on a cluster-scoped field)",
                    fix="compare with a revision that passed preflight",
                )
            ],
        )
    findings = list(history.immutable_changes(repo, base, head))
    findings += history.blast_radius(repo, base, head)
    findings += removals.removed_pools(repo, base, head, nodes)
    return make_plan(base, head), base, base_sha, findings


def _matrix(
    repo: FleetRepo, compiled: CompiledFleet, nodes: Nodes, today: datetime.date
) -> list[Finding]:
    out: list[Finding] = []
    for cluster in compiled.clusters.values():
        custom_mig = str(
            ((cluster.cluster_policy["spec"].get("migManager") or {}).get("config") or {}).get(
                "name"
            )
            or ""
        )
        if custom_mig in (names.DEFAULT_MIG_CONFIGMAP, mig_layouts.CONFIGMAP_NAME):
            # the operator's own ConfigMap is the default catalogue; ours holds the repo's
            # layouts, checked by mig_layout_check, and a catalogue name missing from it is
            # GG087
            custom_mig = ""
        for name, target in sorted(cluster.pools.items()):
            src = repo.pools[name]
            if cluster.name in nodes:
                matched = [
                    n for n in nodes[cluster.name] if checks.matches(target.node_selector, n)
                ]
                gpus = matrix.live_facts(matched)
            else:
                gpus = (
                    [matrix.facts_for(target.gpu_product, "pool.yaml")]
                    if target.gpu_product
                    else []
                )
            if not gpus:
                doc = src.pool_doc
                out.append(
                    Finding.make(
                        "GG036",
                        f"pool '{name}': no GPU product known (no spec.gpu.product and no "
                        "live GPU node), so driver and MIG compatibility are not checked",
                        file=doc.file,
                        line=doc.where(("spec",))[0],
                        pool=name,
                        cluster=cluster.name,
                        fix="declare spec.gpu.product (a GFD product label) in pool.yaml",
                    )
                )
            issues = matrix.check_driver(
                DriverSettings.from_spec(dict(target.driver["spec"])), gpus, today
            )
            if target.mig_config and target.mig_layout_file is None:
                issues += matrix.check_mig(target.mig_config, gpus, custom_mig)
            out += mig_layout_check.pool_findings(repo, cluster, target, gpus)
            if src.model.spec.gpu.cuda:
                issues += compat.check_cuda(src.model.spec.gpu.cuda, target.driver_version)
            release = compat.operator_version(repo, cluster.name)
            if release:
                issues += compat.check_operator(release, target.driver_version)
            for issue in issues:
                file, line = _anchor(repo, name, issue.anchor)
                out.append(
                    Finding.make(
                        issue.code,
                        f"pool '{name}': {issue.message}",
                        file=file,
                        line=line,
                        fix=issue.fix,
                        pool=name,
                        cluster=cluster.name,
                        field=issue.anchor,
                        source=issue.source,
                    )
                )
    return out


def _anchor(repo: FleetRepo, pool: str, anchor: str) -> tuple[str, int]:
    doc = repo.pools[pool].pool_doc
    if anchor == "migConfig":
        return doc.file, doc.where(("spec", "migConfig"))[0]
    if anchor in ("product", "cuda"):
        return doc.file, doc.where(("spec", "gpu", anchor))[0]
    if anchor == "gpuOperatorVersion":
        return compat.operator_version_where(repo, repo.pools[pool].model.spec.cluster)
    return fleet_compile.locate(repo, pool, ("spec", "driver", anchor))
