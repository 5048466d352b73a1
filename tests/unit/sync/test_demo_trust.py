"""`demo --verify-signatures`: the demo signs its commits with its own key and trusts only it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from signers import require_tools

from gitops_gpu_dev.demo import DemoRepo
from gitops_gpu_dev.demo_trust import DemoTrust


def test_demo_commits_are_signed_and_trusted(tmp_path: Path) -> None:
    require_tools()
    said: list[str] = []
    trust = DemoTrust(tmp_path, said.append)
    try:
        repo = DemoRepo(tmp_path)
        trust.sign_commits(repo)
        signed = repo.commit("signed by the demo key")
        verdict = trust.verifier.verify(repo.bare, signed)
        assert verdict.trusted, verdict
        assert "Platform Team (demo)" in verdict.reason
        (repo.work / "fleet.yaml").write_text((repo.work / "fleet.yaml").read_text() + "\n")
        subprocess.run(
            ["git", "-c", "commit.gpgsign=false", "commit", "-qam", "unsigned"],
            cwd=repo.work,
            check=True,
        )
        subprocess.run(["git", "push", "-q", "origin", "main"], cwd=repo.work, check=True)
        unsigned = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo.work, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert trust.verifier.verify(repo.bare, unsigned).reason == "unsigned"
        assert said and "signature verification on" in said[0]
    finally:
        trust.close()
    agents = subprocess.run(
        ["pgrep", "-af", "gpg-agent"], capture_output=True, text=True, check=False
    )
    assert str(trust.home) not in agents.stdout  # the demo's signing agent is stopped
