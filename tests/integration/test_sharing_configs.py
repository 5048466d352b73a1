"""A device-plugin config kept in the fleet repo, applied to the real apiserver: one ConfigMap
with a key per pool and version, nodes labelled with their pool's key, and a pool's old key kept
only while a node still names it; the ladder's device-plugin rung then holds each node to what
the config promises (allocatable = GPUs x replicas), as the simulated hosts derive it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.components import device_plugin
from gitops_gpu.components.evidence import read_pool_evidence
from gitops_gpu.components.health import Health, Options
from gitops_gpu.fleet import sharing
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.operator_sim import FAULT_ANN
from gitops_gpu_dev.testbed.plugin_sim import STALE_FAULT
from gitops_gpu_dev.testbed.session import Testbed
from gitops_gpu_dev.testbed.simulator import Simulator

pytestmark = pytest.mark.integration
DP = names.DEVICE_PLUGIN_CONFIG_LABEL
POOL = "infer-l40s"
TS = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: {n}
"""


def _config(n: int) -> Any:
    def edit(work: Path) -> None:
        path = work / sharing.CONFIGS_DIR / "l40s-time-sliced-4.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TS.format(n=n))

    return edit


def _live(tb: Testbed) -> dict[str, str]:
    cm = tb.client.get("v1", "ConfigMap", sharing.CONFIGMAP_NAME, "gpu-operator")
    assert cm is not None
    return dict(cm.get("data") or {})


def _keys(tb: Testbed) -> set[str]:
    return {
        n["metadata"]["labels"][DP]
        for n in tb.client.list("v1", "Node")["items"]
        if n["metadata"]["name"].startswith(POOL + "-")
    }


def test_a_repo_config_is_applied_and_a_change_moves_the_pool_to_a_new_key(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    tb.client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        field_manager="test",
    )
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(fleet_remote.work), 2)
    nodes.wait_ready(tb.client, made)
    # fleet-repo-example holds configs/device-plugin/l40s-time-sliced-4.yaml
    apply = ("apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert main(list(apply)) == 0, capsys.readouterr().err
    data = _live(tb)
    (key,) = data
    assert key.startswith(POOL + "-") and "replicas: 4" in data[key]
    assert _keys(tb) == {key}
    cp = tb.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
    assert cp is not None
    assert cp["spec"]["devicePlugin"]["config"]["name"] == sharing.CONFIGMAP_NAME
    # a change is a new key; the nodes move to it, and the old key goes once none names it
    fleet_remote.commit("eight slices", _config(8))
    assert main(list(apply)) == 0, capsys.readouterr().err
    (new,) = _keys(tb)
    assert new != key and "replicas: 8" in _live(tb)[new]
    assert key in _live(tb)  # written before the nodes moved, in the same apply
    assert main(list(apply)) == 0, capsys.readouterr().err
    assert set(_live(tb)) == {new}
    rv = tb.client.get("v1", "ConfigMap", sharing.CONFIGMAP_NAME, "gpu-operator")
    assert main(list(apply)) == 0  # in sync: no write
    again = tb.client.get("v1", "ConfigMap", sharing.CONFIGMAP_NAME, "gpu-operator")
    assert (
        rv and again and rv["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
    )


def _rungs(tb: Testbed, work: Path, later: float = 0.0) -> dict[str, tuple[Health, str]]:
    """The device-plugin rung per node, judged ``later`` seconds after the stage adopted now
    (the nodes are seconds old: judged now, they are still in their grace)."""
    target = compile_fleet(load_repo(work), "0" * 40).pool(POOL)
    adopted = datetime.now(UTC)
    now = adopted + timedelta(seconds=later)
    out = {}
    for ev in read_pool_evidence(tb.client, target, now=now):
        got = device_plugin.check(ev, target, Options(since=adopted))
        out[ev.name] = (got.health, got.reason)
    return out


def _until(sim: Simulator, what: str, cond: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        sim.step()
        time.sleep(0.1)


def test_the_node_must_advertise_what_the_config_promises(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    tb.client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        field_manager="test",
    )
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(fleet_remote.work), 2)
    nodes.wait_ready(tb.client, made)
    sim = Simulator(tb.client, tick=0.1)  # stepped here: the hosts' device plugins and GFD
    apply = ("apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert main(list(apply)) == 0, capsys.readouterr().err
    work = fleet_remote.work
    # 4 L40S GPUs x 4 replicas, as the hosts derive it from the ConfigMap the operator mounts
    _until(
        sim,
        "infer-l40s nodes advertise 16 nvidia.com/gpu",
        lambda: all(h is Health.HEALTHY for h, _ in _rungs(tb, work, 600).values()),
    )
    node = tb.client.get("v1", "Node", f"{POOL}-000")
    assert node is not None and node["status"]["allocatable"]["nvidia.com/gpu"] == "16"
    assert node["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"
    # one host's plugin never takes the next config: applied, never took effect
    tb.client.patch(
        "v1", "Node", f"{POOL}-001", {"metadata": {"annotations": {FAULT_ANN: STALE_FAULT}}}
    )
    fleet_remote.commit("eight slices", _config(8))
    assert main(list(apply)) == 0, capsys.readouterr().err
    _until(
        sim,
        "the healthy host advertises 32",
        lambda: _rungs(tb, work, 600)[f"{POOL}-000"][0] is Health.HEALTHY,
    )
    health, reason = _rungs(tb, work, 600)[f"{POOL}-001"]
    assert health is Health.DEGRADED, reason
    assert "allocatable nvidia.com/gpu 16" in reason and "4 GPUs x 8 replicas = 32" in reason
    assert "gpu.replicas=4, config" in reason
    # right after adoption the same facts are still "restarting", not a failure
    assert _rungs(tb, work)[f"{POOL}-001"][0] is Health.PROGRESSING


def test_a_missing_operator_namespace_is_named_with_its_fix(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(fleet_remote.work), 1)
    nodes.wait_ready(tb.client, made)

    def elsewhere(work: Path) -> None:
        path = work / "fleet.yaml"
        text = path.read_text().replace(
            "    - name: default\n", "    - name: default\n      operatorNamespace: no-such-ns\n"
        )
        assert "no-such-ns" in text
        path.write_text(text)

    fleet_remote.commit("the operator runs elsewhere", elsewhere)
    capsys.readouterr()
    rc = main(["apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "namespace no-such-ns does not exist in the cluster" in err
    assert "clusters[].operatorNamespace" in err
    assert tb.client.get("v1", "ConfigMap", sharing.CONFIGMAP_NAME, "no-such-ns") is None
