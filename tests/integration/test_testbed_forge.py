"""`gitops-gpu testbed up --forge` and `down` with the real Gitea (the control plane is stood in
for: its own tests cover it, and a second one would cost a minute of CPU here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.cli import main
from gitops_gpu.sync.source import credentials_env
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import controlplane, gitea, session

pytestmark = pytest.mark.integration


def test_up_forge_pushes_the_fleet_writes_forge_json_and_down_stops_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    gitea_binary: Path,  # fails (never skips) without the Gitea binary
) -> None:
    d = (tmp_path / "tb").resolve()

    def start(directory: Path, **_kw: Any) -> session.Testbed:
        directory.mkdir(parents=True)
        state = controlplane.State(dir=str(directory))
        state.save()
        return session.Testbed(state=state, client=None, node_names=[])  # type: ignore[arg-type]

    monkeypatch.setattr(session, "start", start)
    assert main(["testbed", "up", "--dir", str(d), "--forge"]) == 0
    try:
        out = capsys.readouterr().out
        info = json.loads((d / "forge.json").read_text())
        assert info["api_url"].startswith("http://127.0.0.1:")
        assert info["api_url"].endswith("/api/v1")
        assert info["repo"] == "platform/gpu-fleet"
        assert info["clone_url"] == info["url"] + "/platform/gpu-fleet.git"
        assert Path(info["token_file"]).stat().st_mode & 0o077 == 0
        assert info["webhook_url"] == gitea.DEFAULT_WEBHOOK_URL
        assert f"--status-backend gitea:{info['url']}/platform/gpu-fleet" in out
        assert "export GITOPS_GPU_GIT_TOKEN=" in out
        forge = gitea.Forge.load(d)
        # The fleet repo's files are on main, over the auto_init commit.
        tree = forge.api("GET", f"/repos/{forge.repo}/contents/?ref=main")
        names = {entry["name"] for entry in tree}
        assert {"fleet.yaml", "base", "nodepools"} <= names
        assert "README.md" not in names or (paths.fleet_example() / "README.md").exists()
        hooks = forge.api("GET", f"/repos/{forge.repo}/hooks")
        assert [h["config"]["url"] for h in hooks] == [gitea.DEFAULT_WEBHOOK_URL]
        # The repo is private: a clone needs the token, which the controller takes from
        # GITOPS_GPU_GIT_TOKEN for its --repo (the product's own credentials_env).
        clone = tmp_path / "clone"
        anonymous = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        refused = subprocess.run(
            ["git", "clone", "-q", info["clone_url"], str(clone)],
            env=anonymous,
            capture_output=True,
            check=False,
            timeout=60,
        )
        assert refused.returncode != 0
        monkeypatch.setenv("GITOPS_GPU_GIT_TOKEN", Path(info["token_file"]).read_text().strip())
        env = {**anonymous, **credentials_env(info["clone_url"])[0]}
        subprocess.run(
            ["git", "clone", "-q", info["clone_url"], str(clone)], env=env, check=True, timeout=60
        )
        assert (clone / "fleet.yaml").exists()
        state = controlplane.State.load(d)
        assert state is not None and gitea.PROCESS in state.pids
        pid = state.pids[gitea.PROCESS]
    finally:
        assert main(["testbed", "down", "--dir", str(d)]) == 0
    assert not controlplane._alive(pid)
    assert not d.exists()
