"""Keep the install manifests single-sourced: the Helm chart is the source, everything else is
rendered from it.

- ``deploy/crds/*.yaml`` (the NodeGPUReport CRD) is copied into the chart's ``crds/`` directory
  (Helm reads symlinks poorly, and a chart must be self-contained to be packaged);
- ``deploy/kustomize/`` is ``helm template`` of the chart with its defaults, one file per
  template, plus a ``kustomization.yaml``, so ``kubectl apply -k deploy/kustomize`` installs the
  same objects as ``helm install``.

    python -m gitops_gpu_dev.deploy_render          # rewrite both
    python -m gitops_gpu_dev.deploy_render --check  # exit 1 and list what is stale

tests/integration/test_deploy_chart.py runs the check, so a chart change without a re-render
fails the suite.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import build, helm

CHART = paths.PROJECT_ROOT / "deploy" / "helm" / "gitops-gpu"
KUSTOMIZE = paths.PROJECT_ROOT / "deploy" / "kustomize"
RELEASE = NAMESPACE = "gitops-gpu"
# Only the chart's kubeVersion check reads it; no template depends on it.
KUBE_VERSION = build.KUBERNETES_VERSION.lstrip("v")
# A placeholder: kustomize users set the real repo by patching ConfigMap gitops-gpu-controller.
KUSTOMIZE_VALUES = ("fleet.repo=https://git.example.com/platform/gpu-fleet.git",)
HEADER = (
    "# Generated from deploy/helm/gitops-gpu by `python -m gitops_gpu_dev.deploy_render`."
    " Do not edit.\n"
)
_SOURCE = re.compile(r"^# Source: gitops-gpu/(crds|templates)/(\S+)$", re.MULTILINE)
_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)


def crd_copies(chart: Path = CHART) -> dict[Path, Path]:
    """deploy/crds/<file> -> <chart>/crds/<file>."""
    return {src: chart / "crds" / src.name for src in sorted(paths.own_crds_dir().glob("*.yaml"))}


def helm_template(binary: Path, *args: str, chart: Path = CHART) -> str:
    cmd = [
        str(binary),
        "template",
        RELEASE,
        str(chart),
        "--namespace",
        NAMESPACE,
        "--include-crds",
        "--kube-version",
        KUBE_VERSION,
        *args,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise GitopsGpuError(
            f"helm template failed (exit {out.returncode}): {out.stderr.strip()}",
            fix=f"fix the chart under {chart}; `{' '.join(cmd)}` reproduces it",
        )
    return out.stdout


def split(rendered: str) -> dict[str, str]:
    """Group a `helm template` stream by the template it came from: file name -> YAML."""
    docs: dict[str, list[str]] = {}
    for doc in _SEPARATOR.split(rendered):
        if not doc.strip():
            continue
        match = _SOURCE.search(doc)
        if match is None:
            raise GitopsGpuError(
                f"a rendered document has no '# Source:' line: {doc.strip()[:80]!r}",
                fix="render with `helm template` (it adds the line to every document)",
            )
        prefix = "crd-" if match.group(1) == "crds" else ""
        name = prefix + match.group(2).replace("/", "-")
        docs.setdefault(name, []).append(doc.strip("\n") + "\n")
    return {name: HEADER + "---\n" + "---\n".join(parts) for name, parts in docs.items()}


def kustomize_files(binary: Path) -> dict[str, str]:
    """What deploy/kustomize must contain: file name -> text."""
    files = split(helm_template(binary, *(f"--set={v}" for v in KUSTOMIZE_VALUES)))
    resources = "".join(f"  - {name}\n" for name in files)
    files["kustomization.yaml"] = (
        HEADER
        + "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        + "resources:\n"
        + resources
    )
    return files


def stale(binary: Path) -> list[str]:
    """Every way the chart's crds/ and deploy/kustomize differ from a fresh render."""
    problems = []
    for src, dst in crd_copies().items():
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            problems.append(f"{dst.relative_to(paths.PROJECT_ROOT)} differs from {src.name}")
    want = kustomize_files(binary)
    have = {p.name for p in KUSTOMIZE.glob("*.yaml")}
    for name in sorted(have - set(want)):
        problems.append(f"deploy/kustomize/{name} is not rendered from the chart")
    for name, text in want.items():
        path = KUSTOMIZE / name
        if not path.exists():
            problems.append(f"deploy/kustomize/{name} is missing")
        elif path.read_text() != text:
            problems.append(f"deploy/kustomize/{name} differs from the chart's render")
    return problems


def write(binary: Path) -> list[Path]:
    """Copy the CRDs into the chart, then render deploy/kustomize from it."""
    written = []
    for src, dst in crd_copies().items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        written.append(dst)
    files = kustomize_files(binary)
    KUSTOMIZE.mkdir(parents=True, exist_ok=True)
    for old in KUSTOMIZE.glob("*.yaml"):
        if old.name not in files:
            old.unlink()
    for name, text in files.items():
        (KUSTOMIZE / name).write_text(text)
        written.append(KUSTOMIZE / name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gitops_gpu_dev.deploy_render")
    parser.add_argument("--check", action="store_true", help="only report what is stale")
    args = parser.parse_args(argv)
    try:
        binary = helm.ensure_helm()
        if args.check:
            problems = stale(binary)
            for problem in problems:
                print(problem, file=sys.stderr)
            return 1 if problems else 0
        for path in write(binary):
            print(path.relative_to(paths.PROJECT_ROOT))
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
