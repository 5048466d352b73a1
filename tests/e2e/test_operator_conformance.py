"""The simulated GPU Operator must show the controller what the real v26.7.0 shows it.

One scenario, run on the simulator and then on the real operator (same testbed, fresh fleet
repo each): roll out, bump the driver, then a bump that fails on the canary. At each settled
point the observations the controller and a person act on are recorded (node upgrade states,
cordons, driver and deploy labels, pool health, stage statuses, CR states) and the two runs
must agree, so the simulator cannot drift from the real operator again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Env, fast_gates, set_driver

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.errors import KubeError
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.e2e
STAGES = ("canary", "inference", "training")
DEPLOY = names.DEPLOY_LABEL_PREFIX


def _settled(env: Env, sha: str) -> bool:
    """Every stage succeeded on ``sha`` and no node is mid-upgrade or cordoned."""
    if not all(env.state(sha, s) == "success" for s in STAGES):
        return False
    return all(
        n["metadata"]["labels"].get(names.UPGRADE_STATE_LABEL) == "upgrade-done"
        and not n["spec"].get("unschedulable")
        for n in env.tb.client.list("v1", "Node")["items"]
    )


def _observe(env: Env, sha: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for n in env.tb.client.list("v1", "Node")["items"]:
        labels = n["metadata"]["labels"]
        nodes[n["metadata"]["name"]] = {
            "upgrade": labels.get(names.UPGRADE_STATE_LABEL),
            "cordoned": bool(n["spec"].get("unschedulable")),
            "owner": labels.get(names.DRIVER_OWNER_LABEL),
            "driver": n["metadata"]["annotations"].get(sim.DRIVER_ANN),
            "cuda": labels.get("nvidia.com/cuda.driver-version.full"),
            "mig.config": labels.get(names.MIG_CONFIG_LABEL),
            "deploy": sorted(k[len(DEPLOY) :] for k, v in labels.items() if k.startswith(DEPLOY)),
        }
    capsys.readouterr()
    rc = main(
        ["status", "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig, "--format", "json"]
    )
    assert rc == 0
    status = json.loads(capsys.readouterr().out)
    pools = {p["pool"]: (p["healthy"], p["total"]) for st in status["stages"] for p in st["pools"]}
    cp = env.tb.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
    return {
        "nodes": nodes,
        "pools": pools,
        "stages": {s: env.state(sha, s) for s in STAGES},
        "clusterpolicy": ((cp or {}).get("status") or {}).get("state"),
    }


def _diagnose(env: Env) -> str:
    """What canary-000 and its driver pod look like, and the operator's last log lines."""
    node = env.tb.client.get("v1", "Node", "canary-000") or {}
    labels = {k: v for k, v in node.get("metadata", {}).get("labels", {}).items() if "nvidia" in k}
    pods = env.tb.client.list("v1", "Pod", namespace="gpu-operator")["items"]
    drivers = [
        (p["metadata"]["name"], p["status"].get("phase"), p["status"].get("containerStatuses"))
        for p in pods
        if p["spec"].get("nodeName") == "canary-000" and "driver" in p["metadata"]["name"]
    ]
    log = Path(env.tb.dir) / "logs" / "gpu-operator.log"
    tail = log.read_text(errors="replace").splitlines()[-25:] if log.exists() else []
    return "\n".join([f"canary-000 labels: {labels}", f"its driver pods: {drivers}", *tail])


