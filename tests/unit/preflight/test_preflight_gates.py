"""Gate specs at preflight: PromQL parsed by promtool (GG060/GG061), images fully qualified and
finite timeouts for smoke tests (shape errors, GG002)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from test_preflight_codes import H100, check, only

from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu.preflight import promql

SMOKE = {"image": "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04", "command": ["nvidia-smi"]}


def _stages(gate: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "canary", "pools": ["a"], "gate": gate}]


def _need_promtool() -> None:
    if shutil.which("promtool") is None:
        pytest.fail("promtool missing: apt-get install prometheus (make setup does it)")


def test_clean_gate_specs(tmp_path: Path) -> None:
    _need_promtool()
    gate = {
        "smokeTest": {**SMOKE, "gpus": 1, "timeout": "5m", "nodes": 2},
        "metrics": [
            {
                "name": "xid",
                "query": 'sum(increase(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"}[10m]))',
                "max": 0,
                "for": "5m",
            },
            {
                "name": "temp",
                "query": 'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$nodes"})',
                "compareTo": "baseline",
                "tolerance": 0.2,
            },
        ],
        "onNoData": "fail",
    }
    root = write_repo(tmp_path, {"a": H100}, stages=_stages(gate))
    assert check(root) == []


def test_gg060_query_does_not_parse(tmp_path: Path) -> None:
    _need_promtool()
    bad = 'sum(rate(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"}[5m])'
    gate = {"metrics": [{"name": "xid", "query": bad, "max": 0}]}
    root = write_repo(tmp_path, {"a": H100}, stages=_stages(gate))
    (f,) = only(check(root), "GG060")
    assert "metric xid" in f.message and "unclosed left parenthesis" in f.message


def test_gg061_without_promtool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promql, "promtool", lambda: None)
    gate = {"metrics": [{"name": "xid", "query": "up", "min": 1}]}
    root = write_repo(tmp_path, {"a": H100}, stages=_stages(gate))
    (f,) = only(check(root), "GG061")
    assert "1 gate metric queries" in f.message


@pytest.mark.parametrize(
    ("smoke", "needle"),
    [
        ({**SMOKE, "image": "nvidia/cuda:12.8.0-base"}, "fully qualified"),
        ({**SMOKE, "image": "nvcr.io/nvidia/cuda"}, "fully qualified"),
        ({**SMOKE, "timeout": ".inf"}, "not a duration"),
        ({**SMOKE, "timeout": 0}, "longer than 0s"),
        ({**SMOKE, "nodes": 0}, "'all' or a number"),
        ({**SMOKE, "command": []}, "at least 1"),
    ],
)
def test_bad_smoke_test(tmp_path: Path, smoke: dict[str, Any], needle: str) -> None:
    root = write_repo(tmp_path, {"a": H100}, stages=_stages({"smokeTest": smoke}))
    found = only(check(root), "GG002")
    assert any(needle in f.message for f in found), [f.message for f in found]


def test_metric_needs_a_bound(tmp_path: Path) -> None:
    gate = {"metrics": [{"name": "xid", "query": "up"}]}
    root = write_repo(tmp_path, {"a": H100}, stages=_stages(gate))
    found = only(check(root), "GG002")
    assert any("give max, min or both, or compareTo" in f.message for f in found)
