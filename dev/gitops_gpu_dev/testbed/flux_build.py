"""Build Flux's source-controller and kustomize-controller, the peer bench/controller.py
measures side by side with gitops-gpu. Only the benchmark needs them: `testbed build` does not.

Both v1.10.1 modules need Go 1.27 (``GOTOOLCHAIN=go1.27.3``: the go command fetches that
toolchain from the module proxy) and ``replace`` their ``./api`` submodule, which a module zip
leaves out; the copy drops that replace so the published api module of the same version is used.
Binaries are cached under ``~/.cache/gitops-gpu/bin/flux-<version>/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gitops_gpu.errors import BuildError
from gitops_gpu_dev.testbed.build import Progress, _go, _go_env, _run, cache_dir
from gitops_gpu_dev.testbed.gitea import _copy_writable

# v1.10.1 of both (what issue 19 named) does not build from this proxy: seven of
# source-controller's modules are refused (403), e.g. fluxcd/pkg/artifact v0.27.1. The newest
# that build: source-controller v1.8.5 (Flux v2.8; one patch substitute below) and
# kustomize-controller v1.9.5 (Flux v2.9; the proxy refuses kustomize-controller v1.8.x).
# Both speak source.toolkit.fluxcd.io/v1 GitRepository and artifacts over HTTP.
VERSIONS = {
    "source-controller": os.environ.get("GITOPS_GPU_FLUX_SOURCE_VERSION", "v1.8.5"),
    "kustomize-controller": os.environ.get("GITOPS_GPU_FLUX_KUSTOMIZE_VERSION", "v1.9.5"),
}
CONTROLLERS = tuple(VERSIONS)
FLUX_VERSION = " + ".join(f"{c} {v}" for c, v in VERSIONS.items())
GO_TOOLCHAIN = "go1.27.3"
# Patch releases the proxy refuses, replaced by the nearest one it serves (said in the bench).
SUBSTITUTES = {"github.com/fluxcd/pkg/artifact@v0.8.1": "v0.8.0"}


def _stderr(msg: str) -> None:
    print(f"[flux build] {msg}", file=sys.stderr, flush=True)


def _env() -> dict[str, str]:
    env = _go_env()
    env["GOTOOLCHAIN"] = GO_TOOLCHAIN
    return env


def binary(name: str) -> Path:
    return cache_dir() / "bin" / f"flux-{VERSIONS[name]}" / name


def src_dir(name: str) -> Path:
    return cache_dir() / "src" / f"{name}-{VERSIONS[name]}"


def find_flux() -> dict[str, Path] | None:
    """The cached binaries by controller name, or None when any is missing."""
    paths = {c: binary(c) for c in CONTROLLERS}
    return paths if all(p.exists() for p in paths.values()) else None


def module_source(name: str, progress: Progress = _stderr) -> Path:
    """The module's read-only source in the module cache (its CRDs live under config/crd)."""
    cmd = [_go(), "mod", "download", "-json", f"github.com/fluxcd/{name}@{VERSIONS[name]}"]
    progress(" ".join(cmd))
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=_env(), check=False, cwd=cache_dir()
    )
    info = json.loads(out.stdout) if out.stdout.strip() else {}
    if out.returncode != 0 or "Dir" not in info:
        raise BuildError(
            f"{' '.join(cmd)} failed (exit {out.returncode}): "
            f"{info.get('Error') or out.stderr[-1500:]}",
            fix="check that the Go module proxy is reachable and serves Go 1.27 toolchains",
        )
    return Path(info["Dir"])


def build_controller(name: str, progress: Progress = _stderr) -> Path:
    work = src_dir(name)
    work.parent.mkdir(parents=True, exist_ok=True)
    if not (work / ".copied").exists():
        _copy_writable(module_source(name, progress), work)
        _run(
            [_go(), "mod", "edit", f"-dropreplace=github.com/fluxcd/{name}/api"],
            work,
            progress,
            f"{name}: use the published api module",
            env=_env(),
        )
        required = (work / "go.mod").read_text()
        for module_at, version in SUBSTITUTES.items():
            module, _, wanted = module_at.partition("@")
            if f"{module} {wanted}" in required:
                _run(
                    [_go(), "mod", "edit", f"-replace={module}={module}@{version}"],
                    work,
                    progress,
                    f"{name}: {module} {wanted} is not served, {version} is",
                    env=_env(),
                )
        (work / ".copied").write_text(VERSIONS[name] + "\n")
    # No `go mod download`: it fetches test-only modules too, some of which the proxy refuses.
    dest = binary(name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(name + ".tmp")
    _run(
        [_go(), "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "."],
        work,
        progress,
        f"{name} {VERSIONS[name]}",
        env=_env(),
    )
    tmp.rename(dest)
    return dest


def ensure_flux(progress: Progress = _stderr) -> dict[str, Path]:
    """The Flux binaries, built the first time; BuildError (with the failing command's last
    lines) when they cannot be built."""
    for name in CONTROLLERS:
        if not binary(name).exists():
            start = time.monotonic()
            progress(f"building {name} {VERSIONS[name]} (first time: 10-25 minutes)")
            build_controller(name, progress)
            progress(f"{name}: built in {time.monotonic() - start:.0f}s")
    found = find_flux()
    assert found is not None
    return found


def crd_files() -> list[Path]:
    """The CRDs (GitRepository, Kustomization, ...) from each controller's module source."""
    files: list[Path] = []
    for name in CONTROLLERS:
        src = src_dir(name) / "config" / "crd" / "bases"
        files += sorted(src.glob("*.yaml"))
    return files


if __name__ == "__main__":
    for controller, path in ensure_flux().items():
        print(controller, path)