def _scenario(env: Env, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    first = env.remote.commit("fast gates", fast_gates())
    env.start_nodes()
    env.controller()
    env.wait("first rollout settled", lambda: _settled(env, first), timeout=120)
    seen["rollout"] = _observe(env, first, capsys)
    bump = env.remote.commit("bump driver", set_driver("580.142.01"))
    env.wait("bump settled", lambda: _settled(env, bump), timeout=120)
    seen["bump"] = _observe(env, bump, capsys)
    env.tb.client.patch(
        "v1", "Node", "canary-000", {"metadata": {"annotations": {sim.FAULT_ANN: "upgrade-failed"}}}
    )
    # upgrade-failed lasts until the rollback's driver pod is Ready again, which may come
    # before the controller's rollback is seen here, and may be short on a busy machine: a
    # watch from before the bad commit sees every state the node passes through (a poll can
    # miss one). The operator's ClusterPolicy reconcile may lag the upgrade controller's label,
    # so every state seen while the node is upgrade-failed counts, not the first one.
    cp_states: list[str | None] = []
    history: list[str | None] = []
    window_closed = threading.Event()
    stop = threading.Event()
    node = env.tb.client.get("v1", "Node", "canary-000") or {}
    since = node.get("metadata", {}).get("resourceVersion", "0")

    def upgrade_state(obj: Mapping[str, Any]) -> str | None:
        return (obj.get("metadata", {}).get("labels") or {}).get(names.UPGRADE_STATE_LABEL)

    def record_cp_state() -> None:
        cp = env.tb.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
        cp_states.append(((cp or {}).get("status") or {}).get("state"))

    def watch_canary_000() -> None:
        nonlocal since
        state = upgrade_state(node)
        while not stop.is_set():
            # Short streams, resumed from the last resourceVersion: nothing is missed between
            # them, and the ClusterPolicy is read again at least once a second in the window.
            try:
                events = list(
                    env.tb.client.watch(
                        "v1",
                        "Node",
                        resource_version=since,
                        timeout_seconds=1,
                        field_selector="metadata.name=canary-000",
                    )
                )
            except KubeError:
                events = [{"type": "ERROR"}]
            if any(e.get("type") == "ERROR" for e in events):
                # A compacted resourceVersion (410) after a long quiet: re-read the node.
                fresh = env.tb.client.get("v1", "Node", "canary-000") or {}
                events = [{"type": "MODIFIED", "object": fresh}]
            for event in events:
                obj = event.get("object") or {}
                since = obj.get("metadata", {}).get("resourceVersion", since)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    state = upgrade_state(obj)
                    if not history or history[-1] != state:
                        history.append(state)
                if state != "upgrade-failed" and cp_states:
                    window_closed.set()
                    return
                if state == "upgrade-failed":
                    record_cp_state()
            if state == "upgrade-failed":
                record_cp_state()

    watcher = threading.Thread(target=watch_canary_000, daemon=True)
    watcher.start()
    try:
        bad = env.remote.commit("bump that fails on canary", set_driver("580.159.03"))
        env.wait("canary fails", lambda: env.state(bad, "canary") == "failure", timeout=120)
        env.wait("canary rolled back", lambda: env.pool_commit("canary") == bump)
        try:
            env.wait(
                "canary-000 upgrade-failed and its ClusterPolicy state known",
                lambda: "notReady" in cp_states or window_closed.is_set(),
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nClusterPolicy states seen: {cp_states}\n"
                f"canary-000 upgrade states seen: {history}\n{_diagnose(env)}"
            ) from None
    finally:
        stop.set()
        watcher.join(10)
    failed = _observe(env, bad, capsys)
    seen["failure"] = {
        "canary-000": "upgrade-failed" if cp_states else None,
        # every upgrade state the node went through, from the bad commit to upgrade-failed
        "canary-000 path": history[: history.index("upgrade-failed") + 1]
        if "upgrade-failed" in history
        else history,
        "stages": failed["stages"],
        # notReady if ever seen in the window, else what was seen (which then fails the compare)
        "clusterpolicy": "notReady" if "notReady" in cp_states else sorted(set(cp_states), key=str),
        "others": {k: v for k, v in failed["nodes"].items() if not k.startswith("canary-")},
    }
    return seen


def _run(
    tb: Testbed, mode: str, remote: Any, tmp: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    env = Env(tb, remote, tmp, operator=mode)
    try:
        return _scenario(env, capsys)
    finally:
        env.close()
        for node in tb.client.list("v1", "Node")["items"]:
            tb.client.delete("v1", "Node", node["metadata"]["name"])
        for report in tb.client.list(*names.NODE_GPU_REPORT_API)["items"]:
            tb.client.delete(*names.NODE_GPU_REPORT_API, report["metadata"]["name"])


def test_simulator_and_real_operator_show_the_same_rollout(
    clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    simulated = _run(clean_cluster, "sim", fleet_remote, tmp_path / "sim", capsys)
    (tmp_path / "real").mkdir()
    remote = type(fleet_remote)(tmp_path / "real", paths.fleet_example())  # a fresh repo
    real = _run(clean_cluster, "real", remote, tmp_path / "real", capsys)
    for phase in ("rollout", "bump", "failure"):
        assert simulated[phase] == real[phase], phase
    # ...and what they agree on is the story, not an empty picture.
    canary = real["bump"]["nodes"]["canary-000"]
    assert canary["driver"] == canary["cuda"] == "580.142.01"
    assert canary["upgrade"] == "upgrade-done" and "mig-manager" in canary["deploy"]
    assert "mig-manager" not in real["bump"]["nodes"]["infer-l40s-000"]["deploy"]
    assert set(real["bump"]["pools"].values()) == {(1, 1)}
    assert real["failure"]["canary-000"] == "upgrade-failed"
    assert real["failure"]["canary-000 path"][-1] == "upgrade-failed"
    assert "pod-restart-required" in real["failure"]["canary-000 path"]
    assert real["failure"]["clusterpolicy"] == "notReady"  # v26.7.0: an upgrade is incomplete
    assert real["failure"]["stages"] == {"canary": "failure", "inference": None, "training": None}
