"""Shared fixtures. `testbed` brings ONE real control plane up for the whole session.

It is started lazily (only when an integration/e2e test asks for it) and torn down even when
tests fail or the run is interrupted; its processes also die with the pytest process.
With CI=true a testbed that cannot start fails the tests with the reason; it never skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from forge_fixtures import (  # noqa: F401 (fixtures: the real Gitea)
    gitea_binary,
    gitea_repo_factory,
    gitea_server,
)
from prometheus_fixtures import prombed  # noqa: F401 (fixture: a real Prometheus)

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.preflight import crd_source
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import session

# Preflight's CRDs default to nothing in an installed copy; tests check against the upstream
# ones in ../shared (as the README's commands do), and subprocesses inherit this.
os.environ.setdefault(crd_source.ENV, str(paths.default_crds_dir()))

# A fixed directory: a run killed hard leaves state here that the next run cleans. Two runs at
# once need two directories: GITOPS_GPU_TESTBED_DIR.
TESTBED_DIR = Path(
    os.environ.get("GITOPS_GPU_TESTBED_DIR") or paths.PROJECT_ROOT / ".testbed" / "pytest"
)


@pytest.fixture(scope="session")
def testbed() -> Iterator[session.Testbed]:
    try:
        tb = session.start(TESTBED_DIR, die_with_parent=True, progress=lambda _m: None)
    except GitopsGpuError as exc:
        pytest.fail(
            f"the local control plane could not start (run `make binaries`):\n{exc}", pytrace=False
        )
    try:
        yield tb
    finally:
        tb.client.close()
        session.stop(TESTBED_DIR)


@pytest.fixture(scope="session")
def upstream() -> Path:
    root = paths.shared_upstream()
    if not root.exists():
        pytest.fail(
            f"upstream data missing at {root}: tests read GPU Operator CRDs and samples "
            "from ../shared/upstream (set GITOPS_GPU_UPSTREAM to override)",
            pytrace=False,
        )
    return root


class FleetRemote:
    """A fleet repo as users have it: a bare remote on disk and a clone to commit from."""

    def __init__(self, root: Path, source: Path) -> None:
        self.bare = root / "fleet.git"
        self.work = root / "fleet-work"
        _git(root, "init", "-q", "--bare", "-b", "main", str(self.bare))
        shutil.copytree(source, self.work)
        _git(self.work, "init", "-q", "-b", "main")
        _git(self.work, "config", "user.email", "platform@example.com")
        _git(self.work, "config", "user.name", "platform")
        _git(self.work, "remote", "add", "origin", str(self.bare))
        self.commit("initial fleet")

    @property
    def url(self) -> str:
        return str(self.bare)

    def commit(self, message: str, edit: Callable[[Path], None] | None = None) -> str:
        if edit is not None:
            edit(self.work)
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-q", "--allow-empty", "-m", message)
        _git(self.work, "push", "-q", "--force", "origin", "main")
        return _git(self.work, "rev-parse", "HEAD")


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def fleet_remote(tmp_path: Path) -> FleetRemote:
    return FleetRemote(tmp_path, paths.fleet_example())


@pytest.fixture
def clean_cluster(testbed: session.Testbed) -> Iterator[session.Testbed]:
    """A cluster with no ClusterPolicy, NVIDIADriver or fake node left from another test."""
    _clean(testbed)
    yield testbed
    _clean(testbed)


def _clean(tb: session.Testbed) -> None:
    for api, kind in (
        ("nvidia.com/v1alpha1", "NVIDIADriver"),
        ("nvidia.com/v1", "ClusterPolicy"),
        ("gitops-gpu.io/v1alpha1", "NodeGPUReport"),
        ("v1", "Node"),
    ):
        try:
            items = tb.client.list(api, kind)["items"]
        except GitopsGpuError:
            continue  # CRD not installed
        for item in items:
            tb.client.delete(api, kind, item["metadata"]["name"])
    # The controller's ledger remembers the last head it followed: another test's repo would
    # read as rewritten history. (The seal key Secret may stay: any key seals.)
    for item in tb.client.list("v1", "ConfigMap")["items"]:
        meta = item["metadata"]
        if meta["name"].startswith(
            ("gitops-gpu-ledger", "gitops-gpu-device-plugin", "gitops-gpu-mig-parted")
        ):
            tb.client.delete("v1", "ConfigMap", meta["name"], meta["namespace"])
    # A GPU cluster has the operator's namespace (its install makes it): the repo-built
    # sharing ConfigMaps are applied there.
    tb.client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        field_manager="gitops-gpu-testbed",
        force=True,
    )
