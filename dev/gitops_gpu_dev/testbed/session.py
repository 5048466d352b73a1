"""One call that brings a testbed up ready for use: binaries, processes, CRDs, fleet nodes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gitops_gpu import kube
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import build, controlplane, crds, nodes, operator, operator_build


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class
    state: controlplane.State
    client: kube.Client
    node_names: list[str]
    operator: str = "sim"  # "real": the GPU Operator runs as a process of the testbed

    @property
    def kubeconfig(self) -> str:
        return str(self.state.kubeconfig)

    @property
    def dir(self) -> Path:
        return Path(self.state.dir)


def start(
    directory: Path,
    *,
    fleet: Path | None = None,
    nodes_per_pool: int = 2,
    crds_dir: Path | None = None,
    die_with_parent: bool = False,
    progress: build.Progress = build._stderr,
    operator_mode: str = "sim",
    cluster: str | None = None,
) -> Testbed:
    # A fleet or --cluster that names no pool fails before anything starts.
    shapes = nodes.read_pool_shapes(fleet, cluster) if fleet is not None else []
    bins = build.ensure_binaries(progress)
    op = operator_build.ensure_operator(progress) if operator_mode == "real" else None
    state = controlplane.up(bins, directory, die_with_parent=die_with_parent, progress=progress)
    try:
        client = kube.Client.from_kubeconfig(str(state.kubeconfig))
        crd_paths = [crds_dir or paths.default_crds_dir()]
        if paths.own_crds_dir().exists():
            crd_paths.append(paths.own_crds_dir())
        installed = crds.install(client, crd_paths)
        progress(f"installed {len(installed)} CRDs")
        if op is not None:
            operator.start(state, client, op, die_with_parent=die_with_parent)
            progress(
                f"GPU Operator {op.version} running (log in {state.dir}/logs/gpu-operator.log)"
            )
        names: list[str] = []
        if fleet is not None:
            names = nodes.create_pool_nodes(client, shapes, nodes_per_pool)
            nodes.wait_ready(client, names)
            progress(f"{len(names)} fake GPU nodes Ready")
    except BaseException:
        controlplane.down(directory)
        raise
    return Testbed(state=state, client=client, node_names=names, operator=operator_mode)


def stop(directory: Path) -> bool:
    return controlplane.down(directory)
