"""`gitops-gpu check` (preflight) and `gitops-gpu compile` (write the compiled objects).

check exit codes: 0 no error-level finding, 1 error findings, 2 usage/IO error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from gitops_gpu.cli import limits_args, options, verify_args
from gitops_gpu.cli.exits import Exit
from gitops_gpu.errors import FleetError, GitopsGpuError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import export, scratch
from gitops_gpu.fleet.loader import RepoLoadError, load_repo
from gitops_gpu.fleet.render import render_fleet
from gitops_gpu.preflight import crd_source, history, operator_release
from gitops_gpu.preflight.disruption_text import disruption_json, disruption_text
from gitops_gpu.preflight.disruption_text import summary as disruption_summary
from gitops_gpu.preflight.findings import Finding, render_json, render_text, summary
from gitops_gpu.preflight.plan import plan_json, plan_text
from gitops_gpu.preflight.run import PreflightResult, run_preflight
from gitops_gpu.rollout import pr_comment
from gitops_gpu.rollout.status import FAILURE, PREFLIGHT_CONTEXT, SUCCESS, CommitStatus

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser(
        "check",
        help="preflight a fleet repo: shape, CRD schema, compile rules, "
        "version matrix, plan against --base",
    )
    c.add_argument("path", nargs="?", default=".", type=Path, help="fleet repo (default: .)")
    c.add_argument(
        "--base",
        metavar="REV",
        help="compare with this git revision: immutable "
        "fields, blast radius, and a plan of what changes",
    )
    c.add_argument("--kubeconfig", help="also read live nodes and server-side dry-run the objects")
    c.add_argument(
        "--crds",
        type=Path,
        help="GPU Operator CRD directory (default: the cluster's, with --kubeconfig; else "
        "$GITOPS_GPU_CRDS)",
    )
    c.add_argument("--commit", help="commit stamped on compiled objects (default: git HEAD)")
    c.add_argument(
        "--recipes",
        type=Path,
        metavar="DIR",
        help="an AICR recipes/ directory (e.g. a checkout of NVIDIA/aicr): compare pools that "
        "name a recipe (pool.yaml spec.recipe) with it",
    )
    options.output_format(c)
    c.add_argument(
        "--post-status",
        action="store_true",
        help="write the gitops-gpu/preflight commit status on the checked commit",
    )
    c.add_argument(
        "--post-comment",
        type=int,
        metavar="PR",
        help="keep one comment on pull request PR (the status backend's forge) with the "
        "verdict, the plan and what it does to nodes; edited in place on every run",
    )
    options.status_record(c)
    verify_args.add_arguments(c)
    limits_args.add_arguments(c)
    c.set_defaults(func=check)

    p = sub.add_parser("compile", help="write the compiled objects as YAML, one file per object")
    p.add_argument("path", nargs="?", default=".", type=Path, help="fleet repo (default: .)")
    p.add_argument("--out", required=True, type=Path, help="output directory (DIR/<cluster>/...)")
    p.add_argument("--commit", help="commit stamped on the objects (default: git HEAD)")
    p.set_defaults(func=compile_cmd)


def check(args: argparse.Namespace) -> int:
    try:
        untrusted = verify_args.check_commit(args)  # before reading anything of the commit
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.USAGE
    if untrusted is not None:
        return untrusted
    limits_args.apply(args)
    try:
        with tempfile.TemporaryDirectory(prefix="gitops-gpu-crds-") as cache:
            result = run_preflight(
                args.path,
                commit=args.commit,
                base_rev=args.base,
                crds_dir=crd_source.resolve(args.crds, args.kubeconfig, Path(cache)),
                kubeconfig=args.kubeconfig,
                recipes_dir=args.recipes,
            )
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except Exception as exc:  # whatever a commit holds, no traceback: it fails, said in a line
        log.debug("preflight raised", exc_info=True)
        print(
            f"error: checking {args.path} failed with {type(exc).__name__}: {exc} "
            "(the commit fails preflight; please report this as a gitops-gpu bug)",
            file=sys.stderr,
        )
        return Exit.FAILED
    if args.format == "json":
        extra = {
            "commit": result.compiled.commit if result.compiled else None,
            "base": result.base_commit,
            "plan": plan_json(result.plan) if result.plan else None,
            "disruption": disruption_json(result.disruption) if result.disruption else None,
        }
        sys.stdout.write(render_json(result.findings, extra))
    else:
        sys.stdout.write(render_text(result.findings))
        if result.plan is not None:
            sys.stdout.write("\n" + plan_text(result.plan))
        if result.disruption is not None:
            sys.stdout.write("\n" + disruption_text(result.disruption))
    if args.post_status:
        try:
            post_preflight_status(args, result)
        except GitopsGpuError as exc:
            print(f"error: could not post the preflight status: {exc}", file=sys.stderr)
            return Exit.USAGE
    if args.post_comment is not None:
        try:
            post_comment(args, result)
        except GitopsGpuError as exc:
            print(f"error: could not post the pull-request comment: {exc}", file=sys.stderr)
            return Exit.USAGE
    return Exit.OK if result.ok else Exit.FAILED


def status_description(result: PreflightResult) -> str:
    """One line for the pull request: the verdict, then what the plan changes."""
    counts = summary(result.findings)
    errors, warnings = counts.get("error", 0), counts.get("warning", 0)
    first = next((f for f in result.findings if f.severity == "error"), None)
    worst = next((f for f in result.findings if f.severity == "warning"), None)
    head = (
        f"{errors} errors: {first.code} {first.message}"
        if first
        else f"clean ({warnings} warnings"
        + (f"; worst {worst.code} {worst.message})" if worst else ")")
    )
    if result.plan is not None and first is None:
        pools = sorted({p.pool for s in result.plan.stages for p in s.pools})
        cluster = any(s.cluster_changes for s in result.plan.stages)
        # What it does to nodes comes first: a status description is cut at 140 characters.
        said = [disruption_summary(result.disruption)] if result.disruption else []
        if result.plan.empty:
            said.append("no change to any cluster")
        else:
            names_ = f" ({', '.join(pools)})" if pools else ""
            said.append(
                f"changes {len(pools)} pools" + (" + cluster-wide" if cluster else "") + names_
            )
        verdict = f"clean ({warnings} warnings)"
        tail = f"; worst {worst.code} {worst.message}" if worst else ""
        return "; ".join([verdict, *said]) + tail
    return head


def comment_body(result: PreflightResult, head: str, limit: int) -> str:
    """The pull request's comment: verdict and what it does to nodes first, details folded."""
    ok = result.ok
    counts = summary(result.findings)
    verdict = ("preflight passed" if ok else "preflight FAILED") + (
        f" ({counts.get('error', 0)} errors, {counts.get('warning', 0)} warnings)"
    )
    lines = [status_description(result)]
    if result.disruption is not None:
        lines.insert(0, f"**{disruption_summary(result.disruption)}**")
    details = [(f"Findings ({len(result.findings)})", render_text(result.findings))]
    if result.plan is not None:
        details.append((pr_comment.PLAN_TITLE, plan_text(result.plan)))
    if result.disruption is not None:
        details.append((pr_comment.DISRUPTION_TITLE, disruption_text(result.disruption)))
    return pr_comment.render(head, verdict, lines, details, limit)


