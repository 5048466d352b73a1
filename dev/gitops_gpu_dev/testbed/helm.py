"""Helm, built through the Go module proxy like the rest of the testbed's binaries.

The chart under ``deploy/helm`` is linted and rendered by the tests, and ``deploy/kustomize`` is
rendered from it (``python -m gitops_gpu_dev.deploy_render``). Rendering must be reproducible, so
one pinned Helm is built and cached per version (``<cache>/bin/helm-<version>/helm``) and any
other ``helm`` on PATH is ignored: a different Helm may render the same chart differently.
``go install helm.sh/helm/v3/cmd/helm@<version>`` works as is (Helm's go.mod has no replace
directives), so no wrapper module is needed.

    python -m gitops_gpu_dev.testbed.helm     # build if missing, print the path
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from gitops_gpu.errors import BuildError
from gitops_gpu_dev.testbed import build

HELM_VERSION = "v3.22.0"
HELM_MODULE = "helm.sh/helm/v3"


def helm_path() -> Path:
    return build.cache_dir() / "bin" / f"helm-{HELM_VERSION}" / "helm"


def find_helm() -> Path | None:
    """The cached pinned Helm, or None when it has not been built yet."""
    path = helm_path()
    return path if path.exists() else None


@contextlib.contextmanager
def _gobin(directory: Path) -> Iterator[None]:
    # build._run takes its environment from os.environ (as the kwok build does).
    previous = os.environ.get("GOBIN")
    os.environ["GOBIN"] = str(directory)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("GOBIN", None)
        else:
            os.environ["GOBIN"] = previous


def ensure_helm(progress: build.Progress = build._stderr) -> Path:
    """Return the pinned Helm, building it first if needed (about 2 minutes on 2 cores)."""
    dest = helm_path()
    if dest.exists():
        return dest
    root = build.cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent.with_name(dest.parent.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # Stamp the version: `helm version` otherwise says "v3.22" and charts see no patch level.
    ldflags = f"-s -w -X {HELM_MODULE}/internal/version.version={HELM_VERSION}"
    with _gobin(tmp):
        build._run(
            [
                build._go(),
                "install",
                "-v",
                "-trimpath",
                "-ldflags",
                ldflags,
                f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}",
            ],
            root,
            progress,
            f"helm {HELM_VERSION}",
        )
    if not (tmp / "helm").exists():
        raise BuildError(
            f"go install of helm {HELM_VERSION} left no binary in {tmp}",
            fix="run the command by hand and check GOBIN/GOFLAGS",
        )
    shutil.rmtree(dest.parent, ignore_errors=True)
    tmp.rename(dest.parent)
    return dest


def main() -> int:
    try:
        path = ensure_helm()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"helm: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
