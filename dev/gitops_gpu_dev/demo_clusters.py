"""`gitops-gpu demo --clusters 2`: one fleet, two clusters, one controller per cluster, live.

Two local control planes stand for the two clusters of fleet-repo-example-two-clusters
(``staging``: canary and infer-l40s; ``prod-eu``: train-h100 and train-b200), each with fake GPU
nodes for its own pools only (``testbed up --cluster``) and the simulated GPU Operator (two real
operators next to two control planes are too heavy for a laptop demo). Each controller runs
with ``--cluster`` and a client for its own cluster only; they coordinate through the git-notes
record on the shared fleet remote. The story:

1. the fleet rolls out: canary (staging) → fleet (staging and prod-eu, each recording its part,
   the stage verdict derived from both) → training (prod-eu);
2. a driver bump takes the same path;
3. a bump whose canary upgrade fails halts in staging: prod-eu never sees it.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitops_gpu import names
from gitops_gpu.controller import Controller
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout import seal
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import CommitStatus, stage_context
from gitops_gpu_dev import paths
from gitops_gpu_dev.demo import DEMO_GATES, DemoRepo
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed import session, simulator
from gitops_gpu_dev.testbed.reports import snapshot_report

Say = Callable[[str], None]
CLUSTERS = ("staging", "prod-eu")
STAGES = ("canary", "fleet", "training")


def example() -> Path:
    return paths.PROJECT_ROOT / "fleet-repo-example-two-clusters"


def _fast(doc: dict[str, Any]) -> None:
    for stage in doc["spec"]["stages"]:
        stage["gate"] = dict(DEMO_GATES)  # no approval: the demo runs unattended


def _driver(version: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["driver"]["version"] = version

    return change


class Record:
    """Prints each status as it lands on the fleet remote, whoever wrote it."""

    def __init__(self, bare: Path, say: Say) -> None:
        self.backend = GitNotesBackend(bare, remote=None)
        self.say, self.seen = say, 0
        self.start = time.monotonic()

    def state(self, sha: str, context: str) -> str | None:
        found = self.backend.latest(sha, context)
        return found.state if found else None

    def wait(self, sha: str, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._print(self.backend.list_statuses(sha))
            if done():
                self._print(self.backend.list_statuses(sha))
                return True
            time.sleep(0.5)
        return False

    def _print(self, statuses: list[CommitStatus]) -> None:
        for st in statuses[self.seen :]:
            context = st.context.removeprefix("gitops-gpu/")
            t = time.monotonic() - self.start
            self.say(f"  {t:6.1f}s {context:28} {st.state:8} {st.description}")
        self.seen = max(self.seen, len(statuses))

    def new_commit(self) -> None:
        self.seen = 0


def run(workdir: Path, *, keep: bool = False, nodes_per_pool: int = 1, say: Say = print) -> int:
    workdir = workdir.resolve()
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("gitops_gpu").setLevel(logging.WARNING)  # the record printer says it all
    beds: dict[str, session.Testbed] = {}
    sims: list[simulator.Simulator] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        for cluster in CLUSTERS:
            say(f"== cluster {cluster}: a local control plane in {workdir / cluster}")
            beds[cluster] = session.start(
                workdir / cluster,
                fleet=example(),
                nodes_per_pool=nodes_per_pool,
                cluster=cluster,
                progress=lambda m: say(f"   {m}"),
            )
            sims.append(
                simulator.Simulator(
                    beds[cluster].client, tick=0.2, report_fn=snapshot_report, plays_operator=True
                ).start()
            )
        repo = DemoRepo(workdir, source=example())
        repo.edit_yaml("fleet.yaml", _fast)
        first = repo.commit("two clusters, short gates")
        # One seal key per cluster's controller; each trusts both clusters' verdicts.
        keys = {c: seal.generate(f"gitops-gpu/{c}") for c in CLUSTERS}
        trusted = tuple(
            t for k in keys.values() for t in seal.parse_public_keys(k.public_line(), "demo")
        )
        for cluster in CLUSTERS:
            cfg = Config(
                repo=str(repo.bare),
                cache_dir=workdir / f"cache-{cluster}",
                interval=1.0,
                cluster=cluster,
                seal_key=keys[cluster],
                trusted=trusted,
            )
            ctl = Controller(cfg, beds[cluster].client)
            threads.append(threading.Thread(target=ctl.run, args=(stop,), daemon=True))
            threads[-1].start()
        say(f"== controllers running: --cluster {' and --cluster '.join(CLUSTERS)}")
        record = Record(repo.bare, say)

        def passed(sha: str) -> bool:
            return all(record.state(sha, stage_context(s)) == "success" for s in STAGES)

        say(f"\n== rolling out {first[:7]} (statuses as they land on the fleet remote)")
        ok = record.wait(first, lambda: passed(first), 240)

        record.new_commit()
        bump = repo_bump(repo, "580.142.01", "bump driver to 580.142.01")
        say(f"\n== {bump[:7]}: driver bump, canary (staging) → fleet (both) → training (prod-eu)")
        ok = record.wait(bump, lambda: passed(bump), 240) and ok
        prod = beds["prod-eu"].client
        on = sorted(
            str(n["metadata"]["annotations"].get(sim.DRIVER_ANN))
            for n in prod.list("v1", "Node")["items"]
        )
        say(f"   prod-eu nodes now run driver {', '.join(sorted(set(on)))}")

        canary = "canary-000"
        beds["staging"].client.patch(
            "v1", "Node", canary, {"metadata": {"annotations": {sim.FAULT_ANN: "upgrade-failed"}}}
        )
        record.new_commit()
        bad = repo_bump(repo, "580.159.03", "bump driver to 580.159.03")
        say(f"\n== {bad[:7]}: the canary's upgrade fails in staging (fault on {canary})")
        failed = record.wait(
            bad, lambda: record.state(bad, stage_context("canary")) == "failure", 180
        )
        time.sleep(3)
        drivers = prod.list(*names.NVIDIA_DRIVER_API)["items"]
        untouched = all(
            d["metadata"]["annotations"].get(names.COMMIT_ANNOTATION) == bump for d in drivers
        )
        say(f"\n== prod-eu {'never saw' if untouched else 'SAW'} the failed commit")
        ok = ok and failed and untouched
        say(f"\nresult: {'OK' if ok else 'FAILED'}")
        if keep:
            for cluster, tb in beds.items():
                say(f"left running: {cluster}: export KUBECONFIG={tb.kubeconfig}")
        return 0 if ok else 1
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        for s in sims:
            s.stop()
        if not keep:
            for cluster in beds:
                session.stop(workdir / cluster)


def repo_bump(repo: DemoRepo, version: str, message: str) -> str:
    repo.edit_yaml("base/clusterpolicy.yaml", _driver(version))
    return repo.commit(message)


def reset(workdir: Path) -> None:
    """A previous run's state: stop what it left running, start clean."""
    if workdir.exists():
        for cluster in CLUSTERS:
            session.stop(workdir / cluster)
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
