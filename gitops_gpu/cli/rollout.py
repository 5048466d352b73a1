"""`gitops-gpu status | approve | pause | resume | rollback`: people steering a rollout.

Approvals and manual rollbacks are written to the promotion record (commit statuses), so the
controller, pull requests and any other tool see the same thing; pause is a flag in the
cluster (ConfigMap gitops-gpu-control) that the controller reads at its next pass.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.cli import options, status_clusters
from gitops_gpu.cli.exits import Exit
from gitops_gpu.components.health import Health
from gitops_gpu.controller import CONTROL_CONFIGMAP, Config, Controller
from gitops_gpu.execute import cluster_error
from gitops_gpu.rollout.status import (
    FAILURE,
    SUCCESS,
    CommitStatus,
    approval_context,
    stage_context,
)
from gitops_gpu.sync.source import default_cache_dir


def _common(p: argparse.ArgumentParser, *, repo: bool = True) -> None:
    if repo:
        options.fleet_source(p, rev=False)
        options.status_record(p)
    options.kubeconfig(p)
    options.namespace(p)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("status", help="per stage: commit, state, gate; per pool: node health")
    _common(s)
    options.output_format(s)
    s.set_defaults(func=_status)
    a = sub.add_parser("approve", help="approve COMMIT for a stage whose gate requires it")
    _common(a)
    a.add_argument("commit", help="the commit (sha or ref) a person approves")
    a.add_argument("--stage", required=True, help="the stage whose gate requires approval")
    a.set_defaults(func=_approve)
    for verb, value in (("pause", "true"), ("resume", "false")):
        p = sub.add_parser(verb, help=f"{verb} every rollout at the next pass (emergency brake)")
        _common(p, repo=False)
        p.set_defaults(func=_pause, value=value)
    r = sub.add_parser("rollback", help="put a stage back on its last good (or a given) commit")
    _common(r)
    r.add_argument("--stage", required=True, help="the stage to put back")
    r.add_argument("--to", help="commit to roll back to (default: the stage's last success)")
    r.add_argument(
        "--cluster",
        help="a fleet of several clusters: the cluster --kubeconfig reaches (run once per "
        "cluster; docs/multi-cluster.md)",
    )
    r.set_defaults(func=_rollback)


def _controller(args: argparse.Namespace) -> Controller:
    client = kube.Client.from_kubeconfig(args.kubeconfig)
    cfg = Config(
        repo=args.repo,
        branch=args.branch,
        namespace=args.namespace,
        cache_dir=getattr(args, "cache_dir", None) or default_cache_dir().parent / "cli",
        status_backend=args.status_backend,
        status_token_file=args.status_token_file,
        cluster=getattr(args, "cluster", None),
    )
    ctl = Controller(cfg, client)
    ctl.source.poll()
    ctl.backend.refresh()
    return ctl


def _resolve(ctl: Controller, rev: str) -> str:
    return ctl.source.resolve(rev)


def _status(args: argparse.Namespace) -> int:
    ctl = _controller(args)
    history = ctl.source.commits(ctl.cfg.history)
    newest = next((ctl.compiled_for(c.sha) for c in history if ctl.compiled_for(c.sha)), None)
    if newest is None:
        print("no commit of the fleet repo passes preflight yet", file=sys.stderr)
        return Exit.FAILED
    if len(newest.clusters) > 1:  # every cluster through its kubeconfig context
        return status_clusters.status(ctl, newest, args.kubeconfig, args.format)
    ctl.start_informers()
    drivers = ctl.engine.reader.managed(*names.NVIDIA_DRIVER_API)
    pools, health = ctl.observer.observe(ctl.engine, drivers, newest, ctl.compiled_for)
    ctl.stop_informers()
    out: list[dict[str, Any]] = []
    for stage in newest.stages:
        commits = {pools[p].commit for p in stage.pools if p in pools}
        commit = commits.pop() if len(commits) == 1 else None
        st = ctl.backend.latest(commit, stage_context(stage.name)) if commit else None
        entry: dict[str, Any] = {
            "stage": stage.name,
            "commit": commit,
            "state": st.state if st else None,
            "description": st.description if st else "",
            "pools": [],
        }
        for pool in stage.pools:
            ph = health.get(pool)
            failing = (
                next((n for n in ph.nodes if n.health is not Health.HEALTHY), None) if ph else None
            )
            entry["pools"].append(
                {
                    "pool": pool,
                    "healthy": ph.count(Health.HEALTHY) if ph else 0,
                    "total": ph.total if ph else 0,
                    "health": str(ph.health) if ph else "Unknown",
                    "firstFailure": f"{failing.node}: {failing.reason}" if failing else None,
                }
            )
        out.append(entry)
    if args.format == "json":
        print(json.dumps({"paused": ctl.paused(), "stages": out}, indent=2))
        return 0
    if ctl.paused():
        print("PAUSED (gitops-gpu resume to continue)")
    for e in out:
        commit = (e["commit"] or "-")[:12]
        print(f"stage {e['stage']:12} {commit:12} {e['state'] or '-':8} {e['description']}")
        for p in e["pools"]:
            line = (
                f"  pool {p['pool']:14} {p['healthy']}/{p['total']} nodes healthy ({p['health']})"
            )
            if p["firstFailure"]:
                line += f"; first failing: {p['firstFailure']}"
            print(line)
    return 0


def _approve(args: argparse.Namespace) -> int:
    ctl = _controller(args)
    sha = _resolve(ctl, args.commit)
    who = getpass.getuser()
    wrote = ctl.backend.set_status(
        CommitStatus(
            sha, approval_context(args.stage), SUCCESS, f"approved by {who}", created_at=time.time()
        )
    )
    print(f"approved {sha[:12]} for stage {args.stage}" + ("" if wrote else " (already approved)"))
    return 0


def _pause(args: argparse.Namespace) -> int:
    client = kube.Client.from_kubeconfig(args.kubeconfig)
    client.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONTROL_CONFIGMAP, "namespace": args.namespace},
            "data": {"paused": args.value},
        },
        field_manager=names.FIELD_MANAGER,
        force=True,
    )
    print(
        "rollouts paused: takes effect at the next pass"
        if args.value == "true"
        else "rollouts resumed"
    )
    return 0


def _rollback(args: argparse.Namespace) -> int:
    """Mark the stage's current commit failed (so it is not re-adopted) and apply the target."""
    ctl = _controller(args)
    history = ctl.source.commits(ctl.cfg.history)
    drivers = ctl.engine.reader.managed(*names.NVIDIA_DRIVER_API)
    newest = next((ctl.compiled_for(c.sha) for c in history if ctl.compiled_for(c.sha)), None)
    if newest is None:
        print("no commit of the fleet repo passes preflight", file=sys.stderr)
        return Exit.FAILED
    problem = cluster_error(list(newest.clusters), ctl.cfg.cluster)
    if problem is not None:  # before any status is written
        raise problem
    stage = newest.stage(args.stage)
    current = {
        (drivers.get(p) or {})
        .get("metadata", {})
        .get("annotations", {})
        .get(names.COMMIT_ANNOTATION)
        for p in stage.pools
    }
    target = (
        _resolve(ctl, args.to)
        if args.to
        else next(
            (
                c.sha
                for c in history
                if (st := ctl.backend.latest(c.sha, stage_context(stage.name)))
                and st.state == SUCCESS
                and c.sha not in current
            ),
            None,
        )
    )
    if target is None:
        print(
            f"stage {stage.name} has no earlier successful commit to roll back to", file=sys.stderr
        )
        return Exit.FAILED
    who = getpass.getuser()
    for sha in sorted(c for c in current if c and c != target):
        ctl.backend.set_status(
            CommitStatus(
                sha,
                stage_context(stage.name),
                FAILURE,
                f"rolled back by {who} to {target[:7]}",
                created_at=time.time(),
            )
        )
    ctl.start_informers()
    written = ctl.apply_stage(stage.name, target, rollback=True)
    ctl.stop_informers()
    print(f"stage {stage.name} rolled back to {target[:12]} ({written} objects/nodes written)")
    return 0
