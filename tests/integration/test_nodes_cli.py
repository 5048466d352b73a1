"""`gitops-gpu nodes` against the real apiserver: a commit of the fleet remote, like `plan`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gitops_gpu.cli import main
from gitops_gpu.cli.exits import Exit
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def test_nodes_reads_a_commit_of_the_fleet_remote_and_judges_each_node(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(fleet_remote.work), 1)
    nodes.wait_ready(tb.client, made)
    args = ["nodes", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig, "--format", "json"]
    # no driver, no operand, no NVML report yet: nothing is healthy, and it says so per node
    assert main(args) == Exit.FAILED
    report = json.loads(capsys.readouterr().out)
    judged = {n["node"] for p in report["pools"] for n in p["nodes"]}
    assert judged == set(made)
    assert all(
        n["health"] != "Healthy" and n["reason"] for p in report["pools"] for n in p["nodes"]
    )
    # --stage narrows to that stage's pools, as in plan/apply
    assert main([*args, "--stage", "canary"]) == Exit.FAILED
    canary = json.loads(capsys.readouterr().out)
    assert [p["pool"] for p in canary["pools"]] == ["canary"]
    # an unknown pool is a usage error
    assert main([*args, "--pool", "no-such-pool"]) == Exit.USAGE
