"""The device plugin's part on a simulated host: what a KWOK node advertises under its config.

A real node's plugin (with its config-manager sidecar) reads the key its node label
``nvidia.com/device-plugin.config`` names (else ``devicePlugin.config.default``) from the
ConfigMap the ClusterPolicy names, and registers ``gpu.count`` x replicas of the resource;
GFD labels ``nvidia.com/gpu.replicas`` and ``nvidia.com/gpu.sharing-strategy``. This plays that
from the same ConfigMap the real operator mounts, so the ladder's device-plugin rung checks the
numbers a host really derives. Under a MIG layout of the mig-parted ConfigMap the
ClusterPolicy names, once mig-manager applied it, the node advertises the layout's MIG devices
as the cluster's ``mig.strategy`` names them. The fault ``plugin-stale`` is a plugin that never
takes a new config: the node keeps advertising what it did.

Pure apart from :func:`read_configs`: one node and the configs in, the patches out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gitops_gpu import kube, names
from gitops_gpu.fleet import mig_layouts
from gitops_gpu.fleet.sharing_promise import GPU_RESOURCE, SharingPromise, promise
from gitops_gpu_dev.testbed import operator_sim as sim

STALE_FAULT = "plugin-stale"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Configs:
    """The cluster's device-plugin ConfigMap, parsed: key -> config, and the default key; and
    the layouts of the mig-parted ConfigMap the ClusterPolicy names, with its MIG strategy."""

    default: str = ""
    keys: Mapping[str, object] = field(default_factory=dict)
    mig_layouts: Mapping[str, Any] = field(default_factory=dict)
    mig_strategy: str = "single"


def read_configs(client: kube.Client, namespace: str) -> Configs:
    cp = client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME) or {}
    spec = cp.get("spec") or {}
    config = (spec.get("devicePlugin") or {}).get("config") or {}
    name, default = str(config.get("name") or ""), str(config.get("default") or "")
    cm = client.get("v1", "ConfigMap", name, namespace) if name else None
    parsed: dict[str, object] = {}
    for key, text in ((cm or {}).get("data") or {}).items():
        try:
            parsed[key] = YAML(typ="safe").load(text)
        except YAMLError:
            parsed[key] = None  # the real plugin fails to start; here it advertises no sharing
    mig_name = str(((spec.get("migManager") or {}).get("config") or {}).get("name") or "")
    mig_cm = client.get("v1", "ConfigMap", mig_name, namespace) if mig_name else None
    layouts = mig_layouts.parse(((mig_cm or {}).get("data") or {}).get(mig_layouts.CONFIG_KEY))
    strategy = str((spec.get("mig") or {}).get("strategy") or "single")
    return Configs(default, parsed, layouts, strategy)


def advertised(count: int, found: SharingPromise | None) -> tuple[dict[str, str], dict[str, str]]:
    """(allocatable resources, GFD sharing labels) of a node with ``count`` GPUs."""
    if found is None:
        return {GPU_RESOURCE: str(count)}, {REPLICAS_LABEL: "1", STRATEGY_LABEL: "none"}
    resources = {found.resource: str(count * found.replicas)}
    if found.resource != GPU_RESOURCE:
        resources[GPU_RESOURCE] = "0"  # a renamed resource leaves the plain one empty
    return resources, {REPLICAS_LABEL: str(found.replicas), STRATEGY_LABEL: found.strategy}


def node_step(node: Obj, configs: Configs, fault: str | None) -> tuple[dict[str, str], Obj | None]:
    """(label patch, status patch or None) that make the node advertise its config."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    if fault == STALE_FAULT:
        return {}, None
    try:
        count = int(labels.get(names.GPU_COUNT_LABEL, "0"))
    except ValueError:
        return {}, None
    key = labels.get(names.DEVICE_PLUGIN_CONFIG_LABEL) or configs.default
    resources, gfd = advertised(count, promise(configs.keys.get(key)) if key else None)
    mig = _mig_resources(node, configs, count)
    if mig is not None:
        resources = mig
    label_patch = {k: v for k, v in gfd.items() if labels.get(k) != v}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    stale = {
        k: "0"
        for k in allocatable
        if k.startswith((GPU_RESOURCE, mig_layouts.MIG_RESOURCE_PREFIX)) and k not in resources
    }
    want = {**resources, **stale}
    if all(allocatable.get(k) == v for k, v in want.items()):
        return label_patch, None
    return label_patch, {"status": {"capacity": want, "allocatable": want}}


def _mig_resources(node: Obj, configs: Configs, count: int) -> dict[str, str] | None:
    """What the plugin advertises under the MIG layout mig-manager applied on the node (the
    simulator's record of it), when the layout is in the ConfigMap and alike on every GPU."""
    applied = ((node.get("metadata") or {}).get("annotations") or {}).get(sim.MIG_ANN)
    entries = configs.mig_layouts.get(applied or "")
    devices = mig_layouts.per_gpu(entries) if isinstance(entries, list) else None
    per_gpu = mig_layouts.advertised(devices, configs.mig_strategy) if devices else None
    if per_gpu is None:
        return None
    out = {r: str(n * count) for r, n in per_gpu.items()}
    out.setdefault(GPU_RESOURCE, "0")  # mixed: whole GPUs are no longer advertised
    return out
