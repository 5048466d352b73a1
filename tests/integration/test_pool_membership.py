"""A node relabelled out of its pool's selector leaves the pool on the real apiserver: `plan`
shows its labels as ours to remove and `apply` removes them, so the pool's stage never smoke-
tests or judges it again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def test_a_node_relabelled_out_of_its_pool_loses_our_labels(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    shapes = [s for s in nodes.read_pool_shapes(fleet_remote.work) if s.name == "canary"]
    made = nodes.create_pool_nodes(tb.client, shapes, 2)
    nodes.wait_ready(tb.client, made)
    args = ["--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig]
    assert main(["apply", *args]) == 0, capsys.readouterr().err
    moved, kept = made
    labelled = tb.client.get("v1", "Node", moved)
    assert labelled is not None
    assert labelled["metadata"]["labels"][names.POOL_LABEL] == "canary"
    ((key, _value),) = shapes[0].node_selector.items()
    tb.client.patch("v1", "Node", moved, {"metadata": {"labels": {key: "elsewhere"}}})
    capsys.readouterr()
    assert main(["plan", *args, "--no-nvml", "--format", "json"]) == 3
    (plan,) = json.loads(capsys.readouterr().out)["plans"]
    assert [o["node"] for o in plan["orphanNodes"]] == [moved]
    assert main(["apply", *args]) == 0
    after = tb.client.get("v1", "Node", moved)
    assert after is not None
    labels = after["metadata"]["labels"]
    assert names.POOL_LABEL not in labels and names.MIG_CONFIG_LABEL not in labels
    still = tb.client.get("v1", "Node", kept)
    assert still is not None and still["metadata"]["labels"][names.POOL_LABEL] == "canary"
    assert main(["plan", *args, "--no-nvml"]) == 0  # in sync: nothing left to remove
