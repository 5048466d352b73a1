"""`gitops-gpu operator apply`: a cluster's gpuOperator release, CRDs first (sync/release.py).

The commit is verified if asked and preflighted with the cluster's own objects, as ``apply``
does: any error refuses it and nothing is applied, but for the stale-CRD findings this command
is here to resolve (GG094, GG095, and the dry-run refusals of the objects GG094 names)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from gitops_gpu import kube
from gitops_gpu.cli import options, verify_args
from gitops_gpu.cli.exits import Exit
from gitops_gpu.fleet.models import ClusterRef
from gitops_gpu.preflight import crd_source, run_preflight
from gitops_gpu.sync import release, source

RESOLVED_HERE = ("GG094", "GG095")  # the CRDs are older than the release: applying fixes it


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "operator", help="the cluster's GPU Operator release (gpuOperator): operator apply"
    )
    verbs = p.add_subparsers(dest="operator_command", required=True)
    a = verbs.add_parser(
        "apply",
        help="preflight, then apply the release: its CRDs (waited on until Established), "
        "then the operator, then wait for it to roll out",
    )
    options.fleet_source(a)
    options.kubeconfig(a, required=True)
    options.output_format(a)
    a.add_argument("--cluster", help="the fleet.yaml cluster (needed when several name a release)")
    a.add_argument("--crds", type=Path, help="GPU Operator CRD directory for preflight")
    a.add_argument(
        "--timeout",
        type=options.duration,
        default=300.0,
        help="how long the CRDs and the operator may take, each (default 5m)",
    )
    verify_args.add_arguments(a)
    a.set_defaults(func=_apply)


def _pick(refs: list[ClusterRef], name: str | None) -> ClusterRef | str:
    with_release = [r for r in refs if r.gpu_operator is not None]
    if name is not None:
        found = next((r for r in with_release if r.name == name), None)
        return found or f"cluster '{name}' names no gpuOperator release in fleet.yaml"
    if len(with_release) == 1:
        return with_release[0]
    if not with_release:
        return "no cluster in fleet.yaml names a gpuOperator release (docs/operator-upgrades.md)"
    return "several clusters name a release: pass --cluster"


def _apply(args: argparse.Namespace) -> int:
    src, sha, path = source.open_revision(args.repo, args.rev, args.branch, args.cache_dir)
    try:
        verify_args.require_trusted(args, src.repo.git_dir, sha)
    except verify_args.UntrustedCommitError as exc:
        print(exc, file=sys.stderr)
        return Exit.FAILED
    with tempfile.TemporaryDirectory(prefix="gitops-gpu-crds-") as cache:
        crds = crd_source.resolve(args.crds, args.kubeconfig, Path(cache))
        result = run_preflight(path, commit=sha, crds_dir=crds, kubeconfig=args.kubeconfig)
    # The objects the stale CRDs refuse (GG012 where GG094 names the pool) are this fix's too.
    stale = {(f.cluster, f.pool) for f in result.findings if f.code == "GG094"}
    errors = [
        f
        for f in result.findings
        if f.severity == "error"
        and f.code not in RESOLVED_HERE
        and not (f.code == "GG012" and (f.cluster, f.pool) in stale)
    ]
    if errors or result.compiled is None:
        for finding in errors:
            print(finding.text(), file=sys.stderr)
        print(f"refused: commit {sha[:12]} fails preflight; nothing was applied", file=sys.stderr)
        return Exit.FAILED
    from gitops_gpu.fleet.loader import load_repo  # noqa: PLC0415 - the refs, after preflight

    picked = _pick(load_repo(path).fleet.cluster_refs(), args.cluster)
    if isinstance(picked, str):
        print(f"error: {picked}", file=sys.stderr)
        return Exit.USAGE
    rel = result.releases[picked.name]
    client = kube.Client.from_kubeconfig(args.kubeconfig, context=picked.context)
    done = release.apply_release(
        client, rel.crds, rel.objects, picked.operator_namespace, timeout=args.timeout
    )
    if args.format == "json":
        body = {
            "commit": sha,
            "cluster": picked.name,
            "release": rel.version,
            "ok": done.ok,
            "message": done.message,
            "steps": [s.__dict__ for s in done.steps],
        }
        print(json.dumps(body, indent=2))
    else:
        for step in done.steps:
            print(step.text())
        print(f"{picked.name}: release {rel.version}: {done.message}")
    return Exit.OK if done.ok else Exit.FAILED
