"""Two clusters, one fleet: two real testbeds (two kube-apiservers), one fleet remote on disk,
one `gitops-gpu controller --cluster NAME` process per cluster, coordinating only through the
git-notes record on the remote.

Cluster a holds the canary pool and infer-l40s; cluster b holds train-h100. Stage ``canary``
lives in a; stage ``fleet`` spans a and b. The GPU Operator is the simulator on both clusters
(GITOPS_GPU_E2E_OPERATOR is not followed here): two real operators next to two control planes
do not fit the two cores this suite is sized for, and what is under test is the coordination.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import FAST_GATE, Env, set_driver
from ruamel.yaml import YAML

from gitops_gpu import names, sealed
from gitops_gpu.cli import main
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.rollout import seal
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import gitea, nodes, session, simulator
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.reports import SnapshotReports

pytestmark = pytest.mark.e2e
POOLS = {"canary": "a", "infer-l40s": "a", "train-h100": "b"}
INTERVAL = "1s"
# A minute away from the fleet remote, under the spanning stage's gate.timeout.
WEBHOOK_INTERVAL = 20  # polling far slower than a webhook
CUT_OFF_SECONDS = float(os.environ.get("GITOPS_GPU_CUT_OFF_SECONDS", "60"))
SPANNING_GATE = {**FAST_GATE, "timeout": "5m"}


def _dir_b() -> Path:
    explicit = os.environ.get("GITOPS_GPU_TESTBED_DIR_B")
    if explicit:
        return Path(explicit)
    first = os.environ.get("GITOPS_GPU_TESTBED_DIR") or str(paths.PROJECT_ROOT / ".testbed/pytest")
    return Path(f"{first}-b")


@pytest.fixture(scope="module")
def testbed_b() -> Iterator[session.Testbed]:
    """The second cluster: a control plane of its own, torn down after the module."""
    directory = _dir_b()
    try:
        tb = session.start(directory, die_with_parent=True, progress=lambda _m: None)
    except GitopsGpuError as exc:
        pytest.fail(f"the second control plane could not start:\n{exc}", pytrace=False)
    try:
        yield tb
    finally:
        tb.client.close()
        session.stop(directory)


def two_clusters(work: Path) -> None:
    """The example fleet as two clusters: canary in a, then a stage spanning a and b."""
    yaml = YAML()
    fleet: Any = yaml.load((work / "fleet.yaml").read_text())
    # contexts: for status/plan from one kubeconfig; each controller uses its own cluster's
    fleet["spec"]["clusters"] = [{"name": "a", "context": "a"}, {"name": "b", "context": "b"}]
    fleet["spec"]["stages"] = [
        {"name": "canary", "pools": ["canary"], "gate": dict(FAST_GATE), "onFailure": "rollback"},
        # a longer timeout: cluster b's controller is kept away from the remote for a minute
        {"name": "fleet", "pools": ["infer-l40s", "train-h100"], "gate": SPANNING_GATE},
    ]
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(fleet, fh)
    shutil.rmtree(work / "nodepools" / "train-b200")
    for pool, cluster in POOLS.items():
        path = work / "nodepools" / pool / "pool.yaml"
        doc: Any = yaml.load(path.read_text())
        doc["spec"]["cluster"] = cluster
        with path.open("w") as fh:
            yaml.dump(doc, fh)


@dataclass
class Cluster:
    name: str
    tb: session.Testbed
    sim: simulator.Simulator | None = None
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def driver_commit(self, pool: str) -> str | None:
        drv = self.tb.client.get(*names.NVIDIA_DRIVER_API, pool)
        return None if drv is None else drv["metadata"]["annotations"].get(names.COMMIT_ANNOTATION)

    def policy_commit(self) -> str | None:
        cp = self.tb.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
        return None if cp is None else cp["metadata"]["annotations"].get(names.COMMIT_ANNOTATION)


@dataclass
class TwoClusters:
    env: Env
    a: Cluster
    b: Cluster
    tmp: Path
    extra: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def link_b(self) -> Path:
        """Cluster b reaches the fleet remote through this link: removing it cuts b off alone."""
        return self.tmp / "fleet-for-b.git"

    @property
    def trusted_keys(self) -> Path:
        """Each cluster's seal key, provisioned as its Secret (as a platform team would), and
        the file by which each controller trusts both clusters' verdicts."""
        path = self.tmp / "record-keys.pub"
        if not path.exists():
            lines = []
            for c in (self.a, self.b):
                key = seal.generate(f"gitops-gpu/{c.name}")
                c.tb.client.delete("v1", "Secret", sealed.KEY_SECRET, "default")
                c.tb.client.create(sealed.key_secret("default", key))
                lines.append(key.public_line())
            path.write_text("\n".join(lines) + "\n")
        return path

    def start_controller(
        self, c: Cluster, *extra: str, repo: str | None = None, interval: str = INTERVAL
    ) -> int:
        """Start cluster c's controller process; returns the port of its /metrics, /webhook."""
        extra = ("--record-trusted-keys", str(self.trusted_keys), *extra)
        c.log = self.tmp / f"controller-{c.name}.log"
        default = self.link_b if c.name == "b" else self.env.remote.url
        argv = [
            sys.executable, "-m", "gitops_gpu", "controller", "--cluster", c.name,
            "--repo", repo or str(default), "--kubeconfig", c.tb.kubeconfig,
            "--interval", interval, "--no-leader-election", "--operator-namespace", "gpu-operator",
            "--metrics-addr", "127.0.0.1:0", "--cache-dir", str(self.tmp / f"cache-{c.name}"),
            *extra,
        ]  # fmt: skip
        start = c.log.stat().st_size if c.log.exists() else 0
        with c.log.open("ab") as out:
            c.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and c.proc.poll() is None:
            text = c.log.read_bytes()[start:].decode(errors="replace")
            found = re.search(r"serving on 127\.0\.0\.1:(\d+)", text)
            if found:
                return int(found.group(1))
            time.sleep(0.1)
        raise AssertionError(f"controller {c.name} did not start:\n{c.log.read_text()[-3000:]}")

    def kill9(self, c: Cluster) -> None:
        if c.proc is not None and c.proc.poll() is None:
            c.proc.send_signal(signal.SIGKILL)
            c.proc.wait(10)

    def part(self, sha: str, stage: str, cluster: str) -> str | None:
        return self.env.context_state(sha, f"{stage_context(stage)}/{cluster}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {c.name}:\n{c.log.read_text(errors='replace')[-2500:]}"
            for c in (self.a, self.b)
            if c.log is not None and c.log.exists()
        )

    def wait(self, what: str, pred: Any, timeout: float = 120) -> None:
        try:
            self.env.wait(what, pred, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def close(self) -> None:
        for c in (self.a, self.b):
            self.kill9(c)
            if c.sim is not None:
                c.sim.stop()


def merged_kubeconfig(two: TwoClusters) -> str:
    """One kubeconfig with contexts a and b, as a platform engineer's laptop has."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "current-context": "a"}
    for c in (two.a, two.b):
        doc = json.loads(Path(c.tb.kubeconfig).read_text())
        for key in ("clusters", "users"):
            (item,) = doc[key]
            merged.setdefault(key, []).append({**item, "name": c.name})
        ctx = {"name": c.name, "context": {"cluster": c.name, "user": c.name}}
        merged.setdefault("contexts", []).append(ctx)
    path = two.tmp / "kubeconfig-ab"
    path.write_text(json.dumps(merged))
    return str(path)


def _clean(tb: session.Testbed) -> None:
    for api, kind in (
        (names.NVIDIA_DRIVER_API[0], names.NVIDIA_DRIVER_API[1]),
        (names.CLUSTER_POLICY_API[0], names.CLUSTER_POLICY_API[1]),
        (names.NODE_GPU_REPORT_API[0], names.NODE_GPU_REPORT_API[1]),
        ("v1", "Node"),
    ):
        for item in tb.client.list(api, kind)["items"]:
            tb.client.delete(api, kind, item["metadata"]["name"])
    for item in tb.client.list("v1", "ConfigMap")["items"]:  # the last test's ledger
        meta = item["metadata"]
        if meta["name"].startswith("gitops-gpu-ledger"):
            tb.client.delete("v1", "ConfigMap", meta["name"], meta["namespace"])


@pytest.fixture
def clusters(env: Env, testbed_b: session.Testbed, tmp_path: Path) -> Iterator[TwoClusters]:
    _clean(testbed_b)
    two = TwoClusters(env, Cluster("a", env.tb, env.sim), Cluster("b", testbed_b), tmp_path)
    two.link_b.symlink_to(env.remote.bare)
    try:
        yield two
    finally:
        two.close()
        _clean(testbed_b)


def _bootstrap(two: TwoClusters) -> str:
    first = str(two.env.remote.commit("two clusters", two_clusters))
    _start_clusters(two, two.env.remote.work)
    two.start_controller(two.a)
    two.start_controller(two.b)
    two.wait(
        "first commit passes the spanning stage", lambda: two.env.state(first, "fleet") == "success"
    )
    return first


def _start_clusters(two: TwoClusters, work: Path) -> None:
    """Fake nodes for each cluster's own pools, and the simulated hosts and operator."""
    made_a = nodes.create_pool_nodes(two.a.tb.client, nodes.read_pool_shapes(work, "a"), 1)
    made_b = nodes.create_pool_nodes(two.b.tb.client, nodes.read_pool_shapes(work, "b"), 1)
    nodes.wait_ready(two.a.tb.client, made_a)
    nodes.wait_ready(two.b.tb.client, made_b)
    assert sorted(made_a) == ["canary-000", "infer-l40s-000"] and made_b == ["train-h100-000"]
    two.env.sim.start()
    two.b.sim = simulator.Simulator(
        two.b.tb.client,
        tick=0.1,
        report_fn=SnapshotReports(),
        report_heartbeat=5.0,
        plays_operator=True,
        nudge_every=0.5,
    )
    two.b.sim.start()


@pytest.mark.parametrize("env", ["sim"], indirect=True)
def test_commit_flows_canary_in_a_then_fleet_in_a_and_b(
    clusters: TwoClusters, capsys: pytest.CaptureFixture[str]
) -> None:
    two, env = clusters, clusters.env
    first = _bootstrap(two)
    # each controller wrote only into its own cluster, each cluster got its own ClusterPolicy
    assert two.a.driver_commit("train-h100") is None and two.b.driver_commit("canary") is None
    assert two.a.policy_commit() == first and two.b.policy_commit() == first
    assert (two.part(first, "fleet", "a"), two.part(first, "fleet", "b")) == ("success",) * 2
    assert two.part(first, "canary", "a") is None  # one-cluster stages keep their context

    bump = env.remote.commit("bump driver", set_driver("580.142.01"))
    env.wait("canary passes in a", lambda: env.state(bump, "canary") == "success", 90)
    canary_ok = env.record.latest(bump, stage_context("canary"))
    assert canary_ok is not None
    two.wait("b adopts", lambda: two.b.driver_commit("train-h100") == bump, 60)
    seen_in_b = time.time()
    two.wait("fleet passes in a and b", lambda: env.state(bump, "fleet") == "success")
    lag = seen_in_b - canary_ok.created_at
    with capsys.disabled():
        print(f"\n[measure] canary success in a -> first write in b: {lag:.1f}s "
              f"(polling, --interval {INTERVAL})")  # fmt: skip
    assert lag < 30, lag
    verdicts = [s for s in env.statuses(bump) if s.context == stage_context("fleet")]
    assert [s.state for s in verdicts] == ["pending", "success"], verdicts
    assert verdicts[-1].description == "fleet: passed in clusters a, b"
    node = two.b.tb.client.get("v1", "Node", "train-h100-000")
    assert node is not None and node["metadata"]["annotations"][sim.DRIVER_ANN] == "580.142.01"

    # status and plan reach both clusters through one kubeconfig's contexts
    kubeconfig = merged_kubeconfig(two)
    capsys.readouterr()
    trust = ["--record-trusted-keys", str(two.trusted_keys)]
    assert main(["status", "--repo", env.remote.url, "--kubeconfig", kubeconfig, *trust]) == 0
    shown = capsys.readouterr().out.splitlines()
    fleet_line = next(line for line in shown if line.startswith("stage fleet"))
    assert "clusters a,b" in fleet_line and "success" in fleet_line, shown
    parts = [line.split() for line in shown if line.startswith("  part")]
    assert [(p[2], p[4]) for p in parts] == [("a", "success"), ("b", "success")], shown
    assert any("pool train-h100" in line and "cluster b" in line for line in shown), shown
    assert main(["plan", "--repo", env.remote.url, "--kubeconfig", kubeconfig, "--no-nvml"]) == 0
    planned = capsys.readouterr().out.splitlines()
    assert planned and all(line.startswith(("[a] ", "[b] ")) for line in planned), planned
    assert "[b] cluster b @ " in "\n".join(planned)
    # a manual rollback acts on one cluster: without --cluster it refuses, nothing applied
    rollback = ["rollback", "--stage", "fleet", "--repo", env.remote.url]
    assert main([*rollback, "--kubeconfig", two.a.tb.kubeconfig]) == 2
    assert "--cluster NAME" in capsys.readouterr().err
    assert two.a.driver_commit("infer-l40s") == bump and env.state(bump, "fleet") == "success"

    # a canary failure in a: b never sees the commit
    two.a.tb.client.patch(
        "v1", "Node", "canary-000", {"metadata": {"annotations": {sim.FAULT_ANN: "upgrade-failed"}}}
    )
    bad = env.remote.commit("bump driver (fails on canary)", set_driver("580.159.03"))
    two.wait("canary fails in a", lambda: env.state(bad, "canary") == "failure", 90)
    two.wait("canary rolled back", lambda: two.a.driver_commit("canary") == bump, 60)
    time.sleep(3)  # several passes of b's controller
    assert two.b.driver_commit("train-h100") == bump
    assert two.b.policy_commit() == bump
    assert env.state(bad, "fleet") is None and two.part(bad, "fleet", "b") is None


@pytest.mark.parametrize("env", ["sim"], indirect=True)
def test_a_cluster_controller_killed_mid_stage_or_cut_off_holds_the_stage(
    clusters: TwoClusters,
) -> None:
    two, env = clusters, clusters.env
    _bootstrap(two)
    # b's node takes a while on the next driver: its part is still rolling out when killed
    bump = env.remote.commit("bump driver", set_driver("580.142.01"))
    two.wait("b's part under way", lambda: two.part(bump, "fleet", "b") == "pending", 90)
    two.kill9(two.b)
    two.wait("a's part passes", lambda: two.part(bump, "fleet", "a") == "success", 90)
    time.sleep(4)
    assert env.state(bump, "fleet") == "pending"  # never success without b
    # b comes back cut off from the fleet remote: it keeps its last state, writes nothing
    two.link_b.unlink()
    two.start_controller(two.b)
    time.sleep(CUT_OFF_SECONDS)
    assert two.b.driver_commit("train-h100") == bump and two.b.policy_commit() == bump
    assert env.state(bump, "fleet") == "pending" and two.part(bump, "fleet", "b") == "pending"
    assert two.b.log is not None
    assert "fleet repo unreachable, keeping the last fetched commits" in two.b.log.read_text()
    two.link_b.symlink_to(env.remote.bare)  # reachable again: b catches up
    two.wait("the stage passes once b is back", lambda: env.state(bump, "fleet") == "success")


def test_controller_refuses_a_cluster_the_fleet_does_not_list(
    fleet_remote: Any, tmp_path: Path
) -> None:
    fleet_remote.commit("two clusters", two_clusters)
    argv = [sys.executable, "-m", "gitops_gpu", "controller", "--repo", fleet_remote.url,
            "--kubeconfig", str(tmp_path / "none"), "--cache-dir", str(tmp_path / "c")]  # fmt: skip
    kubeconfig = tmp_path / "none"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: x, user: {}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "current-context: x\n"
    )
    unknown = subprocess.run(
        [*argv, "--cluster", "north"], check=False, capture_output=True, text=True, timeout=60
    )
    assert unknown.returncode == 2
    assert "--cluster north: the fleet lists only a, b" in unknown.stderr
    missing = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "--cluster NAME" in missing.stderr


