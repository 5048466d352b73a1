"""What the NVIDIA device plugin would reject (or silently ignore) in its config file.

The rules are the plugin's own, from NVIDIA/k8s-device-plugin api/config/v1 (config.go,
sharing.go, replicas.go, resources.go, flags.go; the operator v26.7.0 deploys plugin v0.20.0,
whose source the operator's vendor tree does not carry):

- ``version`` is ``v1`` (or empty): anything else is "unknown version";
- the file is read with sigs.k8s.io/yaml, which drops unknown keys without a word: a misspelt
  ``timeslicing`` is a config that parses and shares nothing, so unknown keys are errors here
  (unknown ``flags`` only warn: the flag set grows with each plugin release);
- ``sharing.timeSlicing`` and ``sharing.mps`` hold ``renameByDefault``,
  ``failRequestsGreaterThanOne`` (booleans) and ``resources``, which must be non-empty ("no
  resources specified");
- each resource needs ``name`` ("no resource name specified") and ``replicas`` ("no replicas
  specified"), an integer >= 2 ("number of replicas must be >= 2"); ``devices`` is ``all``, a
  count > 0 or a list of GPU indices, MIG indices (``0:1``) or UUIDs; a name is
  ``nvidia.com/<name>`` (the prefix is added when missing) with ``<name>`` a DNS subdomain;
- MPS shares full GPUs only: ``nvidia.com/gpu`` and no MIG devices ("sharing using MPS is not
  supported for MIG devices", cmd/nvidia-device-plugin/plugin-manager).

Pure: plain data in, issues (a path into the document, a message, a fix) out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from gitops_gpu.fleet.yamlio import PathKey

TOP = ("version", "flags", "resources", "sharing", "imex")
SHARING = ("timeSlicing", "mps")
REPLICATED = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
RESOURCE = ("name", "rename", "devices", "replicas")
FLAGS: dict[str, Any] = {
    "migStrategy": ("none", "single", "mixed"),
    "failOnInitError": bool,
    "restartOnDeviceUnhealthy": bool,
    "nvidiaDriverRoot": str,
    "nvidiaDevRoot": str,
    "gdsEnabled": bool,
    "mofedEnabled": bool,
    "mpsRoot": str,
    "useNodeFeatureAPI": bool,
    "deviceDiscoveryStrategy": ("auto", "nvml", "tegra"),
    "plugin": {
        "passDeviceSpecs": bool,
        "deviceListStrategy": ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri"),
        "deviceIDStrategy": ("uuid", "index"),
        "cdiAnnotationPrefix": str,
        "nvidiaCTKPath": str,
        "containerDriverRoot": str,
    },
    "gfd": {
        "oneshot": bool,
        "noTimestamp": bool,
        "sleepInterval": str,
        "outputFile": str,
        "machineTypeFile": str,
    },
}
PREFIX = "nvidia.com/"
# The CUDA MPS server's documented limit of client contexts per device (Volta and later).
MPS_MAX_CLIENTS = 48
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_DEVICE = re.compile(rf"^(\d+|\d+:\d+|GPU-{_UUID}|MIG-{_UUID}|MIG-GPU-{_UUID}/\d+/\d+)$")


class Issue(NamedTuple):
    path: PathKey
    message: str
    fix: str
    warning: bool = False


def resource_name(raw: str) -> str:
    return raw if raw.startswith(PREFIX) else PREFIX + raw


def _unknown(data: Mapping[str, Any], known: tuple[str, ...], at: PathKey) -> Iterator[Issue]:
    for key in data:
        if key not in known:
            where = ".".join(str(p) for p in at) or "the top level"
            yield Issue(
                (*at, key),
                f"unknown key '{key}' in {where}: the device plugin drops unknown keys "
                "silently, so this setting would never take effect",
                f"use one of: {', '.join(known)}",
            )


def _flags(data: Any, spec: Mapping[str, Any], at: PathKey) -> Iterator[Issue]:
    if not isinstance(data, dict):
        yield Issue(at, f"{'.'.join(map(str, at))} must be a mapping", "write key: value pairs")
        return
    for key, value in data.items():
        rule = spec.get(key)
        path = (*at, key)
        dotted = ".".join(map(str, path))
        if rule is None:
            yield Issue(
                path,
                f"flag {dotted} is not one the device plugin v0.20 knows: it is ignored",
                f"check the spelling; known: {', '.join(spec)}",
                warning=True,
            )
        elif isinstance(rule, dict):
            yield from _flags(value, rule, path)
        elif isinstance(rule, tuple):
            values = value if isinstance(value, list) and key == "deviceListStrategy" else [value]
            for v in values:
                if v not in rule:
                    yield Issue(
                        path,
                        f"{dotted}: {v!r} is not a valid value",
                        f"use one of: {', '.join(rule)}",
                    )
        elif not isinstance(value, rule) or (rule is not bool and isinstance(value, bool)):
            yield Issue(
                path,
                f"{dotted} must be a {rule.__name__}, not {value!r}",
                f"write a {rule.__name__}",
            )


def _devices(value: Any, at: PathKey) -> Iterator[Issue]:
    if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return
    if isinstance(value, list) and all(
        (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
        or (isinstance(v, str) and _DEVICE.match(v))
        for v in value
    ):
        return
    yield Issue(
        at,
        f"devices {value!r} is neither 'all', a count > 0 nor a list of GPU indices, MIG "
        "indices (0:1) or GPU/MIG UUIDs",
        "write devices: all (the default when left out)",
    )


def _resource(r: Any, at: PathKey, strategy: str) -> Iterator[Issue]:
    if not isinstance(r, dict):
        yield Issue(at, "a shared resource must be a mapping", "write name: and replicas:")
        return
    yield from _unknown(r, RESOURCE, at)
    name = r.get("name")
    if not isinstance(name, str) or not name:
        yield Issue(at, "no resource name specified", "add name: nvidia.com/gpu")
    else:
        full = resource_name(name)
        short = full[len(PREFIX) :]
        if not _SUBDOMAIN.match(short) or len(full) > 63:
            yield Issue(
                (*at, "name"),
                f"resource name '{full}' is not a valid Kubernetes resource name",
                "use nvidia.com/gpu or nvidia.com/mig-<profile>",
            )
        elif strategy == "mps" and full != PREFIX + "gpu":
            yield Issue(
                (*at, "name"),
                f"MPS shares full GPUs only (nvidia.com/gpu), not '{full}'",
                "share MIG devices by timeSlicing, or use name: nvidia.com/gpu",
            )
    replicas = r.get("replicas")
    if replicas is None:
        yield Issue(at, "no replicas specified", "add replicas: <2 or more>")
    elif not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
        yield Issue(
            (*at, "replicas"),
            f"replicas {replicas!r}: the device plugin requires an integer >= 2 (it crash-"
            "loops on anything else)",
            "set replicas to 2 or more, or remove the sharing block to advertise whole GPUs",
        )
    elif strategy == "mps" and replicas > MPS_MAX_CLIENTS:
        yield Issue(
            (*at, "replicas"),
            f"{replicas} MPS replicas per GPU: the MPS server takes at most "
            f"{MPS_MAX_CLIENTS} client contexts per device",
            f"use at most {MPS_MAX_CLIENTS} replicas",
            warning=True,
        )
    if "devices" in r:
        yield from _devices(r["devices"], (*at, "devices"))


def check(data: Any) -> list[Issue]:
    """Issues in one device-plugin config document."""
    if not isinstance(data, dict):
        return [Issue((), "the config must be a mapping", "start with version: v1")]
    out = list(_unknown(data, TOP, ()))
    version = data.get("version", "")
    if version not in ("", "v1"):
        out.append(Issue(("version",), f"unknown version: {version!r}", "set version: v1"))
    if "flags" in data:
        out.extend(_flags(data["flags"], FLAGS, ("flags",)))
    sharing = data.get("sharing")
    if sharing is None:
        return out
    if not isinstance(sharing, dict):
        return [*out, Issue(("sharing",), "sharing must be a mapping", "write timeSlicing:")]
    out.extend(_unknown(sharing, SHARING, ("sharing",)))
    for strategy in SHARING:
        block = sharing.get(strategy)
        at: PathKey = ("sharing", strategy)
        if block is None:
            continue
        if not isinstance(block, dict):
            out.append(Issue(at, f"sharing.{strategy} must be a mapping", "write resources:"))
            continue
        out.extend(_unknown(block, REPLICATED, at))
        for flag in ("renameByDefault", "failRequestsGreaterThanOne"):
            if flag in block and not isinstance(block[flag], bool):
                out.append(
                    Issue((*at, flag), f"{flag} must be true or false", "write true or false")
                )
        resources = block.get("resources")
        if not isinstance(resources, list) or not resources:
            out.append(
                Issue(
                    (*at, "resources"),
                    f"sharing.{strategy}: no resources specified",
                    "list the resources to share, e.g. - {name: nvidia.com/gpu, replicas: 4}",
                )
            )
            continue
        for i, r in enumerate(resources):
            out.extend(_resource(r, (*at, "resources", i), "mps" if strategy == "mps" else "ts"))
    return out


def shared(data: Any) -> tuple[str, list[tuple[str, int]]] | None:
    """The active sharing strategy and its (resource, replicas), as the plugin chooses it
    (sharing.go SharingStrategy: MPS wins when it has resources); None: no sharing."""
    sharing = data.get("sharing") if isinstance(data, dict) else None
    if not isinstance(sharing, dict):
        return None
    for strategy in ("mps", "timeSlicing"):
        block = sharing.get(strategy)
        resources = block.get("resources") if isinstance(block, dict) else None
        if isinstance(resources, list) and resources:
            pairs = [
                (resource_name(str(r.get("name"))), int(r["replicas"]))
                for r in resources
                if isinstance(r, dict)
                and isinstance(r.get("replicas"), int)
                and not isinstance(r.get("replicas"), bool)
            ]
            return strategy, pairs
    return None
