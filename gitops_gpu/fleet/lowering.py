"""Per-pool ClusterPolicy fields the GPU Operator can realise per node: lowered to node labels.

The operator honours one ClusterPolicy per cluster, but for some fields it (or the operand it
deploys) reads a per-node label first. When the pools of a cluster disagree on such a field,
compile does not refuse it (GG020): it takes the field out of what must agree and gives each
pool's nodes the label that says the same thing. The operator v26.7.0 source backs each row
(docs/compile-model.md has the table):

- ``devicePlugin.config.default`` -> ``nvidia.com/device-plugin.config=<key>``: the device
  plugin's config manager selects its config by that node label (assets/state-device-plugin/
  0500_daemonset.yaml, ``NODE_LABEL``); ``default`` only applies to nodes without the label.
  ``devicePlugin.config.name`` (the one ConfigMap holding every key) stays cluster-wide.
- ``migManager.config.default`` -> ``nvidia.com/mig.config=<profile>``: the MIG manager applies
  the profile a node's label names (controllers/state_manager.go ``migConfigLabelKey``; the
  operator only writes the default onto MIG-capable nodes that have no label).
- ``sandboxWorkloads.defaultWorkload`` -> ``nvidia.com/gpu.workload.config=<workload>``
  (controllers/state_manager.go ``getWorkloadConfig``: the node label first, then the default).
- ``<operand>.enabled: false`` in some pools -> the ClusterPolicy enables the operand and those
  pools' nodes get ``nvidia.com/gpu.deploy.<component>=false``: each operand DaemonSet selects
  nodes with its deploy label ``true``, and the operator keeps a label already set
  (controllers/state_manager.go ``gpuStateLabels``, ``addGPUStateLabels``).

Pure: merged policy documents in, stripped documents and labels out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet import plain
from gitops_gpu.fleet.policy import MISSING
from gitops_gpu.fleet.yamlio import PathKey

# ClusterPolicy spec path -> the node label that realises it per node.
LABEL_FIELDS: dict[PathKey, str] = {
    ("devicePlugin", "config", "default"): names.DEVICE_PLUGIN_CONFIG_LABEL,
    ("migManager", "config", "default"): names.MIG_CONFIG_LABEL,
    ("sandboxWorkloads", "defaultWorkload"): names.WORKLOAD_CONFIG_LABEL,
}
# The ConfigMaps the label-selected keys live in: one per cluster.
CONFIG_NAMES: dict[PathKey, str] = {
    ("devicePlugin", "config", "name"): names.DEVICE_PLUGIN_CONFIG_LABEL,
    ("migManager", "config", "name"): names.MIG_CONFIG_LABEL,
}
# ClusterPolicy operand key -> (gpu.deploy.<component>, enabled when not set): the defaults of
# the operator's IsEnabled() methods (api/nvidia/v1/clusterpolicy_types.go).
OPERANDS: dict[str, tuple[str, bool]] = {
    "toolkit": ("container-toolkit", True),
    "devicePlugin": ("device-plugin", True),
    "dcgm": ("dcgm", True),
    "dcgmExporter": ("dcgm-exporter", True),
    "gfd": ("gpu-feature-discovery", True),
    "migManager": ("mig-manager", True),
    "nodeStatusExporter": ("node-status-exporter", False),
    "sandboxDevicePlugin": ("sandbox-device-plugin", False),
    "kataSandboxDevicePlugin": ("kata-sandbox-device-plugin", False),
    "vfioManager": ("vfio-manager", False),
    "vgpuManager": ("vgpu-manager", False),
    "vgpuDeviceManager": ("vgpu-device-manager", False),
    "kataManager": ("kata-manager", False),
    "ccManager": ("cc-manager", False),
}
# Cluster-scoped fields people commonly set per pool, and the per-node mechanism that was
# considered for them (GG020 says it).
CONSIDERED: dict[PathKey, str] = {
    ("devicePlugin", "config", "name"): (
        "considered nvidia.com/device-plugin.config: it selects a key inside the one ConfigMap "
        "devicePlugin.config.name, so the ConfigMap name is cluster-wide; put every pool's key "
        "in one ConfigMap"
    ),
    ("migManager", "config", "name"): (
        "considered nvidia.com/mig.config: it selects a profile inside the one ConfigMap "
        "migManager.config.name; put every pool's profile in one ConfigMap"
    ),
    ("mig", "strategy"): (
        "considered node labels: none exists, the device plugin and GFD read mig.strategy from "
        "their DaemonSet env (controllers/object_controls.go)"
    ),
    ("vgpuDeviceManager", "config", "default"): (
        "considered nvidia.com/vgpu.config: read by the vGPU device manager itself, not by the "
        "operator v26.7.0, and not managed by gitops-gpu yet"
    ),
    ("ccManager", "defaultMode"): (
        "considered nvidia.com/cc.mode: read by the CC manager itself, not by the operator "
        "v26.7.0, and not managed by gitops-gpu yet"
    ),
    ("driver", "enabled"): (
        "considered nvidia.com/gpu.deploy.driver: the driver is per pool already (an "
        "NVIDIADriver each); driver.enabled switches the operator's driver state cluster-wide"
    ),
}
NO_MECHANISM = (
    "no per-node mechanism in the operator v26.7.0: one DaemonSet spec for every node; with "
    "updateStrategy OnDelete its pods still move stage by stage"
)


def considered(path: PathKey) -> str:
    """What GG020 says about a cluster-scoped field (``path`` without the leading "spec")."""
    for prefix, text in CONSIDERED.items():
        if path[: len(prefix)] == prefix:
            return text
    return NO_MECHANISM


@dataclass(frozen=True)
class Lowered:
    docs: Mapping[str, dict[str, Any]]  # the merged documents without the lowered fields
    labels: Mapping[str, Mapping[str, str]]  # pool -> node labels realising them
    spec_patch: Mapping[PathKey, Any]  # ClusterPolicy spec values the lowering needs


def _get(doc: Mapping[str, Any], path: PathKey) -> Any:
    node: Any = doc.get("spec")
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return MISSING
        node = node[key]
    return node


def _dropped(doc: dict[str, Any], path: PathKey) -> dict[str, Any]:
    """``doc`` without ``spec.<path>`` and the maps that leaves empty (so "config: {default:
    x}" in one pool and nothing in another agree once the default is lowered). ``doc`` is not
    changed: only the maps on the path are new, the rest is shared with it."""
    spec = doc.get("spec")
    kept = _without(spec, path)
    return doc if kept is spec else {**doc, "spec": kept}


def _without(node: Any, path: PathKey) -> Any:
    if not isinstance(node, dict) or path[0] not in node:
        return node
    out = dict(node)
    if len(path) == 1:
        out.pop(path[0])
        return out
    child = _without(node[path[0]], path[1:])
    if child is node[path[0]]:
        return node
    if child == {}:
        out.pop(path[0])
    else:
        out[path[0]] = child
    return out


def lower(docs: Mapping[str, dict[str, Any]]) -> Lowered:
    """Lower the fields the pools of one cluster disagree on and the operator can realise per
    node. Fields the pools agree on stay in the ClusterPolicy as they are."""
    out = dict(docs)  # each pool's document, copied only where a field is dropped
    labels: dict[str, dict[str, str]] = {p: {} for p in docs}
    patch: dict[PathKey, Any] = {}
    for path, label in LABEL_FIELDS.items():
        values = {p: _get(d, path) for p, d in docs.items()}
        if len({repr(v) for v in values.values()}) <= 1:
            continue
        if not all(v is MISSING or isinstance(v, str) for v in values.values()):
            continue  # ill-typed: left to the schema check and GG020
        for pool, value in values.items():
            out[pool] = _dropped(out[pool], path)
            if value not in (MISSING, ""):  # "" selects nothing: the operand's own fallback
                labels[pool][label] = value
    for path, label in CONFIG_NAMES.items():
        # One ConfigMap for the cluster: once the keys inside it are chosen per node, a pool
        # that names none (or "", the operator's "no ConfigMap") takes the one the others
        # name. Its nodes carry no key label, so the operand falls back to its built-in
        # config (the device plugin runs with FALLBACK_STRATEGIES=empty,
        # controllers/object_controls.go), as it did with no ConfigMap.
        values = {p: _get(d, path) for p, d in docs.items()}
        named = {repr(v) for v in values.values() if v not in (MISSING, "")}
        unnamed = any(v in (MISSING, "") for v in values.values())
        lowered = any(label in lab for lab in labels.values())
        if lowered and unnamed and len(named) == 1:
            value = next(v for v in values.values() if v not in (MISSING, ""))
            patch[path] = plain.copy(value)  # the views share the base: not theirs to give
            for pool in docs:
                out[pool] = _dropped(out[pool], path)
    for key, (component, default) in OPERANDS.items():
        path = (key, "enabled")
        values = {p: _get(d, path) for p, d in docs.items()}
        if not all(v is MISSING or isinstance(v, bool) for v in values.values()):
            continue
        effective = {p: default if v is MISSING else v for p, v in values.items()}
        if len(set(effective.values())) <= 1:
            continue
        patch[path] = True
        for pool, on in effective.items():
            out[pool] = _dropped(out[pool], path)
            if not on:
                labels[pool][names.DEPLOY_LABEL_PREFIX + component] = "false"
    return Lowered(out, labels, patch)


def apply_patch(spec: dict[Any, Any], patch: Mapping[PathKey, Any]) -> None:
    for path, value in patch.items():
        node = spec
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[path[-1]] = value
