"""Where the project finds its files: the repo root, its deploy/ CRDs, and ../shared/upstream."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # dev/gitops_gpu_dev/paths.py


def shared_upstream() -> Path:
    """The upstream GPU Operator data (CRDs, samples), read in place, never copied."""
    env = os.environ.get("GITOPS_GPU_UPSTREAM")
    return Path(env) if env else PROJECT_ROOT.parent / "shared" / "upstream"


def default_crds_dir() -> Path:
    """The upstream CRDs beside a developer checkout: the testbed installs them and tests check
    against them. Runtime code never defaults here (preflight/crd_source.py)."""
    return shared_upstream() / "gpu-operator" / "crds"


def own_crds_dir() -> Path:
    return PROJECT_ROOT / "deploy" / "crds"


def fleet_example() -> Path:
    return PROJECT_ROOT / "fleet-repo-example"


def operator_source(version: str) -> Path:
    """A GPU Operator release's source tarball (with vendor/ and its chart), read in place."""
    return PROJECT_ROOT.parent / "shared" / "thirdparty" / f"gpu-operator-{version}.tar.gz"


def extract_operator_chart(version: str, dest: Path) -> Path:
    """The release's chart (deployments/gpu-operator) unpacked into ``dest``/gpu-operator, for
    a test's fleet repo."""
    prefix = "deployments/gpu-operator/"
    with tarfile.open(operator_source(version)) as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if not name.startswith(prefix) or not (member.isfile() or member.isdir()):
                continue
            target = dest / "gpu-operator" / name[len(prefix) :]
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fh = tar.extractfile(member)
            assert fh is not None
            target.write_bytes(fh.read())
    return dest / "gpu-operator"
