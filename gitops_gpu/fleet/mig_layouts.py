"""Custom MIG layouts kept in the fleet repo, compiled into the one mig-parted ConfigMap the
cluster's ClusterPolicy names.

A pool holds its own layout as ``nodepools/<pool>/mig-config.yaml``, or names a shared one,
``configs/mig/<name>.yaml``, with pool.yaml ``spec.migConfig: <name>``. Each file is
mig-parted's format (``version: v1``, ``mig-configs:``) holding exactly one layout.

mig-manager reads one ConfigMap per cluster (``migManager.config.name``, key ``config.yaml``)
and applies the layout the node label ``nvidia.com/mig.config`` names. So compile builds, per
cluster, :data:`CONFIGMAP_NAME` whose ``config.yaml`` holds ``all-disabled`` (what the operator
labels MIG-capable nodes with by default) and a layout per pool and version, ``<pool>-<digest>``:
a change is a new layout name, which a node takes only when its pool's stage relabels it. The
engine keeps a pool's older layout while a node still names it (sync/mig_keys.py). Once one
pool's layout is in the repo, every layout the cluster's nodes select must be (preflight GG087):
mig-parted's default catalogue is in the operator's own ConfigMap, no longer read.

Pure: the loaded repo in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet.render import render_yaml
from gitops_gpu.fleet.sharing import ConfigSource, key_for
from gitops_gpu.fleet.yamlio import Document

MIG_FILE = "mig-config.yaml"
CONFIGS_DIR = "configs/mig"
CONFIGMAP_NAME = "gitops-gpu-mig-parted-config"
CONFIG_KEY = "config.yaml"
DISABLED = "all-disabled"
BUILTIN: dict[str, Any] = {DISABLED: [{"devices": "all", "mig-enabled": False}]}
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True)
class Compiled:
    configmap: dict[str, Any]
    keys: Mapping[str, str]  # pool -> its layout name (the node label's value)
    sources: Mapping[str, ConfigSource]  # pool -> the file its layout was built from
    enabled: Mapping[str, bool | None]  # pool -> MIG on (True), off (False), mixed (None)


def layout(doc: Document) -> tuple[str, list[Any]] | None:
    """The file's one layout, (name, device entries); None when it is not that shape (the
    preflight schema check, GG085, says why)."""
    data = doc.data
    configs = data.get("mig-configs") if isinstance(data, Mapping) else None
    if not isinstance(configs, Mapping) or len(configs) != 1:
        return None
    ((name, entries),) = configs.items()
    return (str(name), list(entries)) if isinstance(entries, list) else None


def mig_enabled(entries: list[Any]) -> bool | None:
    """MIG mode a layout sets on every device: True, False, or None when entries differ."""
    modes = {e.get("mig-enabled") for e in entries if isinstance(e, Mapping)}
    return modes.pop() if len(modes) == 1 and modes <= {True, False} else None


def per_gpu(entries: list[Any]) -> dict[str, int] | None:
    """The MIG devices each GPU gets, when one entry covers every GPU alike; else None."""
    if len(entries) != 1 or not isinstance(entries[0], Mapping):
        return None
    entry = entries[0]
    if entry.get("devices") != "all" or entry.get("device-filter") is not None:
        return None
    devices = entry.get("mig-devices") or {}
    if entry.get("mig-enabled") is not True or not isinstance(devices, Mapping):
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in devices.values()):
        return None
    return {str(p): int(n) for p, n in devices.items() if n} or None


def advertised(devices: Mapping[str, int], strategy: str) -> dict[str, int] | None:
    """What the device plugin advertises per GPU for those MIG devices under the cluster's
    ``mig.strategy`` (k8s-device-plugin): mixed, ``nvidia.com/mig-<profile>`` each ('+' in a
    profile becomes '.'); single, ``nvidia.com/gpu`` one per MIG device (one profile only);
    none, the whole GPU. None when the plugin would not advertise them (single, mixed sizes)."""
    if strategy == "mixed":
        return {MIG_RESOURCE_PREFIX + p.replace("+", "."): n for p, n in devices.items()}
    if strategy == "none":
        return {GPU_RESOURCE: 1}
    if len(devices) == 1:
        return {GPU_RESOURCE: next(iter(devices.values()))}
    return None


def render(layouts: Mapping[str, Any]) -> str:
    """The ConfigMap's config.yaml: deterministic, so a pass that changes nothing writes
    nothing."""
    return render_yaml({"version": "v1", "mig-configs": dict(sorted(layouts.items()))})


def parse(text: str | None) -> dict[str, Any]:
    """The layouts of a live config.yaml; {} for one that does not parse as mig-parted's."""
    from ruamel.yaml import YAML  # noqa: PLC0415
    from ruamel.yaml.error import YAMLError  # noqa: PLC0415

    try:
        data = YAML(typ="safe").load(text or "")
    except YAMLError:
        return {}
    configs = data.get("mig-configs") if isinstance(data, dict) else None
    return dict(configs) if isinstance(configs, dict) else {}


def build(sources: Mapping[str, ConfigSource], namespace: str) -> Compiled | None:
    """The cluster's mig-parted ConfigMap for the pools whose layout is in the repo."""
    keys: dict[str, str] = {}
    layouts: dict[str, Any] = dict(BUILTIN)
    enabled: dict[str, bool | None] = {}
    for pool, source in sorted(sources.items()):
        found = layout(source.doc)
        if found is None:
            continue
        entries = found[1]
        key = keys[pool] = key_for(pool, render_yaml(entries))
        layouts[key] = entries
        enabled[pool] = mig_enabled(entries)
    if not keys:
        return None
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            # No commit annotation: stages on different commits share this one object.
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
        },
        "data": {CONFIG_KEY: render(layouts)},
    }
    return Compiled(configmap, keys, {p: sources[p] for p in keys}, enabled)
