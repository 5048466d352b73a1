"""Checks against an earlier revision (``--base REV``): immutable fields and blast radius.

The fleet repo at REV is written out of git (gitpython, no checkout of the work tree) into a
temporary directory and loaded with the same loader, so both sides are compiled the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitops_gpu.errors import SourceError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import export, scratch
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo, load_repo
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.preflight.plan import diff_fields

if TYPE_CHECKING:
    import git

# NVIDIADriver fields the CRD makes immutable (x-kubernetes-validations: self == oldSelf),
# with the value the CRD defaults them to.
IMMUTABLE = (("driverType", "gpu"), ("usePrecompiled", False))


def git_repo(path: Path) -> git.Repo:
    import git  # noqa: PLC0415 - gitpython costs 45 ms; a plain `check` never needs it

    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise SourceError(
            f"{path} is not inside a git repository",
            fix="run in a git checkout of the fleet repo, or drop --base",
        ) from exc


def head_commit(path: Path) -> str | None:
    """HEAD of the git repo holding ``path`` (``<sha>-dirty`` when files under ``path`` differ
    from it: staged, changed or untracked and not ignored), or None outside git / before the
    first commit. Two plain git commands: this runs on every `check`."""
    try:
        sha = export.git_bytes(Path(path), "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        changed = export.git_bytes(
            Path(path), "status", "--porcelain", "--untracked-files=all", "-z", "--", "."
        )
    except (SourceError, OSError):  # outside git, no commit yet, no such directory
        return None
    head = sha.decode().strip()
    return f"{head}-dirty" if changed else head


def export_revision(path: Path, rev: str, dest: Path) -> tuple[Path, str]:
    """Write the fleet repo at ``path`` as of ``rev`` under ``dest``; returns (root, sha).

    The tree is untrusted (a pull request from a fork): see :mod:`gitops_gpu.fleet.export`."""
    with git_repo(path) as repo:
        top = Path(str(repo.working_tree_dir)).resolve()
        git_dir = Path(str(repo.git_dir))
    sub = Path(path).resolve().relative_to(top).as_posix()
    result = export.export_commit(git_dir, rev, dest, sub)
    return dest, result.sha


def load_revision(path: Path, rev: str) -> tuple[FleetRepo, str]:
    """Load the fleet repo at ``rev`` (everything is read into memory; the export is removed)."""
    with scratch.scratch_dir("gitops-gpu-base-") as tmp:
        root, sha = export_revision(path, rev, Path(tmp))
        return load_repo(root), sha


def immutable_changes(
    repo: FleetRepo, base: CompiledFleet, head: CompiledFleet
) -> Iterator[Finding]:
    """GG024: driverType/usePrecompiled of an existing pool's NVIDIADriver changed."""
    for cname, cluster in head.clusters.items():
        old_cluster = base.clusters.get(cname)
        for pool, target in sorted(cluster.pools.items()):
            old = old_cluster.pools.get(pool) if old_cluster else None
            if old is None:
                continue
            for key, default in IMMUTABLE:
                was = old.driver["spec"].get(key, default)
                now = target.driver["spec"].get(key, default)
                if was == now:
                    continue
                if key == "driverType":
                    doc = repo.pools[pool].pool_doc
                    file, line = doc.file, doc.where(("spec", "driverType"))[0]
                else:
                    file, line = fleet_compile.locate(repo, pool, ("spec", "driver", key))
                yield Finding.make(
                    "GG024",
                    f"NVIDIADriver '{pool}': {key} changes {was!r} -> {now!r}, but the "
                    "field is immutable: the apiserver refuses the update",
                    file=file,
                    line=line,
                    pool=pool,
                    cluster=cname,
                    field=key,
                    fix=f"keep {key}: {was!r} for pool '{pool}'; to switch, create a new pool "
                    "(new folder and selector) with the new value and move the nodes to it",
                )


def blast_radius(repo: FleetRepo, base: CompiledFleet, head: CompiledFleet) -> Iterator[Finding]:
    """GG025: cluster-scoped ClusterPolicy fields changed since base hit every pool at once."""
    stage_order = [s.name for s in head.stages]
    for cname, cluster in sorted(head.clusters.items()):
        old = base.clusters.get(cname)
        if old is None:
            continue
        changes = diff_fields(_spec(old.cluster_policy), _spec(cluster.cluster_policy))
        if not changes:
            continue
        pools = sorted(cluster.pools)
        first = min((cluster.pools[p].stage for p in pools), key=stage_order.index)
        for change in changes[:20]:
            file, line = fleet_compile.locate(repo, pools[0], change.parts)
            yield Finding.make(
                "GG025",
                f"cluster-wide blast radius: {change.path} changes {_short(change.old)} -> "
                f"{_short(change.new)} in the ClusterPolicy of cluster '{cname}', which reaches "
                f"all {len(pools)} pools ({', '.join(pools)}) at once when stage '{first}' "
                "adopts the commit",
                file=file,
                line=line,
                cluster=cname,
                field=change.path,
                fix="if only some pools need it, make it a per-pool setting; otherwise make sure "
                f"stage '{first}' can take a change to the whole cluster",
            )


def _spec(manifest: Any) -> dict[str, Any]:
    return {
        "spec": manifest.get("spec", {}),
        "metadata": {"labels": manifest["metadata"].get("labels", {})},
    }


def _short(value: Any) -> str:
    text = "<not set>" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
