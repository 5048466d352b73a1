"""The version matrix: driver branch vs the pool's GPUs, kernel module type, MIG profile.

The facts are data (gitops_gpu/data/version_matrix.yaml and mig_profiles.yaml, each row with
its source); this module only applies them. A pool's GPUs come from the live nodes its selector
matches (GFD labels) when a cluster is given, else from ``spec.gpu.product`` in pool.yaml.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.fleet.models import DriverSettings

Version = tuple[int, ...]
_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str | None) -> Version | None:
    """'580.126.20' -> (580, 126, 20); '580' -> (580,); a digest or garbage -> None."""
    m = _VERSION.match(text or "")
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _fmt(v: Version) -> str:
    return ".".join(map(str, v))


@dataclass(frozen=True)
class Matrix:
    architectures: list[dict[str, Any]]
    products: dict[str, dict[str, Any]]
    branches: dict[int, dict[str, Any]]
    auto_min: Version
    auto_source: str
    mig_profiles: dict[str, dict[str, Any]]
    mig_source: str
    mig_devices: dict[str, dict[str, int]]  # MIG model -> device profile -> most per GPU
    mig_models_pci: dict[str, tuple[str, ...]]  # MIG model -> its PCI device IDs
    cuda: dict[int, dict[str, Any]]  # CUDA major -> minimum driver row
    operator_releases: dict[str, dict[str, Any]]  # "v25.10.1" -> default driver row


def _data(name: str) -> Any:
    # package data next to the package (importlib.resources trips over editable installs)
    text = (Path(__file__).resolve().parents[1] / "data" / name).read_text(encoding="utf-8")
    return load_data_text(text)


def load_data_text(text: str) -> Any:
    """Our own data files, through libyaml: ruamel's pure parser took 0.12 s of a 0.75 s
    `check`. They are YAML 1.1-safe (no yes/on/octal scalars); a test holds the two loads equal.
    """
    if getattr(yaml, "__with_libyaml__", False):
        return yaml.load(text, Loader=yaml.CSafeLoader)  # the C *safe* loader
    return YAML(typ="safe", pure=True).load(text)  # pragma: no cover - PyYAML without libyaml


@functools.cache
def load_matrix() -> Matrix:
    vm, mig = _data("version_matrix.yaml"), _data("mig_profiles.yaml")
    auto = vm["kernel_module_type_auto"]
    return Matrix(
        architectures=vm["architectures"],
        products={p["product"]: p for p in vm["products"]},
        branches={int(b["branch"]): b for b in vm["branches"]},
        auto_min=parse_version(str(auto["min_driver"])) or (0,),
        auto_source=auto["source"],
        mig_profiles={p["name"]: p for p in mig["profiles"]},
        mig_source=mig["source_file"],
        mig_devices={m: {str(d): int(n) for d, n in v.items()} for m, v in mig["devices"].items()},
        mig_models_pci={m: tuple(v["pci_device_ids"]) for m, v in mig["models"].items()},
        cuda={int(c["major"]): c for c in vm["cuda"]},
        operator_releases={str(r["release"]): r for r in vm["gpu_operator_releases"]},
    )


@dataclass(frozen=True)
class GpuFacts:
    """What the matrix knows about one GPU product in a pool."""

    product: str
    architecture: str | None
    mig_model: str | None
    open_required: bool
    min_driver: Version | None
    seen_on: str  # "pool.yaml" or "node <name>"
    source: str = ""  # the product row's source (else the architecture row's)


def normalise_product(product: str) -> str:
    """GFD renames products under MIG-single (``-MIG-1g.10gb``) and sharing (``-SHARED``)."""
    return re.sub(r"-MIG-.*$", "", product.removesuffix("-SHARED"))


def arch_of_compute(major: int, minor: int) -> str | None:
    for arch in load_matrix().architectures:
        lo, hi = (tuple(int(x) for x in str(c).split(".")) for c in arch["compute"])
        if lo <= (major, minor) <= hi:
            return str(arch["name"])
    return None


def facts_for(product: str, seen_on: str, labels: Mapping[str, str] | None = None) -> GpuFacts:
    m = load_matrix()
    row = m.products.get(normalise_product(product))
    arch = row["architecture"] if row else None
    if arch is None and labels:
        try:
            arch = arch_of_compute(
                int(labels.get("nvidia.com/gpu.compute.major", "")),
                int(labels.get("nvidia.com/gpu.compute.minor", "0")),
            )
        except ValueError:
            arch = labels.get("nvidia.com/gpu.family") or None
    arch_row = next((a for a in m.architectures if a["name"] == arch), {})
    return GpuFacts(
        product=normalise_product(product),
        architecture=arch,
        mig_model=row.get("mig_model") if row else None,
        open_required=bool(
            (row or {}).get("open_kernel_modules") == "required"
            or arch_row.get("open_kernel_modules") == "required"
        ),
        min_driver=parse_version(str(row["min_driver"])) if row and row.get("min_driver") else None,
        seen_on=seen_on,
        source=str((row or arch_row).get("source", "")),
    )


def live_facts(nodes: Iterable[Mapping[str, Any]]) -> list[GpuFacts]:
    """One GpuFacts per distinct product among ``nodes`` (Node objects)."""
    out: dict[str, GpuFacts] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        product = labels.get(names.GPU_PRODUCT_LABEL)
        if product and normalise_product(product) not in out:
            name = (node.get("metadata") or {}).get("name", "?")
            out[normalise_product(product)] = facts_for(product, f"node {name}", labels)
    return list(out.values())


@dataclass(frozen=True)
class Issue:
    code: str
    message: str
    fix: str
    anchor: (
        str  # which field the finding points at: version | kernelModuleType | migConfig | product
    )
    source: str = ""  # the matrix row's source, carried into the finding


def check_driver(driver: DriverSettings, gpus: list[GpuFacts], today: datetime.date) -> list[Issue]:
    """Driver branch, kernel module type and end-of-life rules for one pool."""
    m = load_matrix()
    out: list[Issue] = []
    version = parse_version(driver.version)
    if version is None:
        out.append(
            Issue(
                "GG036",
                f"driver version {driver.version!r} is not a version number "
                "(a digest?): the version matrix cannot judge it",
                "pin a version like 580.126.20 to get the matrix checks",
                "version",
            )
        )
        return out
    branch = version[0]
    full = len(version) >= 2
    row = m.branches.get(branch)
    if row is None:
        out.append(
            Issue(
                "GG039",
                f"driver {driver.version}: branch R{branch} is in no known NVIDIA data center "
                "release (the version matrix lists every branch up to "
                f"R{max(m.branches)}): a typo, or a branch newer than this gitops-gpu",
                "pin a released driver (e.g. the GPU Operator release's default); if the "
                "branch is real, add it to gitops_gpu/data/version_matrix.yaml",
                "version",
            )
        )
    else:
        eol = row.get("eol")
        if eol is not None and (
            str(eol) == "past" or datetime.date.fromisoformat(str(eol)) <= today
        ):
            when = "" if str(eol) == "past" else f" since {eol}"
            out.append(
                Issue(
                    "GG035",
                    f"driver branch R{branch} is end of life{when} ({row['source']})",
                    "move the pool to a supported branch such as R580 (LTSB)",
                    "version",
                    row["source"],
                )
            )
    kmt = driver.kernel_module_type
    for gpu in gpus:
        arch = next((a for a in m.architectures if a["name"] == gpu.architecture), None)
        if arch is None:
            out.append(
                Issue(
                    "GG036",
                    f"GPU product {gpu.product} ({gpu.seen_on}) is not in the version matrix",
                    "add it to gitops_gpu/data/version_matrix.yaml",
                    "product",
                )
            )
            continue
        last, first = arch.get("last_branch"), arch.get("min_branch")
        if last is not None and branch > int(last):
            out.append(
                Issue(
                    "GG030",
                    f"driver R{branch} does not support {gpu.product} "
                    f"({gpu.architecture}, {gpu.seen_on}): R{last} is the last branch for "
                    f"{gpu.architecture} ({arch['source']})",
                    f"pin a R{last} driver for this pool",
                    "version",
                    arch["source"],
                )
            )
        too_old = first is not None and branch < int(first)
        if too_old:
            out.append(
                Issue(
                    "GG030",
                    f"driver R{branch} predates {gpu.architecture} support "
                    f"({gpu.product}, {gpu.seen_on}); R{first} is the first branch "
                    f"({arch['source']})",
                    f"use R{first} or newer",
                    "version",
                    arch["source"],
                )
            )
        if gpu.min_driver and full and version < gpu.min_driver and not too_old:
            out.append(
                Issue(
                    "GG030",
                    f"{gpu.product} ({gpu.seen_on}) needs driver >= "
                    f"{_fmt(gpu.min_driver)}, the pool pins {driver.version}",
                    f"use {_fmt(gpu.min_driver)} or newer",
                    "version",
                    gpu.source,
                )
            )
        needs_open = gpu.open_required
        if needs_open and kmt == "proprietary":
            out.append(
                Issue(
                    "GG031",
                    f"{gpu.product} ({gpu.architecture}, {gpu.seen_on}) runs only "
                    "the open GPU kernel modules, the pool sets kernelModuleType: proprietary",
                    "set driver.kernelModuleType: open (or auto)",
                    "kernelModuleType",
                    gpu.source if gpu.source and "open" in gpu.source else arch["source"],
                )
            )
        if arch.get("open_kernel_modules") == "impossible" and kmt == "open":
            out.append(
                Issue(
                    "GG032",
                    f"{gpu.product} ({gpu.architecture}, {gpu.seen_on}) cannot "
                    "run the open GPU kernel modules (Turing and newer only)",
                    "set driver.kernelModuleType: proprietary (or auto)",
                    "kernelModuleType",
                    arch["source"],
                )
            )
    if kmt == "auto" and (
        branch < m.auto_min[0] or (full and branch == m.auto_min[0] and version < m.auto_min)
    ):
        out.append(
            Issue(
                "GG033",
                f"kernelModuleType auto (the CRD default) needs driver >= "
                f"{_fmt(m.auto_min)}, the pool pins {driver.version}: the driver "
                f"container ignores it ({m.auto_source})",
                "set driver.kernelModuleType explicitly (proprietary or open), or use a "
                "newer driver",
                "kernelModuleType",
                m.auto_source,
            )
        )
    return out


def check_mig(profile: str, gpus: list[GpuFacts], custom_config: str) -> list[Issue]:
    """Is ``profile`` (nvidia.com/mig.config) valid for every GPU product of the pool?"""
    m = load_matrix()
    row = m.mig_profiles.get(profile)
    out: list[Issue] = []
    custom = f" (custom MIG ConfigMap '{custom_config}' is set: check it defines the profile)"
    if row is None:
        msg = f"MIG profile '{profile}' is not in mig-parted's default catalogue ({m.mig_source})"
        if custom_config:
            return [Issue("GG036", msg + custom, "make sure the ConfigMap defines it", "migConfig")]
        return [
            Issue(
                "GG034",
                msg,
                "use a profile from the catalogue (e.g. all-disabled, "
                "all-balanced) or set migManager.config.name to a ConfigMap that defines it",
                "migConfig",
                m.mig_source,
            )
        ]
    models: list[str] = list(row["models"])
    if "*" in models:
        return out
    out = _mig_per_gpu(profile, row, models, gpus)
    if custom_config:  # the ConfigMap may define the profile differently: only a note
        return [
            Issue("GG036", i.message + custom, i.fix, i.anchor) if i.code == "GG034" else i
            for i in out
        ]
    return out


def _mig_per_gpu(
    profile: str, row: dict[str, Any], models: list[str], gpus: list[GpuFacts]
) -> list[Issue]:
    m = load_matrix()
    out: list[Issue] = []
    for gpu in gpus:
        if not models:
            out.append(
                Issue(
                    "GG036",
                    f"MIG profile '{profile}' has no known GPU model upstream "
                    f"({m.mig_source} line {row['line']})",
                    "verify it on one node first",
                    "migConfig",
                )
            )
        elif gpu.mig_model is None:
            known = gpu.product in m.products
            what = "is not MIG-capable" if known else "is not in the version matrix"
            out.append(
                Issue(
                    "GG034" if known else "GG036",
                    f"MIG profile '{profile}' set, but {gpu.product} ({gpu.seen_on}) {what}",
                    "remove spec.migConfig from pool.yaml (or use all-disabled)",
                    "migConfig",
                    gpu.source,
                )
            )
        elif gpu.mig_model not in models:
            valid = sorted(
                n
                for n, r in m.mig_profiles.items()
                if gpu.mig_model in r["models"] or "*" in r["models"]
            )
            out.append(
                Issue(
                    "GG034",
                    f"MIG profile '{profile}' is not valid for {gpu.product} "
                    f"({gpu.mig_model}, {gpu.seen_on}); it is for {', '.join(models)} "
                    f"({m.mig_source} line {row['line']})",
                    f"use one of: {', '.join(valid)}",
                    "migConfig",
                    f"{m.mig_source} line {row['line']}",
                )
            )
    return out
