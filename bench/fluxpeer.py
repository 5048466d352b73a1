"""The peer: Flux's source-controller and kustomize-controller, built by
``gitops_gpu_dev.testbed.flux_build`` and run as processes against the bench's testbed, each as its
own ServiceAccount, with the args of Flux's default Deployments (addresses on 127.0.0.1; no
leader election, see below; no notification-controller, so no events address and no Receiver:
polling only). Only the
intervals are set: the same as the controller's. Imported by bench/controller.py."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu import kube
from gitops_gpu_dev.testbed import controlplane, flux_build

NAMESPACE = "flux-system"
SOURCE_API = ("source.toolkit.fluxcd.io/v1", "GitRepository")
KUSTOMIZE_API = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")


@dataclass
class Flux:
    procs: dict[str, subprocess.Popen[bytes]]
    logs: Path

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]


def install_crds(client: kube.Client) -> int:
    yaml = YAML(typ="safe")
    files = flux_build.crd_files()
    for path in files:
        for doc in yaml.load_all(path.read_text()):
            if doc:
                client.apply(doc, field_manager="bench", force=True)
    return len(files)


def wait_established(client: kube.Client, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for plural in (
        "gitrepositories.source.toolkit.fluxcd.io",
        "kustomizations.kustomize.toolkit.fluxcd.io",
    ):
        while time.monotonic() < deadline:
            crd = client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", plural) or {}
            conds = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                break
            time.sleep(0.2)


@contextmanager
def running(binaries: dict[str, Path], kubeconfigs: dict[str, Path], work: Path) -> Iterator[Flux]:
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (work / "data").mkdir(exist_ok=True)  # source-controller refuses a missing storage path
    storage_port = controlplane.free_port()
    # The default Deployments' args but --enable-leader-election: outside a pod
    # controller-runtime cannot find a namespace for the Lease ("not running in-cluster").
    common = ["--watch-all-namespaces", "--log-level=info", "--log-encoding=json"]
    argv = {
        "source-controller": [
            *common,
            f"--storage-path={work / 'data'}",
            f"--storage-addr=127.0.0.1:{storage_port}",
            f"--storage-adv-addr=127.0.0.1:{storage_port}",
        ],
        "kustomize-controller": [*common],
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, args in argv.items():
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(work),
                "KUBECONFIG": str(kubeconfigs[name]),
                "RUNTIME_NAMESPACE": NAMESPACE,
                "TMPDIR": str(work),
            }
            with (logs / f"{name}.log").open("wb") as log:
                procs[name] = subprocess.Popen(
                    [
                        str(binaries[name]),
                        *args,
                        f"--metrics-addr=127.0.0.1:{controlplane.free_port()}",
                        f"--health-addr=127.0.0.1:{controlplane.free_port()}",
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        yield Flux(procs, logs)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def objects(url: str, branch: str, interval: str) -> list[dict[str, Any]]:
    """A GitRepository on the fleet remote's compiled branch and a Kustomization applying it."""
    return [
        {
            "apiVersion": SOURCE_API[0],
            "kind": SOURCE_API[1],
            "metadata": {"name": "fleet", "namespace": NAMESPACE},
            "spec": {"url": url, "interval": interval, "ref": {"branch": branch}},
        },
        {
            "apiVersion": KUSTOMIZE_API[0],
            "kind": KUSTOMIZE_API[1],
            "metadata": {"name": "fleet", "namespace": NAMESPACE},
            "spec": {
                "interval": interval,
                "path": "./",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "fleet"},
            },
        },
    ]


def _path(api: tuple[str, str], name: str = "") -> str:
    plural = api[1].lower().replace("repository", "repositorie") + "s"
    return f"/apis/{api[0]}/namespaces/{NAMESPACE}/{plural}" + (f"/{name}" if name else "")


def create(client: kube.Client, obj: dict[str, Any]) -> None:
    """kube.Client knows only the kinds gitops-gpu uses: Flux's go by path."""
    client.request("POST", _path((obj["apiVersion"], obj["kind"])), body=obj)


def applied_revision(client: kube.Client) -> str:
    """The revision the Kustomization last applied ("" before its first)."""
    try:
        ks = client.request("GET", _path(KUSTOMIZE_API, "fleet")) or {}
    except kube.NotFoundError:
        return ""
    return str((ks.get("status") or {}).get("lastAppliedRevision") or "")


def log_tail(flux: Flux, lines: int = 8) -> str:
    out = []
    for name in flux.procs:
        text = (flux.logs / f"{name}.log").read_text(errors="replace").splitlines()
        out += [f"{name}: {line[:300]}" for line in text[-lines:]]
    return "\n".join(out)
