"""The real forge for tests: ONE Gitea per test session (start 2-4 s), a fresh repo per test.

Gitea runs in its own directory next to the testbed's (``<testbed dir>-forge``), on 127.0.0.1,
and dies with the pytest process. A missing Gitea binary FAILS the tests that need it, with the
command that builds it: never a skip, in CI or not.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import controlplane, gitea

FORGE_DIR = Path(
    (os.environ.get("GITOPS_GPU_TESTBED_DIR") or str(paths.PROJECT_ROOT / ".testbed" / "pytest"))
    + "-forge"
)


@pytest.fixture(scope="session")
def gitea_binary() -> Path:
    """The cached Gitea binary; its absence fails the test with the command that builds it."""
    binary = gitea.find_gitea()
    if binary is None:
        pytest.fail(
            f"the Gitea binary is missing at {gitea.gitea_path()}: tests that need the real "
            "forge cannot run. Build it once with `gitops-gpu testbed build` (or `make binaries`; "
            "about 11 minutes cold on 2 cores)",
            pytrace=False,
        )
    return binary


@pytest.fixture(scope="session")
def gitea_server(gitea_binary: Path) -> Iterator[gitea.Forge]:
    """A running Gitea with an admin token (no repository)."""
    directory = FORGE_DIR.resolve()
    if (directory / "state.json").exists():
        controlplane.down(directory)  # left by a run killed hard
    directory.mkdir(parents=True, exist_ok=True)
    state = controlplane.State(dir=str(directory))
    state.save()
    try:
        forge = gitea.start(state, binary=gitea_binary, die_with_parent=True)
    except GitopsGpuError as exc:
        controlplane.down(directory)
        pytest.fail(f"Gitea could not start:\n{exc}", pytrace=False)
    try:
        yield forge
    finally:
        controlplane.down(directory)


@pytest.fixture
def gitea_repo_factory(gitea_server: gitea.Forge) -> Callable[..., gitea.Forge]:
    """Make a fresh repository (auto_init: main has one commit) on the session's Gitea."""

    def make(prefix: str = "repo", *, private: bool = False) -> gitea.Forge:
        name = f"{prefix}-{secrets.token_hex(4)}"
        return gitea.create_repo(gitea_server, name, private=private)

    return make
