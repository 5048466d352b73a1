"""`gitops-gpu testbed up --simulate`, `fault` and `down` as a person runs them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from gitops_gpu import kube
from gitops_gpu.cli import main
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import controlplane
from gitops_gpu_dev.testbed import operator_sim as sim

pytestmark = pytest.mark.integration


def test_up_simulate_fault_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "tb"
    assert (
        main(
            [
                "testbed",
                "up",
                "--dir",
                str(d),
                "--fleet",
                str(paths.fleet_example()),
                "--nodes-per-pool",
                "1",
                "--simulate",
                "--tick",
                "0.2",
                "--operator",
                "sim",
            ]
        )
        == 0
    )
    try:
        out = capsys.readouterr().out
        assert "export KUBECONFIG=" in out and "simulator running" in out
        state = controlplane.State.load(d)
        assert state is not None and set(state.pids) >= {
            "etcd",
            "kube-apiserver",
            "kwok",
            "simulator",
        }
        client = kube.Client.from_kubeconfig(str(state.kubeconfig))
        assert main(["testbed", "fault", "canary-000", "upgrade-failed", "--dir", str(d)]) == 0
        node = client.get("v1", "Node", "canary-000")
        assert (
            node is not None and node["metadata"]["annotations"][sim.FAULT_ANN] == "upgrade-failed"
        )
        assert main(["testbed", "fault", "canary-000", "--clear", "--dir", str(d)]) == 0
        node = client.get("v1", "Node", "canary-000")
        assert node is not None and sim.FAULT_ANN not in node["metadata"]["annotations"]
        # The simulator process plays the operator: a pool's NVIDIADriver gets its driver
        # installed on the pool's nodes, with GFD's driver labels.
        driver = compile_fleet(load_repo(paths.fleet_example()), "0" * 40).pool("canary").driver
        client.apply(driver, field_manager="test")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            node = client.get("v1", "Node", "canary-000")
            assert node is not None
            labels = node["metadata"]["labels"]
            if labels.get("nvidia.com/cuda.driver-version.full") == driver["spec"]["version"]:
                break
            time.sleep(0.3)
        else:
            pytest.fail("the simulator never labelled canary-000")
        client.close()
    finally:
        assert main(["testbed", "down", "--dir", str(d)]) == 0
    assert not d.exists()
    for pid in state.pids.values():
        assert not controlplane._alive(pid)


def test_up_cleans_a_stale_dir_left_by_a_killed_run(tmp_path: Path) -> None:

    d = tmp_path / "stale"
    d.mkdir()
    # A "control plane" process from a run that was killed before `down`.
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    controlplane.State(dir=str(d), pids={"kube-apiserver": orphan.pid}).save()
    (d / "etcd").mkdir()
    (d / "etcd" / "junk").write_text("old data")
    try:
        assert main(["testbed", "up", "--dir", str(d)]) == 0
        assert orphan.wait(timeout=15) is not None  # stopped by `up`
        assert not (d / "etcd" / "junk").exists()
        state = controlplane.State.load(d)
        assert state is not None and orphan.pid not in state.pids.values()
    finally:
        main(["testbed", "down", "--dir", str(d)])
        if orphan.poll() is None:
            orphan.kill()
