"""Gitea's build and start: failures name the command and show its last lines; the app.ini is
loopback-only with fresh secrets. No real Gitea here (tests/integration has those)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gitops_gpu.errors import BuildError, TestbedError
from gitops_gpu_dev.testbed import controlplane, gitea


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_app_ini_is_loopback_only_with_fresh_secrets(tmp_path: Path) -> None:
    one = gitea.app_ini(tmp_path, 3001, "alice", as_root=False)
    two = gitea.app_ini(tmp_path, 3001, "alice", as_root=False)
    assert "HTTP_ADDR = 127.0.0.1" in one and "HTTP_PORT = 3001" in one
    assert "ROOT_URL = http://127.0.0.1:3001/" in one
    for line in (
        "INSTALL_LOCK = true",
        "DB_TYPE = sqlite3",
        "DISABLE_SSH = true",
        "START_SSH_SERVER = false",
        "LFS_START_SERVER = false",
        "ALLOWED_HOST_LIST = loopback",
        "RUN_USER = alice",
    ):
        assert line in one, line
    assert "[actions]\nENABLED = false" in one
    assert "I_AM_BEING_UNSAFE_RUNNING_AS_ROOT" not in one
    assert "I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true" in gitea.app_ini(
        tmp_path, 1, "root", as_root=True
    )
    secrets_one = [ln for ln in one.splitlines() if "SECRET" in ln or "TOKEN" in ln]
    assert len(secrets_one) == 4
    assert not set(secrets_one) & set(two.splitlines())  # generated per call


def test_failed_module_download_reports_command_and_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITOPS_GPU_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    fake_go = _script(
        tmp_path / "go",
        "for i in $(seq 1 40); do echo line-$i; done; echo 'proxy.golang.org: 404'; exit 1",
    )
    monkeypatch.setattr(gitea, "_go", lambda: str(fake_go))
    with pytest.raises(BuildError) as err:
        gitea.ensure_gitea(progress=lambda _m: None)
    text = str(err.value)
    assert f"{fake_go} mod download -json code.gitea.io/gitea@{gitea.GITEA_VERSION}" in text
    assert "proxy.golang.org: 404" in text and "line-40" in text and "line-1\n" not in text
    assert "fix:" in text
    assert not gitea.gitea_path().exists()


def test_a_gitea_that_dies_at_start_is_reported_with_command_and_log(tmp_path: Path) -> None:
    broken = _script(
        tmp_path / "gitea", "echo 'starting'; echo '[F] git.InitFull failed: no git' >&2; exit 1"
    )
    state = controlplane.State(dir=str(tmp_path / "tb"))
    Path(state.dir).mkdir()
    try:
        with pytest.raises(TestbedError) as err:
            gitea.start(state, binary=broken, timeout=10)
    finally:
        controlplane.down(Path(state.dir))
    text = str(err.value)
    assert f"gitea failed to start: {broken} web --config" in text
    assert "git.InitFull failed: no git" in text
    assert "logs/gitea.log" in text


def test_a_missing_binary_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITOPS_GPU_CACHE", str(tmp_path / "empty"))
    state = controlplane.State(dir=str(tmp_path / "tb"))
    with pytest.raises(TestbedError) as err:
        gitea.start(state)
    assert "Gitea binary is missing" in str(err.value)
    assert "testbed build" in err.value.fix
    assert os.path.basename(str(gitea.gitea_path())) == "gitea"
