"""`gitops-gpu demo --verify-signatures`: the demo's commits are signed by a key generated for
the demo, the controller trusts only that key, and an unsigned driver bump pushed in the middle
of the story is held back: preflight fails with "untrusted commit: unsigned", no stage ever sees
it, and the next signed commit rolls forward as usual."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.rollout.status import PREFLIGHT_CONTEXT, stage_context
from gitops_gpu.sync.trust import Verifier

if TYPE_CHECKING:
    from gitops_gpu.controller import Controller
    from gitops_gpu_dev.demo import DemoRepo

Say = Callable[[str], None]
SIGNER = "Platform Team (demo) <platform-team@example.com>"


class DemoTrust:
    """A signing key for the demo repo and the Verifier that trusts it (KEYS = its public key)."""

    def __init__(self, workdir: Path, say: Say) -> None:
        gpg = shutil.which("gpg")
        if gpg is None:
            raise GitopsGpuError(
                "demo --verify-signatures needs gpg", fix="install gnupg, or drop the flag"
            )
        self.home = workdir / "signer"
        self.home.mkdir(mode=0o700)
        env = {**os.environ, "GNUPGHOME": str(self.home)}

        def run(*args: str) -> str:
            out = subprocess.run(
                [gpg, "--batch", *args], env=env, capture_output=True, text=True, check=True
            )
            return out.stdout

        run("--passphrase", "", "--quick-gen-key", SIGNER, "ed25519", "sign")
        listing = run("--with-colons", "--list-keys")
        self.fpr = next(ln.split(":")[9] for ln in listing.splitlines() if ln.startswith("fpr:"))
        keys = workdir / "KEYS"
        keys.mkdir()
        exported = run("--armor", "--export", self.fpr)
        (keys / "platform-team.asc").write_text(exported)
        # git signs through this wrapper, so the demo never touches the user's own keyring.
        self.program = self.home / "gpg"
        self.program.write_text(f'#!/bin/sh\nGNUPGHOME="{self.home}" exec {gpg} "$@"\n')
        self.program.chmod(0o755)
        self.verifier = Verifier(keys, "head")
        self._env = env
        atexit.register(self.close)  # git starts a gpg-agent for signing: stop it with the demo
        say(f"== signature verification on: KEYS = {keys} (OpenPGP {self.fpr[-16:]})")

    def close(self) -> None:
        gpgconf = shutil.which("gpgconf")
        if gpgconf is not None:
            subprocess.run([gpgconf, "--kill", "all"], env=self._env, check=False)
        self.verifier.close()

    def sign_commits(self, repo: DemoRepo) -> None:
        for key, value in (
            ("gpg.program", str(self.program)),
            ("user.signingkey", self.fpr),
            ("commit.gpgsign", "true"),
        ):
            subprocess.run(["git", "config", key, value], cwd=repo.work, check=True)

    def unsigned_held_back(
        self, repo: DemoRepo, ctl: Controller, stages: list[str], say: Say
    ) -> bool:
        """Push an unsigned bump; True when preflight refused it and no stage adopted it."""
        say("\n== someone pushes an UNSIGNED driver bump to 580.159.03")
        subprocess.run(["git", "config", "commit.gpgsign", "false"], cwd=repo.work, check=True)
        try:
            repo.edit_yaml("base/clusterpolicy.yaml", _bump("580.159.03"))
            sha = repo.commit("driver: bump to 580.159.03 (unsigned)")
        finally:
            subprocess.run(["git", "config", "commit.gpgsign", "true"], cwd=repo.work, check=True)
        ctl.trigger()
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            status = ctl.backend.latest(sha, PREFLIGHT_CONTEXT)
            if status is not None:
                break
            time.sleep(0.5)
        time.sleep(3)  # a few more passes: none may adopt it
        refused = status is not None and status.state == "failure"
        untouched = all(ctl.backend.latest(sha, stage_context(s)) is None for s in stages)
        say(
            f"   {PREFLIGHT_CONTEXT} on {sha[:7]}: "
            f"{status.state + ': ' + status.description if status else 'none'}"
        )
        say(f"   stages {'never saw' if untouched else 'SAW'} {sha[:7]}; the fleet stays put")
        return refused and untouched


def _bump(version: str) -> Callable[[dict[str, object]], None]:
    def change(doc: dict[str, object]) -> None:
        driver = doc["spec"]["driver"]  # type: ignore[index]
        driver["version"] = version

    return change
