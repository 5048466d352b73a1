"""Preflight of custom MIG layouts kept in the fleet repo (fleet/mig_layouts.py).

- GG085: a layout file mig-parted would reject or misread. The rules are mig-parted's v1 spec
  (pkg/config/v1: ``version: v1``; ``mig-configs`` maps a name to a list of entries with
  ``devices`` (``all`` or GPU indices), ``mig-enabled`` (required), ``mig-devices`` (profile ->
  count) and an optional ``device-filter`` of PCI device IDs); unknown keys are errors, as the
  file is decoded leniently and a misspelt key would be a layout that does something else. A
  fleet-repo file holds exactly one layout, and a pool with its own file names no other.
- GG034: a layout the pool's GPU cannot take: a device profile its model does not have, more
  compute slices than one GPU has, MIG on a GPU without MIG.
- GG086 (warning): more of a profile on one GPU than any mig-parted catalogue layout places
  (placement rules may still allow it; the catalogue is what is known to work).
- GG087: on a cluster whose MIG ConfigMap is built from the fleet repo, a pool selecting a
  layout that is not in it (only ``all-disabled`` is built in): mig-manager would find no such
  layout and leave the node failed.

Data: the device profiles of each MIG model, from mig-parted's catalogue
(gitops_gpu/data/mig_profiles.yaml ``devices``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from gitops_gpu.fleet import mig_layouts
from gitops_gpu.fleet.compiled import ClusterTarget, PoolTarget
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.fleet.yamlio import Document, PathKey, dotted
from gitops_gpu.preflight import matrix
from gitops_gpu.preflight.findings import Finding

ENTRY_KEYS = ("devices", "mig-enabled", "mig-devices", "device-filter")
PCI_ID = re.compile(r"^0x[0-9A-Fa-f]{8}$")
SLICES = re.compile(r"^(\d+)g\.")


class Issue(NamedTuple):
    path: PathKey
    message: str
    fix: str


def _docs(repo: FleetRepo) -> dict[str, Document]:
    out = {d.file: d for d in repo.mig_layouts.values()}
    for src in repo.pools.values():
        if src.mig_layout_doc is not None:
            out[src.mig_layout_doc.file] = src.mig_layout_doc
    return out


def schema(data: Any) -> Iterator[Issue]:
    """What mig-parted would reject or misread in one fleet-repo layout file."""
    if not isinstance(data, Mapping):
        yield Issue((), "a MIG layout file is a mapping", "start it with 'version: v1'")
        return
    for key in data:
        if key not in ("version", "mig-configs"):
            yield Issue((key,), f"unknown key '{key}'", "keep version and mig-configs only")
    if data.get("version") != "v1":
        yield Issue(("version",), "version must be v1 (mig-parted's only)", "set version: v1")
    configs = data.get("mig-configs")
    if not isinstance(configs, Mapping) or len(configs) != 1:
        yield Issue(
            ("mig-configs",),
            "mig-configs must hold exactly one layout (a file is one layout)",
            "put each layout in its own file under configs/mig/",
        )
        return
    ((name, entries),) = configs.items()
    where: PathKey = ("mig-configs", name)
    if not isinstance(entries, list) or not entries:
        yield Issue(where, f"layout '{name}' is a non-empty list of entries", "add an entry")
        return
    for i, entry in enumerate(entries):
        yield from _entry(entry, (*where, i))


def _entry(entry: Any, at: PathKey) -> Iterator[Issue]:
    if not isinstance(entry, Mapping):
        yield Issue(at, "an entry is a mapping", "give it devices and mig-enabled")
        return
    for key in entry:
        if key not in ENTRY_KEYS:
            yield Issue(
                (*at, key),
                f"unknown key '{key}': mig-parted ignores it",
                f"use {', '.join(ENTRY_KEYS)}",
            )
    devices = entry.get("devices")
    if devices != "all" and not (
        isinstance(devices, list)
        and devices
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)
    ):
        yield Issue((*at, "devices"), "devices is 'all' or a list of GPU indices", "devices: all")
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        yield Issue((*at, "mig-enabled"), "mig-enabled (true or false) is required", "set it")
    wanted = entry.get("mig-devices")
    if wanted is not None:
        if not isinstance(wanted, Mapping) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in wanted.values()
        ):
            yield Issue(
                (*at, "mig-devices"),
                "mig-devices maps a profile (e.g. 1g.10gb) to a count",
                'write "1g.10gb": 7',
            )
        elif wanted and enabled is False:
            yield Issue(
                (*at, "mig-devices"),
                "mig-devices with mig-enabled: false: no MIG device is created",
                "set mig-enabled: true, or drop mig-devices",
            )
    found = entry.get("device-filter")
    ids = [found] if isinstance(found, str) else found
    if found is not None and not (
        isinstance(ids, list) and ids and all(isinstance(i, str) and PCI_ID.match(i) for i in ids)
    ):
        yield Issue(
            (*at, "device-filter"),
            "device-filter is a PCI device ID (0x233010DE) or a list of them",
            "copy the IDs from mig-parted's config-default.yaml",
        )


def config_files(repo: FleetRepo) -> Iterator[Finding]:
    """GG085 for every layout file, used or not."""
    for file, doc in sorted(_docs(repo).items()):
        for issue in schema(doc.data):
            yield Finding.make(
                "GG085",
                f"MIG layout: {issue.message}",
                file=file,
                line=doc.where(issue.path)[0],
                field=dotted(issue.path),
                fix=issue.fix,
            )


def fit(entries: list[Any], gpus: list[matrix.GpuFacts]) -> Iterator[tuple[str, str, str]]:
    """(code, message, fix) for each way the layout does not fit the pool's GPUs."""
    m = matrix.load_matrix()
    for gpu in gpus:
        ids = {i.lower() for i in (m.mig_models_pci.get(gpu.mig_model or "", ()))}
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            found = entry.get("device-filter")
            filters = [found] if isinstance(found, str) else found or []
            if filters and ids and not {str(f).lower() for f in filters} & ids:
                continue  # the entry is for other GPUs
            if entry.get("mig-enabled") is not True:
                continue
            if gpu.mig_model is None:
                if gpu.product in m.products:
                    yield (
                        "GG034",
                        f"the layout enables MIG, but {gpu.product} ({gpu.seen_on}) is not "
                        "MIG-capable",
                        "use mig-enabled: false, or no layout",
                    )
                continue
            yield from _devices(entry.get("mig-devices") or {}, gpu, m.mig_devices)


