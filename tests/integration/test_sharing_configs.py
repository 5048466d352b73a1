"""A device-plugin config kept in the fleet repo, applied to the real apiserver: one ConfigMap
with a key per pool and version, nodes labelled with their pool's key, and a pool's old key kept
only while a node still names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.fleet import sharing
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

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
    fleet_remote.commit("time-slicing as code", _config(4))
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