@pytest.mark.parametrize("env", ["sim"], indirect=True)
def test_a_status_webhook_wakes_the_other_cluster(
    clusters: TwoClusters,
    gitea_repo_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The record on a real Gitea, which sends a signed webhook for every commit status (and
    push) to both controllers: cluster b moves as soon as a's canary passes, long before its
    own poll (--interval 20s)."""
    two = clusters
    forge: gitea.Forge = gitea_repo_factory("fleet-two")
    work = two.tmp / "forge-work"
    shutil.copytree(paths.fleet_example(), work)
    two_clusters(work)
    yaml = YAML()
    fleet: Any = yaml.load((work / "fleet.yaml").read_text())
    for stage in fleet["spec"]["stages"]:
        stage["gate"]["soak"] = "0s"  # no soak to wait out between the long polls
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(fleet, fh)
    forge.git(work, "init", "-q", "-b", "main")
    forge.git(work, "config", "user.email", "platform@example.com")
    forge.git(work, "config", "user.name", "platform")
    forge.git(work, "add", "-A")
    forge.git(work, "commit", "-q", "-m", "two clusters")
    forge.push(work, "HEAD:main", force=True)
    first = forge.git(work, "rev-parse", "HEAD")
    monkeypatch.setenv("GITOPS_GPU_STATUS_TOKEN", forge.token)  # inherited by the processes
    record = GiteaBackend(forge.url, forge.owner, forge.name, forge.token)

    def state(sha: str, context: str) -> str | None:
        found = record.latest(sha, context)
        return found.state if found else None

    _start_clusters(two, work)
    secret = two.tmp / "webhook-secret"
    secret.write_text(secrets.token_hex(16))
    for c in (two.a, two.b):
        port = two.start_controller(
            c,
            "--status-backend", forge.status_backend,
            "--webhook-secret-file", str(secret),
            repo=forge.clone_url, interval=f"{WEBHOOK_INTERVAL}s",
        )  # fmt: skip
        forge.api(
            "POST",
            f"/repos/{forge.repo}/hooks",
            {
                "type": "gitea",
                "active": True,
                "events": ["push", "status"],
                "config": {
                    "url": f"http://127.0.0.1:{port}/webhook",
                    "content_type": "json",
                    "secret": secret.read_text(),
                },
            },
        )
    two.wait("first commit passes", lambda: state(first, stage_context("fleet")) == "success", 180)

    set_driver("580.142.01")(work)
    forge.git(work, "commit", "-q", "-am", "bump driver")
    forge.push(work, "HEAD:main")
    bump = forge.git(work, "rev-parse", "HEAD")
    two.wait("canary passes in a", lambda: state(bump, stage_context("canary")) == "success", 120)
    canary_ok = record.latest(bump, stage_context("canary"))
    assert canary_ok is not None
    two.wait("b adopts", lambda: two.b.driver_commit("train-h100") == bump, WEBHOOK_INTERVAL)
    lag = time.time() - canary_ok.created_at
    with capsys.disabled():
        print(f"\n[measure] canary success in a -> first write in b: {lag:.1f}s "
              f"(Gitea status webhook, --interval {WEBHOOK_INTERVAL}s)")  # fmt: skip
    assert lag < WEBHOOK_INTERVAL / 2, lag
