"""Helm, the one renderer of GPU Operator charts.

gitops-gpu renders a cluster's ``gpuOperator`` chart with the ``helm`` binary itself, as Argo
CD does: a second template engine would disagree with Helm on some chart. The binary is
``$GITOPS_GPU_HELM``, else ``helm`` on PATH. The chart comes from an untrusted fleet repo, so
the render runs in its own process group under a deadline, with Helm's plugins off (a plugin
downloader would run code for a chart URL), and its output is capped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from gitops_gpu.errors import GitopsGpuError

ENV = "GITOPS_GPU_HELM"
MAX_OUTPUT = 32 << 20
STDERR_KEEP = 4000
FIX_MISSING = f"install Helm 3 (https://helm.sh) or set {ENV} to the helm binary"


class HelmError(GitopsGpuError):
    """Helm is missing, or refused or failed to render a chart (``stderr`` says why)."""

    def __init__(self, message: str, *, fix: str = "", stderr: str = "") -> None:
        super().__init__(message, fix=fix)
        self.stderr = stderr


def find() -> str | None:
    """The helm binary to run, or None when there is none."""
    env = os.environ.get(ENV)
    if env:
        return env if Path(env).is_file() else None
    return shutil.which("helm")


def template_args(
    chart: str,
    *,
    release: str,
    namespace: str,
    values: Path | None = None,
    version: str | None = None,
) -> list[str]:
    """``helm template`` for a chart: its CRDs included, the release's namespace set; a
    remote chart (oci://, https://) is pinned to ``version``."""
    args = ["template", release, chart, "--namespace", namespace, "--include-crds"]
    if values is not None:
        args += ["--values", str(values)]
    if version is not None and chart.startswith(("oci://", "https://")):
        args += ["--version", version]
    return args


def template(
    chart: str,
    *,
    cwd: Path,
    release: str,
    namespace: str,
    values: Path | None = None,
    version: str | None = None,
    timeout: float = 120.0,
) -> str:
    """The manifests Helm renders for ``chart`` (a path relative to ``cwd``, or remote)."""
    helm = find()
    if helm is None:
        raise HelmError("no helm binary to render the GPU Operator chart", fix=FIX_MISSING)
    args = template_args(
        chart, release=release, namespace=namespace, values=values, version=version
    )
    env = {**os.environ, "HELM_NO_PLUGINS": "1"}
    proc = subprocess.Popen(
        [helm, *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise HelmError(
            f"helm template {chart} ran past {timeout:g}s",
            fix="check the chart's templates for a runaway loop",
        ) from None
    text = err.decode("utf-8", "replace").strip()[-STDERR_KEEP:]
    if proc.returncode != 0:
        raise HelmError(
            f"helm template {chart} failed: {text or f'exit status {proc.returncode}'}",
            fix="fix the chart or its values so that `helm template` renders them",
            stderr=text,
        )
    if len(out) > MAX_OUTPUT:
        raise HelmError(
            f"helm template {chart} printed {len(out)} bytes, over {MAX_OUTPUT}",
            fix="a GPU Operator chart renders a few hundred KB: check the chart",
        )
    return out.decode("utf-8")
