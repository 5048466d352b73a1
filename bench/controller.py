"""Benchmark `gitops-gpu controller` at fleet scale, and Flux beside it, measured from outside.

    python bench/controller.py [--pools 125] [--nodes-per-pool 40] [--interval 5]
                               [--operator auto|real|sim] [--no-peer] [--ui]
                               [--profile SECONDS [--py-spy PATH]]

Both run as their own processes, each as its own ServiceAccount, on one testbed with the same
KWOK nodes, fetching the same fleet remote over smart HTTP (`git http-backend`) at the same
interval. CPU and RSS come from /proc/<pid>; API requests from the apiserver's audit log, per
identity. Nothing else runs in a timed window but the testbed, the host simulator and the
bench's pollers (which use the admin identity, not counted).

Prints every figure with its target and exits 1 when one misses or a peer cannot be built or
run: a figure is printed only when it was measured in this run.

``--operator auto`` (the default) runs the real GPU Operator up to REAL_MAX_NODES nodes and
the simulator above; see SIM_REASON.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fluxpeer
import idle_profile
import outside
from fleetbench import Bench, bench_env, git, write_fleet

from gitops_gpu import kube, names
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.render import render_fleet
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev.testbed import controlplane, flux_build, reports
from gitops_gpu_dev.testbed.githttp import GitHTTP
from gitops_gpu_dev.testbed.operator import NAMESPACE as OPERATOR_NAMESPACE

# The real GPU Operator is the default; above this many nodes the simulator plays it. Measured
# with --operator real (docs/benchmarks.md): ~OPERAND_PODS_PER_NODE operand pods a node,
# each scheduled by kube-scheduler and run by kwok, on the same 2 shared cores as the apiserver.
REAL_MAX_NODES = 400
SIM_REASON = (
    f"above {REAL_MAX_NODES} nodes the real GPU Operator's operand pods (measured: ~7 a node) "
    "are more than kube-scheduler, kwok and one apiserver run on 2 shared cores; pass "
    "--operator real to try"
)
CTL_USER = outside.user(outside.BENCH_NS, "gitops-gpu")
FLUX_USERS = {
    "source-controller": outside.user(fluxpeer.NAMESPACE, "source-controller"),
    "kustomize-controller": outside.user(fluxpeer.NAMESPACE, "kustomize-controller"),
}
DRIVERS = ("580.126.20", "580.142.01", "580.159.03")


@dataclass
class Report:
    """The figures of one run, printed as measured; ``--json`` writes them for
    bench/side_by_side.py, each under a stable ``key``."""

    rows: list[dict[str, object]] = field(default_factory=list)
    data: dict[str, str] = field(default_factory=dict)  # what a run printed beside its figures

    def figure(
        self, what: str, value: str, target: str = "", ok: bool = True, key: str = ""
    ) -> None:
        self.rows.append({"key": key, "what": what, "value": value, "target": target, "ok": ok})
        mark = "" if not target else ("  ok" if ok else "  MISSED")
        print(f"{what:58} {value:>24}  {target}{mark}", flush=True)

    @property
    def missed(self) -> list[str]:
        return [str(r["what"]) for r in self.rows if not r["ok"]]

    def dump(self, path: Path, args: argparse.Namespace, commit: str, *, finished: bool) -> None:
        doc = {
            "commit": commit,
            "args": vars(args),
            "finished": finished,
            "rows": self.rows,
            "data": self.data,
            "missed": self.missed,
        }
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pools", type=int, default=125)
    ap.add_argument("--nodes-per-pool", type=int, default=40)
    ap.add_argument("--interval", type=float, default=5.0)
    # One heartbeat period of the simulated agents: each idle window holds every NodeGPUReport's
    # heartbeat once (a 60 s window held all of them or none, by the phase it fell on).
    ap.add_argument("--idle-seconds", type=float, default=reports.HEARTBEAT_SECONDS)
    ap.add_argument("--operator", choices=("auto", "real", "sim"), default="auto")
    ap.add_argument("--no-peer", action="store_true", help="measure gitops-gpu only")
    ap.add_argument(
        "--ui", action="store_true", help="run the controller with --ui and measure the web view"
    )
    ap.add_argument(
        "--profile",
        type=float,
        default=0,
        metavar="SECONDS",
        help="after the idle figures, sample the idle controller with py-spy this long",
    )
    ap.add_argument("--py-spy", help="py-spy binary (default: on PATH)")
    ap.add_argument(
        "--heap",
        action="store_true",
        help="trace the controller's heap (PYTHONTRACEMALLOC) and print where it goes after the"
        " idle window; tracing inflates RSS and CPU, so their targets are not judged",
    )
    ap.add_argument("--json", type=Path, help="also write the figures here (bench/side_by_side.py)")
    args = ap.parse_args()
    if args.profile and not idle_profile.py_spy(args.py_spy):
        print("--profile needs py-spy: pip install py-spy, or pass --py-spy", file=sys.stderr)
        return 2
    # `timeout` and CI send SIGTERM: unwind, so the testbed and the controllers are stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.operator == "auto":
        small = args.pools * args.nodes_per_pool <= REAL_MAX_NODES
        args.operator = "real" if small else "sim"
        if not small:
            print(f"GPU Operator: simulated ({SIM_REASON})")
    binaries = None
    if not args.no_peer:
        try:
            binaries = flux_build.ensure_flux()
        except GitopsGpuError as exc:
            print(f"peer: Flux {flux_build.FLUX_VERSION} cannot be built: {exc}", file=sys.stderr)
            return 1
    users = [CTL_USER, *FLUX_USERS.values()]
    report = Report()
    commit = measured_commit()
    print(f"measuring gitops-gpu at {commit}", flush=True)
    rc: int | None = None
    try:
        rc = measure(args, binaries, users, report)
        return rc
    finally:
        if args.json is not None:  # also when it raised: "finished" says which
            report.dump(args.json, args, commit, finished=rc is not None)


def measure(
    args: argparse.Namespace,
    binaries: dict[str, Path] | None,
    users: list[str],
    report: Report,
) -> int:
    with bench_env(
        args.pools, args.nodes_per_pool, args.operator, audit=outside.audit_args, users=users
    ) as bench:
        sim = subprocess.Popen(
            controlplane.simulator_argv(
                bench.root / "testbed", 1, plays_operator=args.operator == "sim"
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = GitHTTP(bench.bare.parent)
        git(bench.bare, "config", "http.receivepack", "true")
        try:
            audit = outside.AuditLog(bench.root / "audit.log")
            ours(bench, args, server, audit, report)
            if binaries is not None:
                peer(bench, args, server, audit, report, binaries)
        finally:
            server.stop()
            sim.terminate()
            sim.wait(30)
    if report.missed:
        print(f"MISSED: {', '.join(report.missed)}")
        return 1
    return 0


def measured_commit() -> str:
    """This checkout's HEAD, and whether the tree differs from it (figures name their code)."""
    project = Path(__file__).resolve().parents[1]
    head = git(project, "rev-parse", "--short=12", "HEAD")
    dirty = git(project, "status", "--porcelain", "--untracked-files=no")
    return head + (" with uncommitted changes" if dirty else "")


