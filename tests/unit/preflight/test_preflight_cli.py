"""`gitops-gpu check` and `gitops-gpu compile`: exit codes, text and JSON output, files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gitops_gpu.cli import check as check_cli
from gitops_gpu.fleet.scaffold import overlay, write_repo
from gitops_gpu.preflight.findings import Finding, render_json, render_text
from gitops_gpu_dev import paths

EXAMPLE = paths.fleet_example()
H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    check_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


def test_example_repo_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("check", str(EXAMPLE)) == 0
    assert capsys.readouterr().out == "0 error(s), 0 warning(s), 0 info\n"


def test_error_findings_exit_1_with_file_line_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_repo(
        tmp_path,
        {"a": {"gpu": {"product": "NVIDIA-B200"}}},
        overlays={"a": overlay({"driver": {"kernelModuleType": "proprietary"}})},
    )
    assert run("check", str(root)) == 1
    out = capsys.readouterr().out
    assert "nodepools/a/clusterpolicy.yaml:7: error GG031: pool 'a': NVIDIA-B200" in out
    assert "\n  fix: set driver.kernelModuleType: open (or auto)\n" in out
    assert out.endswith("1 error(s), 0 warning(s), 0 info\n")


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {**H100, "workload": "vm-passthrough"}})  # GG027
    assert run("check", str(root)) == 0


def test_json_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_repo(tmp_path, {"a": {**H100, "migConfig": "all-1g.5gb"}})
    assert run("check", str(root), "--format", "json", "--commit", "abc") == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"] == {"error": 1, "warning": 0, "info": 0}
    (f,) = doc["findings"]
    assert (f["code"], f["severity"], f["file"], f["pool"]) == (
        "GG034",
        "error",
        "nodepools/a/pool.yaml",
        "a",
    )
    assert f["line"] > 0 and f["fix"]
    assert doc["commit"] == "abc" and doc["plan"] is None


@pytest.mark.parametrize("argv", [("check", "/no/such/dir"), ("check", ".", "--crds", "/no/crds")])
def test_usage_errors_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(*argv) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_compile_writes_one_file_per_object(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("compile", str(EXAMPLE), "--out", str(out), "--commit", "abc") == 0
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml"))
    assert files == [
        "default/clusterpolicy-cluster-policy.yaml",
        "default/configmap-gitops-gpu-device-plugin-config.yaml",
        "default/configmap-gitops-gpu-mig-parted-config.yaml",
        "default/node-labels/canary.yaml",
        "default/node-labels/infer-l40s.yaml",
        "default/node-labels/train-b200.yaml",
        "default/node-labels/train-h100.yaml",
        "default/nvidiadriver-canary.yaml",
        "default/nvidiadriver-infer-l40s.yaml",
        "default/nvidiadriver-train-b200.yaml",
        "default/nvidiadriver-train-h100.yaml",
    ]
    assert "gitops-gpu.io/commit: abc" in (out / "default/nvidiadriver-canary.yaml").read_text()


def test_compile_refuses_a_conflicting_repo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_repo(
        tmp_path / "r",
        {"a": {}, "b": {"nodeSelector": {"p": "b"}}},
        overlays={"b": overlay({"toolkit": {"version": "v9"}})},
    )
    assert run("compile", str(root), "--out", str(tmp_path / "o")) == 1
    assert "nodepools/b/clusterpolicy.yaml:7" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_compile_reports_load_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_repo(tmp_path / "r", {"a": {"bogus": 1}})
    assert run("compile", str(root), "--out", str(tmp_path / "o")) == 1
    assert "nodepools/a/pool.yaml:" in capsys.readouterr().err


def test_render_text_and_json_are_stable() -> None:
    f = Finding.make("GG021", "overlap", file="p.yaml", line=3, fix="split")
    assert render_text([f]) == (
        "p.yaml:3: error GG021: overlap\n  fix: split\n1 error(s), 0 warning(s), 0 info\n"
    )
    assert json.loads(render_json([f]))["findings"][0]["severity"] == "error"
    assert Finding.make("GG036", "x").text() == "<fleet>: info GG036: x"
