"""`gitops-gpu testbed up --prometheus`, `fault` and `down` as a person runs them: the URL file,
DCGM-exporter series for every GPU node driven by the faults, loopback only, processes gone."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_fixtures import need

from gitops_gpu import kube
from gitops_gpu.cli import main
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import controlplane, kwok_stages

pytestmark = pytest.mark.integration


def query(url: str, expr: str) -> list[Any]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
        return list(json.loads(resp.read())["data"]["result"])


def eventually(url: str, expr: str, want: int, timeout: float = 30) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = query(url, expr)
        if len(found) == want:
            return found
        assert time.monotonic() < deadline, (expr, found)
        time.sleep(0.5)


def test_up_prometheus_fault_down(tmp_path: Path) -> None:
    need("prometheus")
    d = tmp_path / "tb"
    up = ["testbed", "up", "--dir", str(d), "--fleet", str(paths.fleet_example())]
    up += ["--nodes-per-pool", "1", "--operator", "sim", "--prometheus"]
    assert main(up) == 0
    try:
        url = (d / "prometheus-url").read_text().strip()
        assert url.startswith("http://127.0.0.1:")
        state = controlplane.State.load(d)
        assert state is not None
        pids = {name: state.pids[name] for name in ("prometheus", "dcgm-exporters")}
        client = kube.Client.from_kubeconfig(str(d / "kubeconfig"))
        gpu_nodes = [
            n["metadata"]["name"]
            for n in client.list("v1", "Node")["items"]
            if n["metadata"]["labels"].get("nvidia.com/gpu.count")
        ]
        hosts = eventually(url, "count by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", len(gpu_nodes))
        assert {h["metric"]["Hostname"] for h in hosts} == set(gpu_nodes)
        node = sorted(gpu_nodes)[0]
        assert main(["testbed", "fault", node, "xid79", "--dir", str(d)]) == 0
        (xid,) = eventually(url, "DCGM_FI_DEV_XID_ERRORS > 0", 1)
        assert (xid["metric"]["Hostname"], xid["metric"]["gpu"], xid["value"][1]) == (
            node,
            "0",
            "79",
        )
        assert main(["testbed", "fault", node, "smoke-fail", "--dir", str(d)]) == 0
        # The node stays schedulable; kwok's stage fails smoke pods there (test_gates_controller).
        assert not (client.get("v1", "Node", node) or {}).get("spec", {}).get("taints")
        stage = client.get(kwok_stages.API, "Stage", kwok_stages.SMOKE_FAIL_STAGE) or {}
        (on_node,) = [
            e for e in stage["spec"]["selector"]["matchExpressions"] if e["key"] == ".spec.nodeName"
        ]
        assert on_node["values"] == [node]
        assert main(["testbed", "fault", node, "--clear", "--dir", str(d)]) == 0
        assert client.get(kwok_stages.API, "Stage", kwok_stages.SMOKE_FAIL_STAGE) is None
        eventually(url, "DCGM_FI_DEV_XID_ERRORS > 0", 0)
        # Loopback only: nothing of it answers on another address of this host.
        port = int(url.rsplit(":", 1)[1])
        other = socket.gethostbyname(socket.gethostname())
        if not other.startswith("127."):
            with pytest.raises(OSError), socket.create_connection((other, port), timeout=2):
                pass
    finally:
        assert main(["testbed", "down", "--dir", str(d)]) == 0
    for name, pid in pids.items():
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, f"{name} still running"
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