def wait_for(what: str, check: Callable[[], bool], timeout: float, step: float = 0.05) -> float:
    """Seconds until ``check()``; raises when ``timeout`` passes first."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(step)
    return time.monotonic() - start


def per_interval(reqs: collections.Counter[str], seconds: float, interval: float) -> float:
    return sum(reqs.values()) / (seconds / interval)


def fmt(reqs: collections.Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(reqs.items()))


# --- gitops-gpu ---------------------------------------------------------------------------------


def ours(
    b: Bench, args: argparse.Namespace, server: GitHTTP, audit: outside.AuditLog, report: Report
) -> None:
    client = b.tb.client
    kubeconfig = outside.identity_kubeconfig(
        client, b.tb.state.kubeconfig, outside.BENCH_NS, "gitops-gpu"
    )
    sha = git(b.work, "rev-parse", "HEAD")
    watcher = b.root / "watcher"
    subprocess.run(["git", "clone", "-q", str(b.bare), str(watcher)], check=True)
    notes = GitNotesBackend(watcher)
    port = controlplane.free_port()
    log = (b.root / "controller.log").open("wb")
    argv = [
        sys.executable, "-m", "gitops_gpu", "controller",
        "--repo", server.url(b.bare.name),
        "--kubeconfig", str(kubeconfig),
        "--interval", f"{args.interval}s",
        "--metrics-addr", f"127.0.0.1:{port}",
        "--webhook-insecure",
        "--cache-dir", str(b.root / "ctl"),
    ] + (["--ui"] if args.ui else [])  # fmt: skip
    env = {**os.environ, "PYTHONTRACEMALLOC": "1"} if args.heap else None
    started = time.time()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        stages = ["canary", "fleet"]
        marks = rollout_marks(client, notes, sha, stages, args.pools, started, 1800)
        total = marks["fleet success"]
        report.figure(
            f"gitops-gpu first rollout ({args.pools} pools, both stages success)",
            f"{total:.1f}s",
            key="ours.rollout",
        )
        report.figure(
            "  where it went",
            ", ".join(f"{k} at {v:.1f}s" for k, v in marks.items()),
            key="ours.rollout_marks",
        )
        nodes = args.pools * args.nodes_per_pool
        if args.operator == "real":
            pods = client.list("v1", "Pod", namespace=OPERATOR_NAMESPACE)["items"]
            on_nodes = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
            report.figure(
                "  real GPU Operator: operand pods per node",
                f"{on_nodes / nodes:.1f} ({on_nodes})",
                key="operator.pods_per_node",
            )
        writes = audit.count({CTL_USER}, started, started + total)
        patches = writes.get("patch nodes", 0)
        report.figure("  controller requests during it", f"{sum(writes.values())}")
        most = collections.Counter(dict(writes.most_common(6)))
        print(f"    most: {fmt(most)}")
        report.figure(
            "  node PATCHes during it (every node needs one)",
            str(patches),
            f"= {nodes}",
            patches == nodes,
            key="ours.node_patches",
        )
        time.sleep(2 * args.interval)  # the statuses' own pass, then quiet
        t0 = time.time()
        idle = outside.idle([proc.pid], args.idle_seconds)
        reqs = audit.count({CTL_USER}, t0, t0 + idle.seconds)
        traced = " (heap traced: not judged)" if args.heap else ""
        report.figure(
            "gitops-gpu idle RSS" + traced,
            f"{idle.rss_mib:.0f} MiB",
            "< 150 MiB",
            args.heap or idle.rss_mib < 150,
            "ours.rss",
        )
        report.figure(
            f"gitops-gpu idle CPU at {args.interval:.0f}s polls (git children in)" + traced,
            f"{idle.cpu_pct:.2f}% of a core",
            "< 1%",
            args.heap or idle.cpu_pct < 1,
            key="ours.cpu",
        )
        split = ", ".join(f"{k} {v:.2f}%" for k, v in idle.threads.items() if v >= 0.005)
        report.data["ours.threads"] = split or "none measurable"
        print(f"    by thread: {split or 'none measurable'}")
        per = per_interval(reqs, idle.seconds, args.interval)
        report.figure(
            f"gitops-gpu API requests per idle {args.interval:.0f}s",
            f"{per:.2f}",
            "<= 1.5",
            per <= 1.5,
            key="ours.requests",
        )
        print(f"    in {idle.seconds:.0f}s: {fmt(reqs)}")
        report.data["ours.requests_seen"] = f"in {idle.seconds:.0f} s: {fmt(reqs)}"
        lists = node_lists_after_start(audit, CTL_USER, started)
        report.figure(
            "gitops-gpu node LISTs after start", str(lists), "0", lists == 0, "ours.node_lists"
        )
        if args.ui:
            import ui_view  # noqa: PLC0415 - playwright only with --ui

            ui_view.measure(
                f"http://127.0.0.1:{port}",
                ["/ui/", "/ui/stage/canary", "/ui/stage/fleet"],
                proc.pid,
                args.idle_seconds,
                audit,
                CTL_USER,
                report.figure,
            )
        if args.profile:
            spy = idle_profile.py_spy(args.py_spy)
            assert spy is not None
            raw = idle_profile.record(spy, proc.pid, args.profile, b.root / "idle-profile.txt")
            print(f"idle profile, {args.profile:.0f}s (py-spy, not in any measured window):")
            for line in idle_profile.summarize(raw):
                print(f"  {line}")
        if args.heap:
            print("idle heap census (tracemalloc, by allocation site):")
            for line in heap_census(proc, b.root / "controller.log"):
                print(f"  {line}")
        polls = server.polls.copy()
        time.sleep(args.interval * 4)
        report.figure(
            "gitops-gpu ref advertisements per poll",
            f"{(server.polls['git'] - polls['git']) / 4:.1f}",
        )
        # Commit -> canary objects applied: through the webhook.
        write_fleet(b.work, args.pools, driver=DRIVERS[1])
        new = b.commit("bump driver")
        canary = sorted(compile_fleet(load_repo(b.work), new).stage("canary").pools)[0]
        t = time.monotonic()
        urllib.request.urlopen(
            urllib.request.Request(f"http://127.0.0.1:{port}/webhook", data=b"{}", method="POST"),
            timeout=10,
        ).read()
        wait_for("canary applied", lambda: carries(client, canary, new), 120)
        took = time.monotonic() - t
        report.figure(
            "gitops-gpu commit -> canary applied (webhook)",
            f"{took:.2f}s",
            "< 1s",
            took < 1,
            "ours.webhook",
        )
        # (The bump's own rollout is not waited for: the next commit supersedes it.)
        # Commit -> canary applied by polling alone (no webhook).
        write_fleet(b.work, args.pools, driver=DRIVERS[2])
        polled = b.commit("bump driver again")
        took = wait_for("canary applied", lambda: carries(client, canary, polled), 120)
        report.figure(
            "gitops-gpu commit -> canary applied (polling)",
            f"{took:.2f}s",
            f"<= {args.interval + 2:.0f}s",
            took <= args.interval + 2,
            key="ours.polling",
        )
        if not args.no_peer:  # the peer is measured on a quiet fleet: this rollout done
            rollout_marks(client, notes, polled, stages, args.pools, time.time(), 1800)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def heap_census(proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> list[str]:
    """SIGUSR2 to the traced controller, then its census lines from the log."""
    seen = log.read_bytes().count(b"heap census:")
    proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if text.count("heap census:") > seen:
            tail = text.rsplit("heap census:", 1)[1].splitlines()[1:]
            lines = [t for t in tail if " MiB " in t]
            if len(lines) >= 2:
                return lines[:31]
        time.sleep(1)
    return ["no census in the log within the deadline"]


def carries(client: kube.Client, pool: str, sha: str) -> bool:
    drv = client.get(*names.NVIDIA_DRIVER_API, pool) or {}
    return bool(
        (drv.get("metadata") or {}).get("annotations", {}).get(names.COMMIT_ANNOTATION) == sha
    )


def rollout_marks(
    client: kube.Client,
    notes: GitNotesBackend,
    sha: str,
    stages: list[str],
    pools: int,
    since: float,
    timeout: float,
) -> dict[str, float]:
    """Seconds from ``since`` (unix) to each milestone of a rollout, seen from outside."""
    marks: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(marks) < 2 + len(stages):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rollout of {sha[:12]}: only {marks} in {timeout:.0f}s")
        now = time.time() - since
        drivers = client.list(*names.NVIDIA_DRIVER_API)["items"]
        on = sum(
            1
            for d in drivers
            if (d["metadata"].get("annotations") or {}).get(names.COMMIT_ANNOTATION) == sha
        )
        if on and "first objects applied" not in marks:
            marks["first objects applied"] = now
        if on == pools and "all objects applied" not in marks:
            marks["all objects applied"] = now
        notes.refresh()
        for stage in stages:
            st = notes.latest(sha, stage_context(stage))
            key = f"{stage} success"
            if st is not None and st.state == "success" and key not in marks:
                marks[key] = now
            if st is not None and st.state in ("failure", "error"):
                raise RuntimeError(f"stage {stage}: {st.state}: {st.description}")
        time.sleep(1)
    return dict(sorted(marks.items(), key=lambda kv: kv[1]))


def node_lists_after_start(audit: outside.AuditLog, user: str, started: float) -> int:
    """LISTs of nodes by ``user`` after its node informer first watched."""
    audit.read()
    mine = [(t, v, r) for t, u, v, r in audit.events if u == user and r == "nodes" and t >= started]
    first_watch = min((t for t, v, _r in mine if v == "watch"), default=None)
    if first_watch is None:
        return -1
    return sum(1 for t, v, _r in mine if v == "list" and t > first_watch)


# --- the peer: Flux -----------------------------------------------------------------------------


def compiled_branch(b: Bench, flux_work: Path, sha: str, branch: str = "compiled") -> None:
    """Commit `gitops-gpu compile` output of the fleet at ``sha`` (no node-label sets: they are
    not Kubernetes objects) to ``branch`` of the fleet remote."""
    if not flux_work.exists():
        subprocess.run(["git", "clone", "-q", str(b.bare), str(flux_work)], check=True)
        git(flux_work, "checkout", "-q", "--orphan", branch)
        git(flux_work, "config", "user.email", "bench@example.com")
        git(flux_work, "config", "user.name", "bench")
    for old in flux_work.iterdir():
        if old.name != ".git":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    git(b.work, "checkout", "-q", sha)
    try:
        rendered = render_fleet(compile_fleet(load_repo(b.work), sha))
    finally:
        git(b.work, "checkout", "-q", "main")
    for rel, text in rendered.items():
        if "node-labels" in rel:
            continue
        (flux_work / rel).parent.mkdir(parents=True, exist_ok=True)
        (flux_work / rel).write_text(text)
    git(flux_work, "add", "-A")
    git(flux_work, "commit", "-qm", f"compiled {sha[:12]}")
    git(flux_work, "push", "-q", "origin", f"HEAD:{branch}")


def peer(
    b: Bench,
    args: argparse.Namespace,
    server: GitHTTP,
    audit: outside.AuditLog,
    report: Report,
    binaries: dict[str, Path],
) -> None:
    client = b.tb.client
    crds = fluxpeer.install_crds(client)
    fluxpeer.wait_established(client)
    kubeconfigs = {
        name: outside.identity_kubeconfig(client, b.tb.state.kubeconfig, fluxpeer.NAMESPACE, name)
        for name in FLUX_USERS
    }
    flux_work = b.root / "flux-compiled"
    compiled_branch(b, flux_work, git(b.work, "rev-parse", "HEAD"))
    head = git(flux_work, "rev-parse", "HEAD")
    interval = f"{args.interval:.0f}s"
    started = time.time()
    with fluxpeer.running(binaries, kubeconfigs, b.root / "flux") as flux:
        for obj in fluxpeer.objects(server.url(b.bare.name), "compiled", interval):
            fluxpeer.create(client, obj)
        try:
            took = wait_for(
                "Flux first apply", lambda: head in fluxpeer.applied_revision(client), 240, 0.2
            )
        except TimeoutError:
            print(fluxpeer.log_tail(flux), file=sys.stderr)
            report.figure(
                f"Flux {flux_build.FLUX_VERSION} first apply",
                "none",
                "applies",
                False,
                "flux.apply",
            )
            return
        report.figure(
            f"Flux {flux_build.FLUX_VERSION} ({crds} CRD files) first apply",
            f"{took:.1f}s",
            key="flux.apply",
        )
        time.sleep(2 * args.interval)
        t0 = time.time()
        idle = outside.idle(flux.pids, args.idle_seconds)
        per_ctl = {
            name: outside.idle([pid], 0.0) for name, pid in zip(flux.procs, flux.pids, strict=True)
        }
        reqs = audit.count(set(FLUX_USERS.values()), t0, t0 + idle.seconds)
        rss = " + ".join(f"{s.rss_mib:.0f}" for s in per_ctl.values())
        report.figure(
            "Flux idle RSS (source + kustomize)",
            f"{idle.rss_mib:.0f} MiB ({rss})",
            key="flux.rss",
        )
        report.figure(
            f"Flux idle CPU at {interval} intervals",
            f"{idle.cpu_pct:.2f}% of a core",
            key="flux.cpu",
        )
        per = per_interval(reqs, idle.seconds, args.interval)
        report.figure("Flux API requests per interval", f"{per:.1f}", key="flux.requests")
        print(f"    in {idle.seconds:.0f}s: {fmt(reqs)}")
        report.data["flux.requests_seen"] = f"in {idle.seconds:.0f} s: {fmt(reqs)}"
        lists = audit.count(set(FLUX_USERS.values()), started, time.time())["list nodes"]
        report.figure("Flux node LISTs after start", str(lists), key="flux.node_lists")
        # Commit -> objects applied, polling only (no notification-controller, no Receiver).
        write_fleet(b.work, args.pools, driver=DRIVERS[1])
        bumped = b.commit("bump driver for the peer")
        compiled_branch(b, flux_work, bumped)
        canary = sorted(compile_fleet(load_repo(b.work), bumped).stage("canary").pools)[0]
        try:
            took = wait_for("Flux applies the bump", lambda: carries(client, canary, bumped), 120)
        except TimeoutError:
            print(fluxpeer.log_tail(flux), file=sys.stderr)
            report.figure(
                "Flux commit -> objects applied (polling)", "none", "applies", False, "flux.polling"
            )
            return
        report.figure(
            "Flux commit -> objects applied (polling; no Receiver built)",
            f"{took:.2f}s",
            key="flux.polling",
        )


if __name__ == "__main__":
    raise SystemExit(main())
