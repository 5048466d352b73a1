"""Driver compatibility beyond the GPU: the CUDA version a pool states, the GPU Operator release.

Rows live in gitops_gpu/data/version_matrix.yaml (``cuda``, ``branches[].cuda``,
``gpu_operator_releases``), each with its source; the source travels into the issue so
``check --format json`` can show where a rule comes from.
"""

from __future__ import annotations

from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight.matrix import Issue, Version, load_matrix, parse_version


def _fmt(v: Version) -> str:
    return ".".join(map(str, v))


def check_cuda(need: str, driver_version: str | None) -> list[Issue]:
    """Can ``driver_version`` run CUDA ``need`` ("12.8") applications?"""
    m = load_matrix()
    want = parse_version(need)
    version = parse_version(driver_version)
    if want is None or version is None:
        return []  # a digest or no version: GG036 already says the matrix cannot judge it
    major, branch = want[0], version[0]
    row = m.cuda.get(major)
    if row is None:
        return [
            Issue(
                "GG036",
                f"CUDA {need} is not in the version matrix",
                "add its minimum driver to gitops_gpu/data/version_matrix.yaml (cuda)",
                "cuda",
            )
        ]
    out: list[Issue] = []
    floor = parse_version(str(row["min_driver"])) or (0,)
    full = len(version) >= len(floor)
    if branch < floor[0] or (full and version < floor):
        out.append(
            Issue(
                "GG037",
                f"spec.gpu.cuda {need} needs driver >= {_fmt(floor)} (CUDA minor version "
                f"compatibility), the pool pins {driver_version}",
                f"use a driver >= {_fmt(floor)} (R580 runs CUDA 13.x and 12.x), or state the "
                "CUDA version the workloads really need",
                "version",
                str(row["source"]),
            )
        )
        return out
    branch_row = m.branches.get(branch) or {}
    top = parse_version(str(branch_row.get("cuda") or ""))
    if top is not None and top[0] < major:
        out.append(
            Issue(
                "GG037",
                f"driver R{branch} runs CUDA up to {branch_row['cuda']}, spec.gpu.cuda "
                f"states {need}",
                f"use a branch that runs CUDA {major}.x (see the cuda rows of the matrix)",
                "version",
                str(branch_row["source"]),
            )
        )
    return out


def check_operator(release: str, driver_version: str | None) -> list[Issue]:
    """Was ``driver_version``'s branch published with GPU Operator ``release``?"""
    m = load_matrix()
    key = release if release.startswith("v") else f"v{release}"
    row = m.operator_releases.get(key)
    version = parse_version(driver_version)
    if row is None:
        known = ", ".join(sorted(m.operator_releases))
        return [
            Issue(
                "GG036",
                f"GPU Operator {key} is not in the version matrix (known: {known}), so the "
                "driver is not checked against it",
                "add the release and its default driver (values.yaml driver.version) to "
                "gitops_gpu/data/version_matrix.yaml (gpu_operator_releases)",
                "gpuOperatorVersion",
            )
        ]
    default = parse_version(str(row["default_driver"])) or (0,)
    if version is None or version[0] <= default[0]:
        return []
    return [
        Issue(
            "GG038",
            f"driver R{version[0]} is newer than GPU Operator {key} was published with "
            f"(its default driver is {row['default_driver']})",
            f"upgrade the cluster's GPU Operator to a release whose default is R{version[0]}, "
            f"or stay on R{default[0]} until then",
            "version",
            str(row["source"]),
        )
    ]


def operator_version(repo: FleetRepo, cluster: str) -> str | None:
    """The cluster's declared GPU Operator release (fleet.yaml clusters[].gpuOperatorVersion)."""
    ref = next((c for c in repo.fleet.cluster_refs() if c.name == cluster), None)
    return ref.gpu_operator_version if ref else None


def operator_version_where(repo: FleetRepo, cluster: str) -> tuple[str, int]:
    doc = repo.fleet_doc
    refs = repo.fleet.spec.clusters or []
    index = next((i for i, c in enumerate(refs) if c.name == cluster), None)
    if index is None:
        return doc.file, doc.where(("spec",))[0]
    key: tuple[str | int, ...] = (
        ("gpuOperator", "version") if refs[index].gpu_operator else ("gpuOperatorVersion",)
    )
    return doc.file, doc.where(("spec", "clusters", index, *key))[0]
