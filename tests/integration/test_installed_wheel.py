"""The built wheel, installed into a fresh venv outside the repo, runs on its own: check,
compile, plan, apply and a controller pass against the testbed, with no checkout beside it."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path
from typing import Any

import pytest
from wheel_build import build_wheel

from gitops_gpu.preflight import crd_source
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with only the wheel installed; third-party deps come from this venv's
    site-packages through a .pth (no index needed), never gitops_gpu itself."""
    root = tmp_path_factory.mktemp("installed")
    wheel = build_wheel(root / "wheel")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text("".join(f"{d}\n" for d in _dependency_dirs()))
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True)
    return env_dir


def _dependency_dirs() -> list[str]:
    """Where this interpreter finds the runtime dependencies (not gitops_gpu itself)."""
    found = {sysconfig.get_paths()["purelib"]}
    for name, depth in (("kubernetes", 1), ("git", 1), ("pydantic", 1), ("ruamel.yaml", 2)):
        found.add(str(Path(str(importlib.import_module(name).__file__)).resolve().parents[depth]))
    return sorted(found)


def _run(env_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", crd_source.ENV)}
    return subprocess.run(
        [str(env_dir / "bin" / "gitops-gpu"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_the_wheel_is_what_runs(installed: Path, tmp_path: Path) -> None:
    code = "import gitops_gpu; print(gitops_gpu.__file__)"
    out = subprocess.run(
        [str(installed / "bin" / "python"), "-c", code],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith(str(installed)), out.stdout
    # the dev tools are not in the wheel: no testbed, no demo
    dev = [str(installed / "bin" / "python"), "-c", "import gitops_gpu_dev"]
    assert subprocess.run(dev, cwd=tmp_path, capture_output=True, check=False).returncode != 0
    testbed = _run(installed, tmp_path, "testbed", "down", "--dir", str(tmp_path / "tb"))
    assert testbed.returncode == 2 and "invalid choice: 'testbed'" in testbed.stderr


def test_check_compile_plan_apply_and_a_pass_from_the_installed_wheel(
    installed: Path, clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path
) -> None:
    tb = clean_cluster
    work = str(fleet_remote.work)
    # no CRDs named anywhere: the error says how to name them, exit 2
    bare = _run(installed, tmp_path, "check", work)
    assert bare.returncode == 2, bare.stderr
    assert "--crds" in bare.stderr
    crds = str(paths.default_crds_dir())
    checked = _run(installed, tmp_path, "check", work, "--crds", crds)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    compiled = _run(installed, tmp_path, "compile", work, "--out", str(tmp_path / "out"))
    assert compiled.returncode == 0, compiled.stderr
    assert list((tmp_path / "out").rglob("*.yaml"))
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(fleet_remote.work), 1)
    nodes.wait_ready(tb.client, made)
    repo = ("--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert _run(installed, tmp_path, "plan", *repo).returncode == 3  # changes pending
    applied = _run(installed, tmp_path, "apply", *repo)  # CRDs read from the cluster
    assert applied.returncode == 0, applied.stderr
    assert _run(installed, tmp_path, "plan", *repo).returncode == 0
    one = _run(
        installed,
        tmp_path,
        "controller",
        *repo,
        "--once",
        "--no-leader-election",
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert one.returncode == 0, one.stderr
    assert "pass ok" in one.stderr
