"""A real Prometheus (Debian's prometheus package) scraping simulated DCGM exporters, for tests.

Missing Prometheus is a failure with the command that installs it, never a skip: CI must not
pass without having run these checks.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu_dev.testbed import controlplane, nodes
from gitops_gpu_dev.testbed import prometheus as prom
from gitops_gpu_dev.testbed.dcgm import DcgmExporters
from gitops_gpu_dev.testbed.operator_sim import FAULT_ANN

H100 = "NVIDIA-H100-80GB-HBM3"


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.fail(f"{tool} is not installed: {prom.INSTALL}")
    return found


@dataclass
class PromBed:
    url: str
    state: controlplane.State
    fleet: dict[str, dict[str, Any]]  # node name -> Node object the exporters serve
    exporters: DcgmExporters

    def fault(self, node: str, fault: str | None) -> None:
        notes = self.fleet[node]["metadata"].setdefault("annotations", {})
        if fault is None:
            notes.pop(FAULT_ANN, None)
        else:
            notes[FAULT_ANN] = fault
        self.exporters._read = 0.0  # re-read now

    def query(self, expr: str) -> dict[str, Any]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=5) as resp:
            out: dict[str, Any] = json.loads(resp.read())
        return out

    def wait_for(self, expr: str, timeout: float = 30) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)["data"]["result"]
            if result:
                return list(result)
            assert time.monotonic() < deadline, f"no data for {expr} after {timeout}s"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def prombed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromBed]:
    need("prometheus")
    fleet = {
        f"canary-{i}": nodes.node_manifest(f"canary-{i}", {"pool": "canary"}, H100) for i in (0, 1)
    }
    fleet["train-0"] = nodes.node_manifest("train-0", {"pool": "train"}, H100)
    exporters = DcgmExporters(lambda: list(fleet.values())).start()
    state = controlplane.State(dir=str(tmp_path_factory.mktemp("prom")))
    try:
        url = prom.start_server(state, exporters.url, scrape_interval=1.0)
        bed = PromBed(url, state, fleet, exporters)
        deadline = time.monotonic() + 30  # every node's target scraped at least once
        while len(bed.wait_for("count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)")) < len(fleet):
            assert time.monotonic() < deadline, "not every exporter was scraped"
            time.sleep(0.5)
        yield bed
    finally:
        prom.stop(state)
        exporters.stop()


def write_rules(bed: PromBed, name: str, text: str) -> Path:
    path = Path(bed.state.dir) / "prometheus" / "rules" / f"{name}.yaml"
    path.write_text(text)
    prom.reload(bed.url)
    return path
