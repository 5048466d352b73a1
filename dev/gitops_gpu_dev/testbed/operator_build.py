"""Build the real NVIDIA GPU Operator from its source tarball (offline, with its vendor/).

The source is ``../shared/thirdparty/gpu-operator-v26.7.0.tar.gz`` unless
``GITOPS_GPU_OPERATOR_SRC`` names another tarball or an unpacked checkout. The Go module proxy
only serves a 2025 pseudo-version without per-NVIDIADriver upgrade policies, so the proxy is
never asked (``GOPROXY=off``, ``-mod=vendor``). The result is cached per version under
``~/.cache/gitops-gpu/bin/gpu-operator-<key>/``: the ``gpu-operator`` binary and ``opt/``, a real
copy of the asset tree the operator reads from the hard-coded ``/opt/gpu-operator`` (``assets/``
at its root and ``manifests/`` under it). :mod:`gitops_gpu_dev.testbed.operator` bind-mounts
``opt/`` over ``/opt`` in a private mount namespace.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from gitops_gpu.errors import BuildError
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import build

OPERATOR_VERSION = "v26.7.0"
SRC_ENV = "GITOPS_GPU_OPERATOR_SRC"
_ASSET_DIR = "gpu-operator"  # the operator reads /opt/gpu-operator/...


@dataclass(frozen=True)
class OperatorBuild:
    binary: Path
    opt: Path  # bind-mounted over /opt: holds gpu-operator/<state>/ and gpu-operator/manifests/
    version: str

    @property
    def assets(self) -> Path:
        return self.opt / _ASSET_DIR


def default_source() -> Path:
    return (
        paths.PROJECT_ROOT.parent
        / "shared"
        / "thirdparty"
        / f"gpu-operator-{OPERATOR_VERSION}.tar.gz"
    )


def source(progress: build.Progress = build._stderr) -> Path:
    """The tarball or checkout to build: $GITOPS_GPU_OPERATOR_SRC if it exists, else the default."""
    default = default_source()
    env = os.environ.get(SRC_ENV)
    if env:
        chosen = Path(env).expanduser()
        if chosen.exists():
            return chosen.resolve()
        if default.exists():
            progress(f"{SRC_ENV}={env} does not exist; building the default {default}")
            return default
    elif default.exists():
        return default
    raise BuildError(
        "the GPU Operator source was not found: "
        f"{SRC_ENV}={env or '(unset)'} and the default {default} do not exist",
        fix=f"put gpu-operator-{OPERATOR_VERSION}.tar.gz (with vendor/) at {default}, "
        f"or set {SRC_ENV} to a tarball or an unpacked checkout of the operator",
    )


def _cache_key(src: Path) -> str:
    if src == default_source():
        return OPERATOR_VERSION
    digest = hashlib.sha256(str(src).encode())
    if src.is_file():
        with src.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    else:  # a checkout: its Go sources and assets decide
        for sub in ("go.mod", "cmd", "controllers", "internal", "api", "assets", "manifests"):
            for file in sorted((src / sub).rglob("*")) if (src / sub).is_dir() else [src / sub]:
                if file.is_file():
                    st = file.stat()
                    digest.update(f"{file}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"src-{digest.hexdigest()[:12]}"


def _unpack(tarball: Path, into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    try:
        with tarfile.open(tarball) as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(
            f"cannot unpack {tarball}: {exc}",
            fix=f"check the tarball, or point {SRC_ENV} elsewhere",
        ) from exc
    if (into / "go.mod").exists():
        return into
    tops = [p for p in into.iterdir() if (p / "go.mod").exists()]
    if len(tops) != 1:
        raise BuildError(
            f"{tarball} holds no gpu-operator module (no go.mod at its top or one level down)",
            fix=f"point {SRC_ENV} at the operator's source tarball",
        )
    return tops[0]


def _check_tree(root: Path, origin: Path) -> None:
    need = ("go.mod", "vendor/modules.txt", "cmd/gpu-operator", "assets", "manifests")
    missing = [rel for rel in need if not (root / rel).exists()]
    if missing:
        raise BuildError(
            f"{origin} is not a GPU Operator source tree with vendor/: "
            f"missing {', '.join(missing)}",
            fix=f"use the release tarball ({default_source()}) or a checkout after `go mod vendor`",
        )


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        CGO_ENABLED="0", GOFLAGS="-mod=vendor -buildvcs=false", GOPROXY="off", GOTOOLCHAIN="local"
    )
    return env


def ensure_operator(progress: build.Progress = build._stderr) -> OperatorBuild:
    """Return the cached operator build, building it from source the first time."""
    src = source(progress)
    key = _cache_key(src)
    dest = build.cache_dir() / "bin" / f"gpu-operator-{key}"
    found = OperatorBuild(dest / "gpu-operator", dest / "opt", key)
    if found.binary.exists() and (found.assets / "manifests").is_dir():
        return found
    work = build.cache_dir() / "src" / f"gpu-operator-{key}"
    root = _unpack(src, work) if src.is_file() else src
    _check_tree(root, src)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ldflags = f"-s -w -X github.com/NVIDIA/gpu-operator/internal/info.version={key}"
    progress(f"building the GPU Operator ({key}) from {src} (first time: about 2 minutes)")
    try:
        build._run(
            [
                build._go(),
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                ldflags,
                "-o",
                str(tmp / "gpu-operator"),
                "./cmd/gpu-operator",
            ],
            root,
            progress,
            f"gpu-operator {key}",
            env=_go_env(),
        )
        # Real copies: symlinked asset directories made the ClusterPolicy controller panic.
        shutil.copytree(root / "assets", tmp / "opt" / _ASSET_DIR, symlinks=False)
        shutil.copytree(root / "manifests", tmp / "opt" / _ASSET_DIR / "manifests", symlinks=False)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if src.is_file():
            shutil.rmtree(work, ignore_errors=True)
    return found
