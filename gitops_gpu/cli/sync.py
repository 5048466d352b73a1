"""`gitops-gpu plan` and `gitops-gpu apply`: a fleet repo commit against the live cluster(s).

Exit codes (cli/exits.py): plan 0 in sync, 3 changes pending; 1 on a refused apply (preflight
error, untrusted commit or conflict), 2 on usage/IO errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gitops_gpu import kube, operations
from gitops_gpu.cli import options, verify_args
from gitops_gpu.cli.exits import Exit
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import loader
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.preflight import crd_source, live, operator_crds, operator_release, run_preflight
from gitops_gpu.preflight.disruption import Disruption, make_disruption
from gitops_gpu.preflight.disruption_text import disruption_json, disruption_text
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.preflight.plan import make_plan
from gitops_gpu.preflight.schema import load_crds
from gitops_gpu.sync import engine, report, source


def _common(p: argparse.ArgumentParser) -> None:
    options.fleet_source(p)
    options.kubeconfig(p, required=True)
    options.selection(p)
    options.output_format(p)
    p.add_argument(
        "--crds",
        type=Path,
        help="GPU Operator CRD directory for preflight (default: the cluster's own CRDs)",
    )
    verify_args.add_arguments(p)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="what would change in the cluster, per pool and field")
    _common(p)
    p.add_argument(
        "--base",
        metavar="REV",
        help="also say what moving from REV to the commit does to nodes and GPU workloads "
        "(the disruption plan, with the cluster's nodes, pods and PDBs)",
    )
    p.add_argument(
        "--no-nvml",
        action="store_true",
        help="skip the NVML drift section (NodeGPUReports vs desired)",
    )
    p.set_defaults(func=_plan)
    a = sub.add_parser("apply", help="preflight, then server-side apply what drifted")
    _common(a)
    a.add_argument("--dry-run", action="store_true", help="plan and preflight only")
    a.add_argument(
        "--force-conflicts", action="store_true", help="take over fields another field manager owns"
    )
    a.add_argument(
        "--no-wait",
        action="store_true",
        help="relabel one batch per pool and return (the controller's mode)",
    )
    a.set_defaults(func=_apply)


def load(args: argparse.Namespace) -> tuple[str, Path, CompiledFleet]:
    """The commit ``--repo``/``--rev`` name, verified if asked, compiled."""
    _src, sha, path, compiled = load_source(args)
    return sha, path, compiled


def load_source(args: argparse.Namespace) -> tuple[source.GitSource, str, Path, CompiledFleet]:
    """``load``, with the fetched source (to read other commits of it)."""
    src, sha, path = source.open_revision(args.repo, args.rev, args.branch, args.cache_dir)
    return (src, sha, path, compile_commit(args, src, sha, path))


def compile_commit(
    args: argparse.Namespace, src: source.GitSource, sha: str, path: Path | None = None
) -> CompiledFleet:
    """Commit ``sha`` of ``src``, verified if asked, compiled."""
    verify_args.require_trusted(args, src.repo.git_dir, sha)
    tree = path if path is not None else src.checkout(src.resolve(sha))
    return fleet_compile.compile_fleet(loader.load_repo(tree), sha)


def _emit(args: argparse.Namespace, plans: list[engine.ClusterPlan], extra: dict[str, Any]) -> None:
    if args.format == "json":
        print(json.dumps({"plans": [report.plan_json(p) for p in plans], **extra}, indent=2))
    else:
        many = len({p.cluster for p in plans}) > 1
        for plan in plans:
            print(_tagged(report.plan_text(plan), plan.cluster, many))


def _tagged(text: str, cluster: str, many: bool) -> str:
    """Several clusters: each line starts with its cluster (grep-able, never mixed up)."""
    return "\n".join(f"[{cluster}] {line}" for line in text.splitlines()) if many else text


def _plan(args: argparse.Namespace) -> int:
    try:
        _sha, path, compiled = load(args)
        engines = operations.plan(compiled, args.kubeconfig, args.pool, args.stage)
    except KeyError as exc:
        print(f"error: unknown pool or stage {exc}", file=sys.stderr)
        return Exit.USAGE
    except verify_args.UntrustedCommitError as exc:
        print(exc, file=sys.stderr)
        return Exit.FAILED
    except KubeError as exc:
        # A dry-run the cluster refuses: stale CRDs are the usual cause, so name them.
        print(f"error: {exc}", file=sys.stderr)
        for f in _stale_crds(args, path, compiled, _clients(args, compiled)):
            print(f.text(), file=sys.stderr)
        return Exit.FAILED
    plans = [p for _e, p in engines]
    nvml = [] if args.no_nvml else operations.nvml_drift(engines, compiled)
    impact = _disruption(args, compiled, engines) if args.base else None
    stale = _stale_crds(args, path, compiled, {p.cluster: e.client for e, p in engines})
    extra: dict[str, Any] = {"nvmlDrift": [d.as_dict() for d in nvml]}
    extra["crds"] = [f.as_dict() for f in stale]
    if impact is not None:
        extra["disruption"] = disruption_json(impact)
    _emit(args, plans, extra)
    if stale and args.format == "text":
        print(f"GPU Operator CRDs ({len(stale)} findings):")
        for f in stale:
            print("  " + f.text().replace("\n", "\n  "))
    if impact is not None and args.format == "text":
        print(disruption_text(impact), end="")
    if nvml and args.format == "text":
        print(f"NVML drift ({len(nvml)} nodes/fields differ from desired):")
        for d in nvml:
            print(f"  {d}")
    # The exit code reflects objects and labels gitops-gpu would change; NVML drift is the
    # GPUs catching up (or failing to) and is reported, not applied.
    return Exit.OK if all(p.in_sync for p in plans) else Exit.PENDING


def _clients(args: argparse.Namespace, compiled: CompiledFleet) -> dict[str, kube.Client]:
    return {
        c.name: kube.Client.from_kubeconfig(args.kubeconfig, context=c.context)
        for c in compiled.clusters.values()
    }


def _stale_crds(
    args: argparse.Namespace,
    path: Path,
    compiled: CompiledFleet,
    clients: Mapping[str, kube.Client],
) -> list[Finding]:
    """The live CRDs against what the commit applies and its gpuOperator release (or
    ``--crds``): fields the cluster would refuse or drop (operator_crds.py)."""
    repo = loader.load_repo(path)
    releases, _problems = operator_release.releases(repo, path)  # check reports those
    reference = load_crds(args.crds) if args.crds else {}
    return list(operator_crds.check(repo, compiled, clients, releases, reference))


def _disruption(
    args: argparse.Namespace,
    head: CompiledFleet,
    engines: list[tuple[engine.Engine, engine.ClusterPlan]],
) -> Disruption:
    """What moving from ``--base`` to the commit does to nodes, with the live inventory."""
    _src, base_sha, base_path = source.open_revision(
        args.repo, args.base, args.branch, args.cache_dir
    )
    base = fleet_compile.compile_fleet(loader.load_repo(base_path), base_sha)
    clients = {p.cluster: e.client for e, p in engines}
    nodes = {c: client.list("v1", "Node").get("items") or [] for c, client in clients.items()}
    inv = live.inventory(head, base, nodes, clients)
    return make_disruption(make_plan(base, head), base, head, inv)


def _apply(args: argparse.Namespace) -> int:
    src, sha, path = source.open_revision(args.repo, args.rev, args.branch, args.cache_dir)
    try:
        verify_args.require_trusted(args, src.repo.git_dir, sha)
    except verify_args.UntrustedCommitError as exc:
        print(exc, file=sys.stderr)
        return Exit.FAILED
    with tempfile.TemporaryDirectory(prefix="gitops-gpu-crds-") as cache:
        crds = crd_source.resolve(args.crds, args.kubeconfig, Path(cache))  # else exit 2
        result = run_preflight(path, commit=sha, crds_dir=crds)
    errors = [f for f in result.findings if f.severity == "error"]
    if errors or result.compiled is None:
        for finding in errors:
            print(finding.text(), file=sys.stderr)
        print(f"refused: commit {sha[:12]} fails preflight; nothing was applied", file=sys.stderr)
        return Exit.FAILED
    try:
        plans = operations.plan(result.compiled, args.kubeconfig, args.pool, args.stage)
    except KeyError as exc:
        print(f"error: unknown pool or stage {exc}", file=sys.stderr)
        return Exit.USAGE
    _emit(args, [p for _e, p in plans], {})
    if args.dry_run:
        return 0
    try:
        done = operations.apply(
            plans,
            result.compiled,
            force_conflicts=args.force_conflicts,
            all_batches=not args.no_wait,
        )
    except operations.RefusedError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return Exit.FAILED
    many = len({p.cluster for p, _res in done}) > 1
    for plan, res in done:
        print(_tagged(report.apply_text(plan.cluster, res), plan.cluster, many))
    return Exit.FAILED if any(res.conflicts for _p, res in done) else Exit.OK
