"""Pure diff of desired vs live objects and node labels; results as values.

The desired side is what a server-side dry-run apply returned, so the apiserver has already
merged in CRD defaults and every other manager's fields; normalising strips only what changes
on every write (resourceVersion, managedFields, status, ...). A field present on both sides
with the same value is never drift, whoever set it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gitops_gpu import names

Obj = Mapping[str, Any]

# metadata that the apiserver rewrites on every write or that no manifest sets.
_VOLATILE_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
# annotations that record where a write came from, not what the object should be.
_PROVENANCE_ANNOTATIONS = (names.COMMIT_ANNOTATION, names.STAGE_ANNOTATION)


class Action(enum.StrEnum):
    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    PRUNED = "pruned"


class FieldChange(NamedTuple):
    path: str
    live: Any
    desired: Any


@dataclass(frozen=True)
class ObjectDiff:
    kind: str
    name: str
    pool: str | None
    action: Action
    changes: tuple[FieldChange, ...] = ()
    # The compiled manifest to apply (None for a prune).
    desired: Obj | None = field(default=None, compare=False, repr=False)
    # In sync, but the live object records another commit: written once when a stage adopts.
    stale_commit: bool = False

    @property
    def drifted(self) -> bool:
        return self.action is not Action.UNCHANGED


@dataclass(frozen=True, slots=True)
class NodeLabelDiff:
    node: str
    pool: str | None
    set: Mapping[str, str]  # labels to add or change
    remove: tuple[str, ...]  # labels we set earlier and no longer want
    changes: tuple[FieldChange, ...]
    desired_keys: tuple[str, ...] = ()  # every key the pool wants: recorded as ours on the node


def normalize(obj: Obj | None, *, keep_provenance: bool = False) -> dict[str, Any] | None:
    """A copy without status and volatile metadata (and, by default, provenance annotations)."""
    if obj is None:
        return None
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE_METADATA}
    ann = dict(meta.get("annotations") or {})
    if not keep_provenance:
        for key in _PROVENANCE_ANNOTATIONS:
            ann.pop(key, None)
    if ann:
        meta["annotations"] = ann
    else:
        meta.pop("annotations", None)
    out["metadata"] = meta
    return out


def field_changes(live: Any, desired: Any, path: str = "") -> list[FieldChange]:
    """Every leaf where ``live`` and ``desired`` differ, as dotted paths (lists compared whole)."""
    if isinstance(live, Mapping) and isinstance(desired, Mapping):
        out: list[FieldChange] = []
        for key in sorted(set(live) | set(desired), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in desired:
                out.append(FieldChange(sub, live[key], None))
            elif key not in live:
                out.append(FieldChange(sub, None, desired[key]))
            else:
                out.extend(field_changes(live[key], desired[key], sub))
        return out
    return [] if live == desired else [FieldChange(path, live, desired)]


def diff_object(manifest: Obj, dry_run: Obj, live: Obj | None, pool: str | None) -> ObjectDiff:
    """Compare the dry-run result of applying ``manifest`` with the live object."""
    kind = str(manifest.get("kind", ""))
    name = str(manifest.get("metadata", {}).get("name", ""))
    if live is None:
        return ObjectDiff(
            kind, name, pool, Action.CREATED, tuple(field_changes({}, normalize(dry_run))), manifest
        )
    changes = tuple(field_changes(normalize(live), normalize(dry_run)))
    action = Action.CONFIGURED if changes else Action.UNCHANGED
    stale = commit_of(live) != commit_of(manifest)
    return ObjectDiff(kind, name, pool, action, changes, manifest, stale)


def commit_of(obj: Obj) -> str | None:
    ann = obj.get("metadata", {}).get("annotations") or {}
    value = ann.get(names.COMMIT_ANNOTATION)
    return str(value) if value is not None else None


def pruned(live: Obj, pool: str | None) -> ObjectDiff:
    meta = live.get("metadata", {})
    return ObjectDiff(
        str(live.get("kind", "")),
        str(meta.get("name", "")),
        pool,
        Action.PRUNED,
        tuple(field_changes(normalize(live), {})),
    )


def managed_label_keys(node: Obj) -> set[str]:
    raw = (node.get("metadata", {}).get("annotations") or {}).get(
        names.MANAGED_LABELS_ANNOTATION, ""
    )
    return {k for k in raw.split(",") if k}


def diff_node_labels(
    node: Obj,
    desired: Mapping[str, str],
    pool: str | None,
    desired_keys: tuple[str, ...] | None = None,
) -> NodeLabelDiff:
    """Labels to set and to remove; only keys we set earlier are ever removed. ``desired_keys``:
    ``desired``'s keys sorted, when the caller has them (one tuple for a pool's nodes)."""
    labels: Mapping[str, str] = node.get("metadata", {}).get("labels") or {}
    to_set = {k: v for k, v in desired.items() if labels.get(k) != v}
    to_remove = tuple(sorted(k for k in managed_label_keys(node) - set(desired) if k in labels))
    changes = [FieldChange(f"labels.{k}", labels.get(k), v) for k, v in sorted(to_set.items())]
    changes += [FieldChange(f"labels.{k}", labels[k], None) for k in to_remove]
    return NodeLabelDiff(
        str(node["metadata"]["name"]),
        pool,
        to_set,
        to_remove,
        tuple(changes),
        tuple(sorted(desired)) if desired_keys is None else desired_keys,
    )
