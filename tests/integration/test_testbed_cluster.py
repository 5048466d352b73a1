"""`gitops-gpu testbed up --fleet F --cluster NAME`: a testbed standing for one cluster of a
multi-cluster fleet gets fake nodes for that cluster's pools only."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_gpu import kube
from gitops_gpu.cli import main
from gitops_gpu_dev import paths

pytestmark = pytest.mark.integration
EXAMPLE = paths.PROJECT_ROOT / "fleet-repo-example-two-clusters"


def test_up_with_cluster_makes_only_that_clusters_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "prod-eu"
    argv = ["testbed", "up", "--dir", str(d), "--fleet", str(EXAMPLE), "--cluster", "prod-eu",
            "--nodes-per-pool", "1", "--operator", "sim"]  # fmt: skip
    try:
        assert main(argv) == 0, capsys.readouterr().err
        client = kube.Client.from_kubeconfig(str(d / "kubeconfig"))
        found = sorted(n["metadata"]["name"] for n in client.list("v1", "Node")["items"])
        client.close()
        assert found == ["train-b200-000", "train-h100-000"]
    finally:
        main(["testbed", "down", "--dir", str(d)])
    capsys.readouterr()
    unknown = ["testbed", "up", "--dir", str(tmp_path / "x"), "--fleet", str(EXAMPLE),
               "--cluster", "north", "--operator", "sim"]  # fmt: skip
    try:
        assert main(unknown) == 1
        assert "no pool names cluster 'north'" in capsys.readouterr().err
    finally:
        main(["testbed", "down", "--dir", str(tmp_path / "x")])
