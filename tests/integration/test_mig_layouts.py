"""A custom MIG layout kept in the fleet repo, applied to the real apiserver: one mig-parted
ConfigMap the ClusterPolicy names, with all-disabled and a layout per pool and version; the
pool's nodes labelled with their layout, and an older layout kept only while a node names it."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.components import device_plugin
from gitops_gpu.components.evidence import read_pool_evidence
from gitops_gpu.components.health import Health, Options
from gitops_gpu.fleet import mig_layouts
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed
from gitops_gpu_dev.testbed.simulator import Simulator

pytestmark = pytest.mark.integration
POOL = "train-h100"
LAYOUT = """version: v1
mig-configs:
  h100-train-mix:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": {small}
        "3g.40gb": 1
"""


def _layout(small: int) -> Any:
    def edit(work: Path) -> None:
        path = work / mig_layouts.CONFIGS_DIR / "h100-train-mix.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(LAYOUT.format(small=small))
        pool = work / "nodepools" / POOL / "pool.yaml"
        pool.write_text(
            pool.read_text().replace("migConfig: all-balanced", "migConfig: h100-train-mix")
        )

    return edit


def _layouts(tb: Testbed) -> dict[str, Any]:
    cm = tb.client.get("v1", "ConfigMap", mig_layouts.CONFIGMAP_NAME, "gpu-operator")
    assert cm is not None
    return mig_layouts.parse(cm["data"]["config.yaml"])


def _labels(tb: Testbed) -> set[str]:
    return {
        n["metadata"]["labels"][names.MIG_CONFIG_LABEL]
        for n in tb.client.list("v1", "Node")["items"]
        if n["metadata"]["name"].startswith(POOL + "-")
    }


def test_a_repo_layout_is_applied_and_a_change_moves_the_pool_to_a_new_layout(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    tb.client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        field_manager="test",
    )
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(fleet_remote.work), 1)
    nodes.wait_ready(tb.client, made)
    # fleet-repo-example holds configs/mig/h100-train-mix.yaml, which train-h100 selects
    apply = ("apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert main(list(apply)) == 0, capsys.readouterr().err
    (key,) = _labels(tb)
    assert key.startswith(POOL + "-")
    assert set(_layouts(tb)) == {"all-disabled", key}
    assert _layouts(tb)[key][0]["mig-devices"] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    cp = tb.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
    assert cp is not None
    assert cp["spec"]["migManager"]["config"] == {
        "name": mig_layouts.CONFIGMAP_NAME,
        "default": "all-disabled",
    }
    # the simulated hosts apply it (mig-manager) and advertise its devices (device plugin,
    # mig.strategy mixed): the device-plugin rung holds the node to them
    sim = Simulator(tb.client, tick=0.1)
    target = compile_fleet(load_repo(fleet_remote.work), "0" * 40).pool(POOL)
    deadline = time.monotonic() + 60
    while True:
        sim.step()
        (ev,) = read_pool_evidence(tb.client, target)
        got = device_plugin.check(ev, target, Options(since=datetime.now(UTC)))
        if got.health is Health.HEALTHY and "MIG devices" in got.reason:
            break
        assert time.monotonic() < deadline, got.reason
        time.sleep(0.1)
    assert "32 MIG devices" in got.reason  # 8 GPUs x (2 + 1 + 1)
    assert (
        ev.allocatable["nvidia.com/mig-1g.10gb"] == "16" and ev.allocatable["nvidia.com/gpu"] == "0"
    )
    # the other pools keep all-disabled, which the ConfigMap always holds
    canary = tb.client.get("v1", "Node", "canary-000")
    assert (
        canary is not None
        and canary["metadata"]["labels"][names.MIG_CONFIG_LABEL] == "all-disabled"
    )
    fleet_remote.commit("three small", _layout(3))
    assert main(list(apply)) == 0, capsys.readouterr().err
    (new,) = _labels(tb)
    assert new != key and set(_layouts(tb)) == {"all-disabled", key, new}  # written first
    assert main(list(apply)) == 0, capsys.readouterr().err
    assert set(_layouts(tb)) == {"all-disabled", new}
    rv = tb.client.get("v1", "ConfigMap", mig_layouts.CONFIGMAP_NAME, "gpu-operator")
    assert main(list(apply)) == 0  # in sync: no write
    again = tb.client.get("v1", "ConfigMap", mig_layouts.CONFIGMAP_NAME, "gpu-operator")
    assert (
        rv and again and rv["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
    )
