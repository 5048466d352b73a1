"""`gitops-gpu controller` as a process: serves its endpoints, rolls out, stops on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from e2e_harness import Env, fast_gates
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.leader import LEASE_API

pytestmark = pytest.mark.e2e


def test_sigterm_finishes_the_pass_releases_the_lease_and_exits(env: Env, tmp_path: Path) -> None:
    head = env.remote.commit("fast gates", fast_gates())
    env.start_nodes()
    env.tb.client.delete(*LEASE_API, "gitops-gpu-controller", "default")
    log = (tmp_path / "controller.log").open("w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gitops_gpu",
            "--log-format",
            "json",
            "controller",
            "--repo",
            env.remote.url,
            "--kubeconfig",
            env.tb.kubeconfig,
            "--interval",
            "0.5s",
            "--metrics-addr",
            "127.0.0.1:0",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            found = re.search(r"serving on 127\.0\.0\.1:(\d+)", Path(log.name).read_text())
            port = int(found.group(1)) if found else None
            time.sleep(0.2)
        assert port, Path(log.name).read_text()
        env.wait(
            "canary succeeds under the process", lambda: env.state(head, "canary") == "success"
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert b"gitops_gpu_leader 1.0" in r.read()
        lease = env.tb.client.get(*LEASE_API, "gitops-gpu-controller", "default")
        assert lease is not None and lease["spec"]["holderIdentity"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        lease = env.tb.client.get(*LEASE_API, "gitops-gpu-controller", "default")
        assert lease is not None and not lease["spec"].get("holderIdentity")  # released
        assert '"level": "info"' in Path(log.name).read_text()  # structured logs
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def test_a_multi_cluster_fleet_is_refused_not_applied_to_one_cluster(env: Env) -> None:
    def two_clusters(work: Path) -> None:
        fast_gates()(work)
        yaml = YAML()
        fleet = yaml.load((work / "fleet.yaml").read_text())
        fleet["spec"]["clusters"] = [{"name": "default"}, {"name": "eu", "context": "eu"}]
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(fleet, fh)
        pool = yaml.load((work / "nodepools" / "train-b200" / "pool.yaml").read_text())
        pool["spec"]["cluster"] = "eu"
        with (work / "nodepools" / "train-b200" / "pool.yaml").open("w") as fh:
            yaml.dump(pool, fh)

    env.remote.commit("two clusters", two_clusters)
    rc = env.controller()
    rc.kill()
    report = rc.ctl.run_pass()
    assert report.result == "error" and "--cluster NAME" in report.error
    assert env.tb.client.list(*names.NVIDIA_DRIVER_API)["items"] == []
