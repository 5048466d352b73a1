"""What a device-plugin config promises a node will advertise, for the ladder to verify.

From k8s-device-plugin v0.20 (api/config/v1/replicas.go, what GPU Operator v26.7.0 deploys): a
``sharing.timeSlicing`` or ``sharing.mps`` resource with ``replicas: R`` over all devices turns
each GPU into R allocatable units of the resource; ``rename`` (or ``renameByDefault``, which
renames ``nvidia.com/gpu`` to ``nvidia.com/gpu.shared``) moves them to another name; GFD then
labels the node ``nvidia.com/gpu.replicas=R`` and ``nvidia.com/gpu.sharing-strategy``. Only the
whole-GPU resource over all devices gets a promise: a device subset or a MIG resource would need
the node's device list, which the config alone does not tell.

Pure: a parsed config in, a value out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"
STRATEGIES = (("timeSlicing", "time-slicing"), ("mps", "mps"))


@dataclass(frozen=True)
class SharingPromise:
    strategy: str  # time-slicing | mps: GFD's nvidia.com/gpu.sharing-strategy
    resource: str  # the name the replicas are advertised under
    replicas: int

    def describe(self) -> str:
        return f"{self.strategy} x{self.replicas} as {self.resource}"


def promise(config: object) -> SharingPromise | None:
    """The promise of one parsed config (a ConfigMap value, or a fleet-repo file); None when
    it promises nothing checkable (no sharing, a device subset, an ill-formed config)."""
    sharing = config.get("sharing") if isinstance(config, Mapping) else None
    if not isinstance(sharing, Mapping):
        return None
    for key, strategy in STRATEGIES:
        block = sharing.get(key)
        if isinstance(block, Mapping):
            found = _gpu_resource(block)
            if found is not None:
                return SharingPromise(strategy, *found)
    return None


def _gpu_resource(block: Mapping[str, Any]) -> tuple[str, int] | None:
    for res in block.get("resources") or ():
        if not isinstance(res, Mapping) or res.get("name") != GPU_RESOURCE:
            continue
        replicas = res.get("replicas")
        devices = res.get("devices", "all")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
            return None  # the plugin refuses it (preflight GG080)
        if devices != "all":
            return None
        rename = res.get("rename")
        if not rename and block.get("renameByDefault") is True:
            rename = GPU_RESOURCE + SHARED_SUFFIX
        return (str(rename) if rename else GPU_RESOURCE), replicas
    return None