def post_comment(args: argparse.Namespace, result: PreflightResult) -> None:
    # the forge clients (HTTP, TLS) cost 20 ms of start-up a plain `check` never uses
    from gitops_gpu.rollout.backends import make_backend  # noqa: PLC0415
    from gitops_gpu.rollout.forge import ForgeBackend  # noqa: PLC0415

    backend = make_backend(args.status_backend, str(args.path), token_file=args.status_token_file)
    if not isinstance(backend, ForgeBackend):
        raise GitopsGpuError(
            f"--post-comment needs a forge status backend, not {backend.name}",
            fix="pass --status-backend github:..., gitea:... or gitlab:...",
        )
    head = args.commit or history.head_commit(args.path) or "working tree"
    limit = pr_comment.LIMITS.get(backend.name, pr_comment.LIMITS["github"])
    done = backend.upsert_comment(args.post_comment, comment_body(result, head, limit))
    print(f"pull request {args.post_comment}: comment {done}", file=sys.stderr)


def post_preflight_status(args: argparse.Namespace, result: PreflightResult) -> None:
    sha = args.commit or history.head_commit(args.path)
    if not sha or sha.endswith("-dirty"):
        raise GitopsGpuError(
            f"{args.path}: no clean git commit to post a status on",
            fix="commit your changes, or pass --commit SHA",
        )
    from gitops_gpu.rollout.backends import make_backend  # noqa: PLC0415 - see post_comment

    backend = make_backend(args.status_backend, str(args.path), token_file=args.status_token_file)
    state = SUCCESS if result.ok else FAILURE
    wrote = backend.set_status(
        CommitStatus(
            sha, PREFLIGHT_CONTEXT, state, status_description(result), created_at=time.time()
        )
    )
    print(
        f"{PREFLIGHT_CONTEXT}: {state} on {sha[:12]}" + ("" if wrote else " (unchanged)"),
        file=sys.stderr,
    )


def compile_cmd(args: argparse.Namespace) -> int:
    root: Path = args.path
    if not root.is_dir():
        print(f"error: {root} is not a directory", file=sys.stderr)
        return Exit.USAGE
    try:
        # The same tree check and the controller judge (fleet/export.py), not the raw checkout.
        with scratch.scratch_dir("gitops-gpu-tree-") as tmp:
            tree = export.export_tree(root, Path(tmp)).root
            repo = load_repo(tree)
            releases, problems = operator_release.releases(repo, tree)
        commit = args.commit or history.head_commit(root) or "working-tree"
        compiled = fleet_compile.compile_fleet(repo, commit)
    except RepoLoadError as exc:
        for e in exc.errors:
            sys.stderr.write(
                Finding.make(e.code, e.message, file=e.file, line=e.line, fix=e.fix).text() + "\n"
            )
        return Exit.FAILED
    except FleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.FAILED
    unrendered = [f for f in problems if f.code in ("GG088", "GG091")]
    if unrendered:  # the review would miss the operator: nothing is written
        for f in unrendered:
            sys.stderr.write(f.text() + "\n")
        return Exit.FAILED
    files = render_fleet(compiled)
    for cname, release in sorted(releases.items()):
        files.update(
            {
                f"{cname}/{rel}": text
                for rel, text in operator_release.render_release(release).items()
            }
        )
    out: Path = args.out
    written = []
    made: set[Path] = set()
    for rel, text in files.items():
        target = out / rel
        if target.parent not in made:  # one mkdir per directory, not per file (4,000 files)
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_bytes(text.encode("utf-8"))
        written.append(rel)
    print(json.dumps({"commit": commit, "out": str(out), "files": written}, indent=2))
    return Exit.OK
