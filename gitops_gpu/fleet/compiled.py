"""What a fleet commit compiles to: plain frozen values that every later layer consumes.

Per cluster: ONE ClusterPolicy (the GPU Operator ignores extra ones), one NVIDIADriver per
pool, and per pool the node labels that realise MIG, device-plugin config, workload type and
per-pool component switches. Manifests are plain dicts exactly as they will be applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gitops_gpu.fleet.sharing_promise import SharingPromise
from gitops_gpu.fleet.windows import Windows

Manifest = Mapping[str, Any]
# NodePool spec.unavailableNodes: how the gate counts a node that is NotReady, or cordoned by
# someone other than the GPU Operator's driver upgrade (components/node.py, docs/rollout.md).
UnavailableNodes = Literal["skip", "wait", "fail"]


@dataclass(frozen=True)
class SmokeTestSpec:
    image: str
    command: tuple[str, ...]
    gpus: int = 1
    timeout_seconds: float = 300.0
    nodes: int | None = None  # None: every node of the stage; N: the first N by name


@dataclass(frozen=True)
class MetricSpec:
    name: str
    query: str  # PromQL; $nodes and $pools are replaced by regexes of the stage's nodes/pools
    max: float | None = None
    min: float | None = None
    for_seconds: float = 0.0
    compare_to: str | None = None  # "baseline": against the nodes still on the previous commit
    tolerance: float = 0.1  # relative: 0.1 lets the stage be 10% worse than the baseline
    better: str = "lower"  # lower | higher


@dataclass(frozen=True)
class GateSpec:
    soak_seconds: float = 0.0
    max_unhealthy_nodes: int = 0
    approval_required: bool = False
    # Who may approve (forge logins; 'ssh-ed25519 ...' keys); none named: the controller's key.
    approvers: tuple[str, ...] = ()
    approver_keys: tuple[str, ...] = ()
    approver_teams: tuple[str, ...] = ()
    timeout_seconds: float | None = None
    smoke_test: SmokeTestSpec | None = None
    metrics: tuple[MetricSpec, ...] = ()
    on_no_data: str = "wait"  # wait | fail


@dataclass(frozen=True)
class StageSpec:
    name: str
    pools: tuple[str, ...]
    gate: GateSpec = field(default_factory=GateSpec)
    on_failure: str = "hold"  # hold | rollback
    # Set only on a stage's part in one cluster when its pools span clusters (rollout/span.py):
    # ``pools`` then holds that cluster's pools, recorded under gitops-gpu/stage/<name>/<cluster>.
    cluster: str | None = None
    # When it may adopt a commit or start a node batch: its windows and the fleet's freezes.
    windows: Windows = field(default_factory=Windows)


@dataclass(frozen=True)
class PoolTarget:
    name: str
    cluster: str
    stage: str
    node_selector: Mapping[str, str]
    max_unavailable: int | str  # an int or a percent string like "25%"
    gpu_product: str | None
    mig_config: str | None
    device_plugin_config: str | None
    # Labels gitops-gpu sets on every node of the pool (includes gitops-gpu.io/pool).
    node_labels: Mapping[str, str]
    # The pool's NVIDIADriver manifest (nvidia.com/v1alpha1), name = pool name.
    driver: Manifest
    driver_version: str | None
    # skip: counted, not judged (at most max_unavailable of them); wait: progressing; fail:
    # degraded.
    unavailable_nodes: UnavailableNodes = "skip"
    # New nodes carry names.UNVERIFIED_TAINT until verified (sync/verify_nodes.py).
    verify_new_nodes: bool = False
    # The fleet-repo file the pool's device-plugin config key was built from (fleet/sharing.py).
    device_plugin_file: str | None = None
    # What that config promises the node advertises (the device-plugin rung checks it).
    device_plugin_promise: SharingPromise | None = None
    # The fleet-repo file the pool's MIG layout was built from (fleet/mig_layouts.py), and the
    # MIG mode it sets (None: it differs per device, or the layout is the catalogue's).
    mig_layout_file: str | None = None
    mig_enabled: bool | None = None
    # What the device plugin advertises per GPU under that layout (resource -> count).
    mig_resources: Mapping[str, int] | None = None


@dataclass(frozen=True)
class ClusterTarget:
    name: str
    context: str | None
    cluster_policy: Manifest
    pools: Mapping[str, PoolTarget]
    # ConfigMaps built from the fleet repo that the ClusterPolicy names (fleet/sharing.py).
    config_maps: tuple[Manifest, ...] = ()


@dataclass(frozen=True)
class CompiledFleet:
    commit: str
    name: str
    stages: tuple[StageSpec, ...]
    clusters: Mapping[str, ClusterTarget]
    # fleet.yaml spec.allowMassPoolRemoval: this commit may remove most pools of a cluster.
    allow_mass_pool_removal: bool = False

    def pool(self, name: str) -> PoolTarget:
        for cluster in self.clusters.values():
            if name in cluster.pools:
                return cluster.pools[name]
        raise KeyError(name)

    def stage(self, name: str) -> StageSpec:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def stage_of(self, pool: str) -> StageSpec:
        for stage in self.stages:
            if pool in stage.pools:
                return stage
        raise KeyError(pool)
