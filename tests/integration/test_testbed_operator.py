"""`gitops-gpu testbed up --operator real --simulate`: the real GPU Operator v26.7.0 as a process.

It deploys its operands on the KWOK nodes (DaemonSets bound by kube-scheduler, pods Ready),
labels the nodes, runs its upgrade controller, and binds nothing but 127.0.0.1; the simulator
plays the hosts (the driver a host runs, NodeGPUReports). A real operator that cannot start
stops with its command and its last log lines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gitops_gpu import kube, names
from gitops_gpu.cli import main
from gitops_gpu.errors import TestbedError
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import controlplane, operator
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.operator_build import OperatorBuild
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def _wait(what: str, pred: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for: {what}")


def _listening(pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets these processes listen on (from /proc)."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir() if fd_dir.exists() else ():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                found.append(cols[1])
    return found


def _loopback(addr: str) -> bool:
    host = addr.split(":", maxsplit=1)[0]
    return host in ("0100007F", "00000000000000000000000001000000")  # 127.0.0.1, ::1


def test_real_operator_deploys_operands_labels_nodes_and_binds_loopback(tmp_path: Path) -> None:
    d = tmp_path / "tb"
    argv = ["testbed", "up", "--dir", str(d), "--fleet", str(paths.fleet_example())]
    argv += ["--nodes-per-pool", "1", "--operator", "real", "--simulate", "--tick", "0.2"]
    assert main(argv) == 0
    state = controlplane.State.load(d)
    assert state is not None
    try:
        assert {"kube-scheduler", operator.PROCESS, "simulator"} <= set(state.pids)
        client = kube.Client.from_kubeconfig(str(state.kubeconfig))
        compiled = compile_fleet(load_repo(paths.fleet_example()), "0" * 40)
        cluster = compiled.clusters["default"]
        for doc in [cluster.cluster_policy, *(p.driver for p in cluster.pools.values())]:
            client.apply(doc, field_manager="test")

        def operands_ready() -> bool:
            pods = client.list("v1", "Pod", namespace=operator.NAMESPACE)["items"]
            apps = {(p["spec"].get("nodeName"), p["metadata"]["labels"].get("app")) for p in pods}
            validated = {n for n, app in apps if app == "nvidia-operator-validator"}
            return validated == {
                "canary-000",
                "infer-l40s-000",
                "train-b200-000",
                "train-h100-000",
            } and all(p["status"].get("phase") == "Running" for p in pods)

        _wait("operand pods bound and Running on every node", operands_ready, 90)

        def driver_installed() -> bool:
            node = client.get("v1", "Node", "canary-000")
            labels = (node or {}).get("metadata", {}).get("labels", {})
            return (
                labels.get(names.UPGRADE_STATE_LABEL) == "upgrade-done"
                and labels.get("nvidia.com/cuda.driver-version.full")
                == compiled.pool("canary").driver_version
            )

        _wait("canary-000 upgrade-done with the pool's driver", driver_installed)
        node = client.get("v1", "Node", "canary-000")
        assert node is not None
        labels = node["metadata"]["labels"]
        assert labels[f"{names.DEPLOY_LABEL_PREFIX}driver"] == "true"  # set by the operator
        assert labels[names.DRIVER_OWNER_LABEL] == "canary"
        assert (
            node["metadata"]["annotations"][sim.DRIVER_ANN]
            == labels["nvidia.com/cuda.driver-version.full"]
        )
        l40s = client.get("v1", "Node", "infer-l40s-000")
        assert l40s is not None
        assert f"{names.DEPLOY_LABEL_PREFIX}mig-manager" not in l40s["metadata"]["labels"]
        report = client.get(*names.NODE_GPU_REPORT_API, "canary-000")
        assert report is not None
        assert report["status"]["driverVersion"] == compiled.pool("canary").driver_version

        def policy_ready() -> bool:
            cp = client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
            return ((cp or {}).get("status") or {}).get("state") == "ready"

        _wait("ClusterPolicy ready", policy_ready)
        bound = _listening(set(state.pids.values()))
        assert bound and all(_loopback(a) for a in bound), bound
        client.close()
    finally:
        assert main(["testbed", "down", "--dir", str(d)]) == 0
    for pid in state.pids.values():
        assert not controlplane._alive(pid)


def test_an_operator_that_cannot_start_names_its_command_and_log(
    testbed: Testbed, tmp_path: Path
) -> None:
    fake = tmp_path / "gpu-operator"
    fake.write_text("#!/bin/sh\necho 'OPERATOR_NAMESPACE environment variable not set'\nexit 1\n")
    fake.chmod(0o755)
    (tmp_path / "opt").mkdir()
    state = controlplane.State(
        dir=str(tmp_path / "tb"), apiserver_port=testbed.state.apiserver_port
    )
    (tmp_path / "tb").mkdir()
    with pytest.raises(TestbedError) as err:
        operator.start(state, testbed.client, OperatorBuild(fake, tmp_path / "opt", "x"))
    text = str(err.value)
    assert str(fake) in text and "OPERATOR_NAMESPACE environment variable not set" in text
