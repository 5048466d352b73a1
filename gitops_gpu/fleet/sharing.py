"""Device-plugin sharing configs kept in the fleet repo, compiled into the one ConfigMap the
cluster's ClusterPolicy names.

A pool holds its own config as ``nodepools/<pool>/device-plugin.yaml``, or names a shared one,
``configs/device-plugin/<name>.yaml``, with pool.yaml ``spec.devicePluginConfig: <name>`` (or a
``devicePlugin.config.default`` in its ClusterPolicy). Each file is the device plugin's own
config format (``version: v1``, ``flags``, ``sharing.timeSlicing``/``sharing.mps``).

The operator reads one device-plugin ConfigMap per cluster (``devicePlugin.config.name``) and the
plugin's config manager picks a key of it by the node label ``nvidia.com/device-plugin.config``
(assets/state-device-plugin/0500_daemonset.yaml). So compile builds, per cluster, the ConfigMap
:data:`CONFIGMAP_NAME` with a key per pool and version of its config, ``<pool>-<digest>``: a
change is a new key, and a node moves to it only when its pool's stage relabels it. The engine
keeps a pool's old key while a node still names it (sync/sharing_keys.py).

Pure: the loaded repo in, values out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet.render import render_yaml
from gitops_gpu.fleet.yamlio import Document

DEVICE_PLUGIN_FILE = "device-plugin.yaml"
CONFIGS_DIR = "configs/device-plugin"
CONFIGMAP_NAME = "gitops-gpu-device-plugin-config"
DEFAULT_NAMESPACE = "gpu-operator"
# A key is also a label value (63 characters at most): the pool part is cut to fit the digest.
_POOL_PART = 63 - 1 - 8


@dataclass(frozen=True)
class ConfigSource:
    """Where a pool's device-plugin config comes from in the fleet repo."""

    name: str  # the config's name: the pool's own file is named after the pool
    doc: Document


@dataclass(frozen=True)
class Compiled:
    configmap: dict[str, Any]
    keys: Mapping[str, str]  # pool -> its key in the ConfigMap (the node label's value)
    sources: Mapping[str, ConfigSource]  # pool -> the file its key was built from


def pool_part(pool: str) -> str:
    return pool[:_POOL_PART].rstrip("-._")


def key_for(pool: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{pool_part(pool)}-{digest}"


def owners(key: str, pools: Mapping[str, object] | set[str] | frozenset[str]) -> set[str]:
    """The pools whose keys look like ``key`` (``<pool>-<digest>``)."""
    head, sep, digest = key.rpartition("-")
    if not sep or len(digest) != 8:
        return set()
    return {p for p in pools if pool_part(p) == head}


def content(source: ConfigSource) -> str:
    """The ConfigMap value: the file's document as deterministic YAML (comments dropped, so a
    comment-only edit is not a new key)."""
    return render_yaml(source.doc.data)


def build(sources: Mapping[str, ConfigSource], namespace: str) -> Compiled | None:
    """The cluster's device-plugin ConfigMap for the pools whose config is in the repo."""
    if not sources:
        return None
    keys: dict[str, str] = {}
    data: dict[str, str] = {}
    for pool, source in sorted(sources.items()):
        text = content(source)
        key = keys[pool] = key_for(pool, text)
        data[key] = text
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            # No commit annotation: stages on different commits write their own pools' keys
            # of this one object, and a commit stamp would flip between them on every pass.
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
        },
        "data": data,
    }
    return Compiled(configmap, keys, dict(sources))
