"""Where the project finds its files: the repo root, its deploy/ CRDs, and ../shared/upstream."""

from __future__ import annotations

import os
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