def _devices(
    wanted: Any, gpu: matrix.GpuFacts, table: Mapping[str, Mapping[str, int]]
) -> Iterator[tuple[str, str, str]]:
    known = table.get(gpu.mig_model or "", {})
    if not isinstance(wanted, Mapping) or not known:
        return
    slices = max((n for d, n in known.items() if d.startswith("1g.")), default=7)
    used = 0
    for device, count in wanted.items():
        if not isinstance(count, int):
            continue
        if device not in known:
            yield (
                "GG034",
                f"MIG profile '{device}' does not exist on {gpu.mig_model} ({gpu.seen_on}); "
                f"it has {', '.join(sorted(known))}",
                f"use a {gpu.mig_model} profile",
            )
            continue
        size = SLICES.match(str(device))
        used += int(size.group(1)) * count if size else 0
        if count > known[device]:
            yield (
                "GG086",
                f"{count} x {device} on one {gpu.mig_model}: no mig-parted catalogue layout "
                f"places more than {known[device]}",
                "check the layout on one node first (mig-parted apply --dry-run)",
            )
    if used > slices:
        yield (
            "GG034",
            f"the layout needs {used} compute slices per GPU, a {gpu.mig_model} has {slices}",
            "use fewer or smaller MIG devices",
        )


def pool_findings(
    repo: FleetRepo, cluster: ClusterTarget, target: PoolTarget, gpus: list[matrix.GpuFacts]
) -> Iterator[Finding]:
    """GG085 (own file and another name), GG087 (a layout the repo-built ConfigMap lacks) and
    GG034/GG086 (the pool's repo layout against its GPUs) for one pool."""
    name, cname = target.name, cluster.name
    built = any(cm["metadata"]["name"] == mig_layouts.CONFIGMAP_NAME for cm in cluster.config_maps)
    src = repo.pools[name]
    pool_doc = src.pool_doc
    chosen = src.model.spec.mig_config
    line = pool_doc.where(("spec", "migConfig"))[0]
    if src.mig_layout_doc is not None and chosen is not None:
        yield Finding.make(
            "GG085",
            f"pool '{name}' has its own {mig_layouts.MIG_FILE} and also names MIG layout "
            f"'{chosen}': its nodes get the file's layout",
            file=pool_doc.file,
            line=line,
            field="spec.migConfig",
            fix=f"remove spec.migConfig from pool.yaml, or the pool's {mig_layouts.MIG_FILE}",
            pool=name,
            cluster=cname,
        )
    if target.mig_layout_file is None:
        profile = target.mig_config
        if built and profile and profile != mig_layouts.DISABLED:
            yield Finding.make(
                "GG087",
                f"pool '{name}' selects MIG layout '{profile}', which is in no fleet-repo "
                f"layout, and this cluster's MIG ConfigMap ({mig_layouts.CONFIGMAP_NAME}) is "
                "built from the fleet repo: mig-manager would not find it",
                file=pool_doc.file,
                line=line,
                field="spec.migConfig",
                fix=f"add {mig_layouts.CONFIGS_DIR}/{profile}.yaml (mig-parted's format; the "
                "catalogue's layouts are in mig-parted's config-default.yaml)",
                pool=name,
                cluster=cname,
            )
        return
    doc = _docs(repo)[target.mig_layout_file]
    found = mig_layouts.layout(doc)
    if found is None:
        return  # GG085 says why
    for code, message, fix in fit(found[1], gpus):
        yield Finding.make(
            code,
            f"pool '{name}': {message}",
            file=doc.file,
            line=doc.where(("mig-configs", found[0]))[0],
            field=f"mig-configs.{found[0]}",
            fix=fix,
            pool=name,
            cluster=cname,
        )
