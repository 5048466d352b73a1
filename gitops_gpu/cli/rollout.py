"""`gitops-gpu status | approve | accept-history | pause | resume | rollback`: people steering
a rollout.

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
from pathlib import Path

from gitops_gpu import kube, operations
from gitops_gpu.cli import options, status_clusters
from gitops_gpu.cli.exits import Exit
from gitops_gpu.controller import Controller
from gitops_gpu.rollout import line, seal
from gitops_gpu.rollout.phases import format_duration


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
    a.add_argument(
        "--key",
        type=Path,
        help="seal the approval with this ed25519 key (an approver's, listed in the stage's "
        "approvers.keys; git notes); default: the controller's key",
    )
    a.set_defaults(func=_approve)
    h = sub.add_parser(
        "accept-history",
        help="follow a branch head that does not descend from the last one (after a force-push)",
    )
    _common(h)
    h.add_argument("commit", help="the branch's new head, as the controller's hold names it")
    h.set_defaults(func=_accept_history)
    for verb, value in (("pause", "true"), ("resume", "false")):
        p = sub.add_parser(
            verb, help=f"{verb} every stage at the next pass (stop the line: docs/rollout.md)"
        )
        _common(p, repo=False)
        if verb == "pause":
            p.add_argument("--reason", default="", help="why, shown wherever the stop shows")
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


def _connect(args: argparse.Namespace) -> Controller:
    cfg = options.controller_config(args, "cli")
    return operations.connect(cfg, kube.Client.from_kubeconfig(args.kubeconfig))


def _status(args: argparse.Namespace) -> int:
    try:
        report = operations.status(_connect(args), args.kubeconfig)
    except operations.NothingToActOnError as exc:
        print(exc, file=sys.stderr)
        return Exit.FAILED
    if args.format == "json":
        print(json.dumps(report.as_json(), indent=2))
        return Exit.OK
    if report.stop is not None:
        print(f"PAUSED: {report.stop.describe()} (gitops-gpu resume to continue)")
    if report.held:
        print(f"HELD: {report.held} (gitops-gpu accept-history to follow it)")
    for item in report.ignored:
        who = f" posted by {item['creator']}" if item["creator"] else ""
        print(
            f"ignored: {item['context']} {item['state']} on {item['commit'][:12]}{who}: "
            f"{item['reason']}"
        )
    if report.many_clusters:
        status_clusters.render(report.stages)
        return Exit.OK
    for e in report.stages:
        commit = (e["commit"] or "-")[:12]
        print(f"stage {e['stage']:12} {commit:12} {e['state'] or '-':8} {e['description']}")
        if e["hold"]:
            print(f"  hold: {e['hold']}")
        if e.get("soakLeft") is not None:
            print(f"  soak: {format_duration(e['soakLeft'])} left")
        if e.get("lastEvent"):
            print(f"  last: {e['lastEvent']}")
        for p in e["pools"]:
            line = (
                f"  pool {p['pool']:14} {p['healthy']}/{p['total']} nodes healthy ({p['health']})"
            )
            if p.get("unavailable"):
                line += f", {p['unavailable']} unavailable (skipped)"
            if p["firstFailure"]:
                line += f"; first failing: {p['firstFailure']}"
            print(line)
            for wait in p["waiting"]:
                print(f"    held: {wait['text']}")
    return Exit.OK


def _approve(args: argparse.Namespace) -> int:
    ctl = _connect(args)
    key = seal.load_private_file(args.key, getpass.getuser()) if args.key else None
    sha, wrote = operations.approve(
        ctl, args.commit, args.stage, getpass.getuser(), time.time(), key=key
    )
    print(f"approved {sha[:12]} for stage {args.stage}" + ("" if wrote else " (already approved)"))
    return Exit.OK


def _accept_history(args: argparse.Namespace) -> int:
    ctl = _connect(args)
    try:
        sha, previous = operations.accept_history(ctl, args.commit, getpass.getuser(), time.time())
    except operations.NothingToActOnError as exc:
        print(exc, file=sys.stderr)
        return Exit.FAILED
    print(f"accepted {sha[:12]} as the head to follow (was {previous[:12] or 'none'})")
    return Exit.OK


def _pause(args: argparse.Namespace) -> int:
    client = kube.Client.from_kubeconfig(args.kubeconfig)
    if args.value == "true":
        stop = line.LineStop(getpass.getuser(), time.time(), args.reason)
        operations.set_paused(client, args.namespace, stop)
        print(f"{stop.describe()}: every stage holds from the next pass")
    else:
        operations.set_paused(client, args.namespace, None)
        print("line running: stages move again from the next pass")
    return Exit.OK


def _rollback(args: argparse.Namespace) -> int:
    """Mark the stage's current commit failed (so it is not re-adopted) and apply the target."""
    ctl = _connect(args)
    try:
        target, written = operations.rollback(
            ctl, args.stage, args.to, getpass.getuser(), time.time()
        )
    except operations.NothingToActOnError as exc:
        print(exc, file=sys.stderr)
        return Exit.FAILED
    print(f"stage {args.stage} rolled back to {target[:12]} ({written} objects/nodes written)")
    return Exit.OK
