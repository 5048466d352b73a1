"""Load a fleet repo from disk into validated models, with file:line:column on every error.

Layout (docs/fleet-repo.md)::

    fleet.yaml                          kind: Fleet
    <spec.base>                         optional base ClusterPolicy
    nodepools/<pool>/pool.yaml          kind: NodePool
    nodepools/<pool>/clusterpolicy.yaml optional ClusterPolicy, merged over the base
    nodepools/<pool>/device-plugin.yaml optional: the pool's device-plugin config
    configs/device-plugin/<name>.yaml   optional: a device-plugin config pools name

Every problem found is collected (one broken pool does not hide another's errors) and raised
together as :class:`RepoLoadError`; each entry is a :class:`RepoError` carrying a finding code.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import mig_layouts, plain, sharing
from gitops_gpu.fleet.merge import merge, merge_shared, prune_nulls
from gitops_gpu.fleet.models import ClusterPolicyDoc, Fleet, NodePool, check_label_value
from gitops_gpu.fleet.problems import (
    REF_CODE,
    SHAPE_CODE,
    STAGE_CODE,
    YAML_CODE,
    RepoError,
    RepoLoadError,
    shape_errors,
)
from gitops_gpu.fleet.yamlio import Document, load_file

FLEET_FILE = "fleet.yaml"
POOLS_DIR = "nodepools"
POOL_FILE = "pool.yaml"
POLICY_FILE = "clusterpolicy.yaml"
POOL_FILES = (POOL_FILE, POLICY_FILE, sharing.DEVICE_PLUGIN_FILE, mig_layouts.MIG_FILE)

M = TypeVar("M", bound=BaseModel)
__all__ = ["FleetRepo", "PoolSource", "RepoError", "RepoLoadError", "load_repo"]


@dataclass(frozen=True)
class PoolSource:
    name: str
    model: NodePool
    pool_doc: Document
    policy_doc: Document | None
    device_plugin_doc: Document | None = None  # nodepools/<pool>/device-plugin.yaml
    mig_layout_doc: Document | None = None  # nodepools/<pool>/mig-config.yaml


@dataclass(frozen=True)
class FleetRepo:
    root: Path
    fleet: Fleet
    fleet_doc: Document
    base_doc: Document | None
    pools: dict[str, PoolSource] = field(default_factory=dict)
    # configs/device-plugin/<name>.yaml by name (fleet/sharing.py)
    device_plugin_configs: dict[str, Document] = field(default_factory=dict)
    # configs/mig/<name>.yaml by name (fleet/mig_layouts.py)
    mig_layouts: dict[str, Document] = field(default_factory=dict)

    def stage_of(self, pool: str) -> str:
        for stage in self.fleet.spec.stages:
            if pool in stage.pools:
                return stage.name
        raise KeyError(pool)

    def merged_policy(self, pool: str) -> dict[str, Any]:
        """The pool's ClusterPolicy document: base with the pool's file merged over it (a new
        object on each call, the caller's to change)."""
        src = self.pools[pool].policy_doc
        overlay = src.data if src else {}
        if not isinstance(overlay, dict):
            return merge(self.base_doc.data if self.base_doc else {}, overlay)  # type: ignore[no-any-return]
        return plain.copy(merge_shared(self._pruned_base, overlay))

    def policy_view(self, pool: str) -> dict[str, Any]:
        """The pool's merged ClusterPolicy, built once and shared: for checks that only read
        it (preflight reads each pool's policy several times). Never modify it: what the pool's
        file leaves alone is the base's own maps and lists, shared by every pool's view."""
        view = self._views.get(pool)
        if view is None:
            src = self.pools[pool].policy_doc
            overlay = src.data if src else {}
            view = (
                merge_shared(self._pruned_base, overlay)
                if isinstance(overlay, dict)
                else self.merged_policy(pool)
            )
            self._views[pool] = view
        return view

    @cached_property
    def _views(self) -> dict[str, dict[str, Any]]:
        return {}

    @cached_property
    def _pruned_base(self) -> dict[str, Any]:
        # pruned once: every pool starts from a plain copy of it
        base = self.base_doc.data if self.base_doc else {}
        return prune_nulls(base) if isinstance(base, dict) else {}

    def cluster_pools(self) -> dict[str, list[str]]:
        """cluster name -> its pools, sorted."""
        out: dict[str, list[str]] = {c.name: [] for c in self.fleet.cluster_refs()}
        for name, src in sorted(self.pools.items()):
            out.setdefault(src.model.spec.cluster, []).append(name)
        return out


def load_repo(path: Path) -> FleetRepo:
    """Load and validate the fleet repo at ``path``; raise RepoLoadError listing every problem."""
    errors: list[RepoError] = []
    root = Path(path)
    fleet_doc = _load(root / FLEET_FILE, root, errors, required=True)
    fleet = _validate(Fleet, fleet_doc, errors) if fleet_doc else None
    base_doc = _load_base(root, fleet, fleet_doc, errors) if fleet and fleet_doc else None
    pools = dict(_load_pools(root, base_doc, errors))
    configs = dict(_load_configs(root, sharing.CONFIGS_DIR, errors))
    layouts = dict(_load_configs(root, mig_layouts.CONFIGS_DIR, errors))
    if fleet is None or fleet_doc is None:
        raise RepoLoadError(errors)
    _check_stages(fleet, fleet_doc, pools, errors)
    _check_clusters(fleet, fleet_doc, pools, errors)
    if errors:
        raise RepoLoadError(errors)
    return FleetRepo(root, fleet, fleet_doc, base_doc, pools, configs, layouts)


def _load_configs(
    root: Path, where: str, errors: list[RepoError]
) -> Iterator[tuple[str, Document]]:
    folder = root / where
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        rel = path.relative_to(root).as_posix()
        if path.suffix not in (".yaml", ".yml"):
            if path.suffix == ".json" or path.is_dir():
                errors.append(
                    RepoError(
                        f"{path.name} in {where}/ is not read: configs there are <name>.yaml files",
                        code=REF_CODE,
                        file=rel,
                        fix=f"write it as {where}/<name>.yaml",
                    )
                )
            continue
        try:
            check_label_value("name", path.stem)
        except ValueError as exc:
            errors.append(
                RepoError(
                    f"config name '{path.stem}' cannot be a node label value: {exc}",
                    code=REF_CODE,
                    file=rel,
                    fix="rename the file to letters, digits, '-', '_' or '.' (63 at most)",
                )
            )
            continue
        doc = _load(path, root, errors, required=False)
        if doc is not None:
            yield path.stem, doc


def _wrap(exc: FleetError, code: str) -> RepoError:
    msg = str(exc.args[0]) if exc.args else str(exc)
    # FleetError prefixes "file:line:col: field: " to its message; keep the bare message.
    prefix = (
        exc.file + (f":{exc.line}" if exc.line else "") + (f":{exc.column}" if exc.column else "")
    )
    msg = msg.removeprefix(f"{prefix}: ") if prefix else msg
    return RepoError(
        msg,
        code=code,
        file=exc.file,
        line=exc.line,
        column=exc.column,
        field=exc.field,
        fix=exc.fix,
    )


def _load(
    path: Path,
    root: Path,
    errors: list[RepoError],
    *,
    required: bool,
    listed: Collection[str] | None = None,
) -> Document | None:
    """``listed``: the names in ``path``'s folder, when the caller has listed it (a stat per
    file name asked about was a third of loading 2,000 pools)."""
    if (path.name not in listed) if listed is not None else not os.path.lexists(path):
        if required:
            errors.append(
                RepoError(
                    f"missing {path.relative_to(root).as_posix()}",
                    code=REF_CODE,
                    file=path.relative_to(root).as_posix(),
                    fix="create it (see fleet-repo-example/ for a complete repo)",
                )
            )
        return None
    try:
        doc = load_file(path, root)
    except FleetError as exc:
        errors.append(_wrap(exc, YAML_CODE))
        return None
    if not isinstance(doc.data, dict):
        errors.append(
            RepoError.at(
                doc,
                (),
                "the document must be a mapping",
                code=SHAPE_CODE,
                fix="write the object as 'key: value' pairs",
            )
        )
        return None
    return doc


def _validate(model: type[M], doc: Document, errors: list[RepoError]) -> M | None:
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        errors.extend(shape_errors(model, doc, exc))
        return None


def _load_base(
    root: Path, fleet: Fleet, fleet_doc: Document, errors: list[RepoError]
) -> Document | None:
    rel = fleet.spec.base
    if not rel:
        return None
    target = root / rel
    try:
        inside = "\0" not in rel and root.resolve() in (root / rel).resolve().parents
    except (RuntimeError, OSError, ValueError):  # a symlink loop: not a file the loader can read
        inside = False
    if Path(rel).is_absolute() or not inside:
        errors.append(
            RepoError.at(
                fleet_doc,
                ("spec", "base"),
                f"spec.base '{rel}' points outside the repository",
                code=REF_CODE,
                field="spec.base",
                fix="use a path relative to the repo root, e.g. base/clusterpolicy.yaml",
            )
        )
        return None
    if not target.is_file():
        errors.append(
            RepoError.at(
                fleet_doc,
                ("spec", "base"),
                f"spec.base '{rel}' does not exist",
                code=REF_CODE,
                field="spec.base",
                fix="create the file or correct the path",
            )
        )
        return None
    doc = _load(target, root, errors, required=True)
    if doc is not None and _validate(ClusterPolicyDoc, doc, errors) is None:
        return None
    return doc


def _stray_files(folder: Path, root: Path, listed: Collection[str]) -> Iterator[RepoError]:
    """YAML next to pool.yaml that the loader would silently ignore (a misspelt file name)."""
    for name in sorted(listed):
        path = folder / name
        if path.suffix in (".yaml", ".yml", ".json") and path.name not in POOL_FILES:
            yield RepoError(
                f"unexpected file {path.name}: a pool folder holds {', '.join(POOL_FILES)} "
                "only, so this file would be ignored",
                code=REF_CODE,
                file=path.relative_to(root).as_posix(),
                fix=f"rename it to {POLICY_FILE} (or {POOL_FILE}), or move it out of {POOLS_DIR}/",
            )


def _load_pools(
    root: Path, base: Document | None, errors: list[RepoError]
) -> Iterator[tuple[str, PoolSource]]:
    pools_dir = root / POOLS_DIR
    if not pools_dir.is_dir():
        errors.append(
            RepoError(
                f"no {POOLS_DIR}/ directory",
                code=REF_CODE,
                file=POOLS_DIR,
                fix=f"add {POOLS_DIR}/<pool>/{POOL_FILE} for each node pool",
            )
        )
        return
    for path in sorted(pools_dir.iterdir()):
        if path.is_file() and path.suffix in (".yaml", ".yml"):
            stray = RepoError(
                f"{path.name} sits directly in {POOLS_DIR}/, where it is ignored",
                code=REF_CODE,
                file=path.relative_to(root).as_posix(),
                fix=f"move it to {POOLS_DIR}/<pool>/{POOL_FILE} (one folder per pool)",
            )
            errors.append(stray)
    for folder in sorted(
        p for p in pools_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        rel = folder.relative_to(root).as_posix()
        listed = frozenset(os.listdir(folder))
        errors.extend(_stray_files(folder, root, listed))
        pool_doc = _load(folder / POOL_FILE, root, errors, required=True, listed=listed)
        pool = _validate(NodePool, pool_doc, errors) if pool_doc else None
        policy_doc = _load(folder / POLICY_FILE, root, errors, required=False, listed=listed)
        if policy_doc is not None and _validate(ClusterPolicyDoc, policy_doc, errors) is None:
            continue
        if pool is None or pool_doc is None or (POLICY_FILE in listed and policy_doc is None):
            continue
        if pool.metadata.name != folder.name:
            errors.append(
                RepoError.at(
                    pool_doc,
                    ("metadata", "name"),
                    f"metadata.name '{pool.metadata.name}' differs from the folder name "
                    f"'{folder.name}'",
                    code=REF_CODE,
                    field="metadata.name",
                    fix=f"set metadata.name: {folder.name} (or rename the folder)",
                )
            )
            continue
        if base is None and policy_doc is None:
            errors.append(
                RepoError(
                    "the pool has no ClusterPolicy: no spec.base and no clusterpolicy.yaml",
                    code=REF_CODE,
                    file=f"{rel}/{POLICY_FILE}",
                    fix=f"add {rel}/{POLICY_FILE} or set spec.base in {FLEET_FILE}",
                )
            )
            continue
        dp_name, mig_name = sharing.DEVICE_PLUGIN_FILE, mig_layouts.MIG_FILE
        dp_doc = _load(folder / dp_name, root, errors, required=False, listed=listed)
        mig_doc = _load(folder / mig_name, root, errors, required=False, listed=listed)
        if (dp_name in listed and dp_doc is None) or (mig_name in listed and mig_doc is None):
            continue
        yield folder.name, PoolSource(folder.name, pool, pool_doc, policy_doc, dp_doc, mig_doc)


def _check_stages(
    fleet: Fleet, doc: Document, pools: dict[str, PoolSource], errors: list[RepoError]
) -> None:
    seen_stage: dict[str, int] = {}
    placed: dict[str, str] = {}
    for i, stage in enumerate(fleet.spec.stages):
        if stage.name in seen_stage:
            errors.append(_defined_twice(doc, "stage", i, stage.name, STAGE_CODE))
        seen_stage[stage.name] = i
        for j, pool in enumerate(stage.pools):
            fld = f"spec.stages[{i}].pools[{j}]"
            if pool in placed:
                errors.append(
                    RepoError.at(
                        doc,
                        ("spec", "stages", i, "pools", j),
                        f"pool '{pool}' is in stage '{placed[pool]}' and again in stage "
                        f"'{stage.name}'",
                        code=STAGE_CODE,
                        fix="list every pool in exactly one stage",
                        field=fld,
                    )
                )
            elif pool not in pools and (Path(POOLS_DIR) / pool).as_posix() not in _failed(errors):
                errors.append(
                    RepoError.at(
                        doc,
                        ("spec", "stages", i, "pools", j),
                        f"stage '{stage.name}' names pool '{pool}', which has no "
                        f"{POOLS_DIR}/{pool}/{POOL_FILE}",
                        code=STAGE_CODE,
                        fix=f"create {POOLS_DIR}/{pool}/{POOL_FILE} or remove it here",
                        field=fld,
                    )
                )
            placed.setdefault(pool, stage.name)
    for name, src in sorted(pools.items()):
        if name not in placed:
            errors.append(
                RepoError.at(
                    src.pool_doc,
                    ("metadata", "name"),
                    f"pool '{name}' is in no stage, so no commit would ever reach it",
                    code=STAGE_CODE,
                    field="metadata.name",
                    fix=f"add '{name}' to the pools of one stage in {FLEET_FILE}",
                )
            )
    if not pools and not _failed(errors):
        errors.append(
            RepoError(
                "the fleet has no pools",
                code=STAGE_CODE,
                file=POOLS_DIR,
                fix=f"add {POOLS_DIR}/<pool>/{POOL_FILE}",
            )
        )


def _defined_twice(doc: Document, kind: str, i: int, name: str, code: str) -> RepoError:
    """The ``i``-th entry of fleet.yaml's ``spec.<kind>s`` repeats an earlier one's name."""
    return RepoError.at(
        doc,
        ("spec", f"{kind}s", i, "name"),
        f"{kind} '{name}' is defined twice",
        code=code,
        field=f"spec.{kind}s[{i}].name",
        fix=f"give every {kind} its own name",
    )


def _failed(errors: list[RepoError]) -> set[str]:
    """Pool folders that already have a load error (no need to also say they are missing)."""
    return {"/".join(e.file.split("/")[:2]) for e in errors if e.file.startswith(POOLS_DIR + "/")}


def _check_clusters(
    fleet: Fleet, doc: Document, pools: dict[str, PoolSource], errors: list[RepoError]
) -> None:
    names: set[str] = set()
    for i, ref in enumerate(fleet.cluster_refs()):
        if ref.name in names:
            errors.append(_defined_twice(doc, "cluster", i, ref.name, REF_CODE))
        names.add(ref.name)
    for name, src in sorted(pools.items()):
        cluster = src.model.spec.cluster
        if cluster not in names:
            errors.append(
                RepoError.at(
                    src.pool_doc,
                    ("spec", "cluster"),
                    f"pool '{name}' names cluster '{cluster}', which {FLEET_FILE} does not define",
                    code=REF_CODE,
                    field="spec.cluster",
                    fix=f"use one of: {', '.join(sorted(names))} (or add it to spec.clusters)",
                )
            )
