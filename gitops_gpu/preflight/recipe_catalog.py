"""Read an AICR recipes directory (NVIDIA AI Cluster Runtime) the way AICR lays it out.

::

    registry.yaml              kind: ComponentRegistry (default chart version per component)
    overlays/base.yaml         the base recipe, root of every inheritance chain
    overlays/*.yaml            kind: RecipeMetadata: criteria, spec.base, spec.mixins,
                               constraints, componentRefs (valuesFile, overrides, version)
    mixins/*.yaml              kind: RecipeMixin: constraints and componentRefs composed in
    components/<name>/*.yaml   Helm values files named by componentRefs[].valuesFile

Only the files recipes are built from are read (checks/, validators/ and component manifests
are not). Every file goes through the fleet repo's YAML reader (positions, no anchors, size
limits); a file that does not parse or has the wrong shape raises :class:`RecipeFileError`
with its own path and line, never a traceback. Resolution is recipe_resolve.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet.yamlio import Document, PathKey, dotted, load_file

CRITERIA_FIELDS = ("service", "accelerator", "intent", "os", "platform")
METADATA_KIND = "RecipeMetadata"
MIXIN_KIND = "RecipeMixin"


class RecipeFileError(Exception):
    """A file of the recipes directory is malformed: path (as shown to users), line, fix."""

    def __init__(self, file: str, line: int, message: str, fix: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message, self.fix = file, line, message, fix


@dataclass(frozen=True)
class Constraint:
    name: str
    value: str
    origin: str  # "<file>:<line>" of the constraint in the recipes directory


@dataclass(frozen=True)
class ComponentRef:
    """One componentRefs entry as written in one file (merging is recipe_resolve.py's)."""

    name: str
    fields: dict[str, Any]  # type, source, version, valuesFile, dependencyRefs, manifestFiles...
    overrides: dict[str, Any]
    origin: str  # "<file>:<line>" of the entry
    doc: Document
    path: PathKey  # of the entry in ``doc``


@dataclass(frozen=True)
class Recipe:
    """An overlay (kind RecipeMetadata) or a mixin (kind RecipeMixin)."""

    name: str
    file: str  # as shown to users: <recipes dir>/overlays/x.yaml
    base: str  # spec.base ("" = the base recipe)
    criteria: dict[str, str]
    mixins: tuple[str, ...]
    constraints: tuple[Constraint, ...]
    components: tuple[ComponentRef, ...]
    line: int  # of metadata.name


@dataclass
class Catalog:
    root: Path
    display: str  # the directory as the user named it
    base: Recipe
    overlays: dict[str, Recipe]
    mixins: dict[str, Recipe]
    default_versions: dict[str, str]  # registry: component -> helm.defaultVersion
    _values: dict[str, Document] = field(default_factory=dict)

    def show(self, rel: str) -> str:
        return f"{self.display.rstrip('/')}/{rel}"

    def values_doc(self, rel: str) -> Document | None:
        """components/<name>/<file>.yaml as a Document; None when it does not exist."""
        if rel not in self._values:
            path = self.root / rel
            if not path.is_file():
                return None
            doc = _load(path, self.root, self.display)
            if doc.data is not None and not isinstance(doc.data, dict):
                raise _shape(doc, (), self.display, "a Helm values file must be a mapping")
            self._values[rel] = doc
        return self._values[rel]


def _load(path: Path, root: Path, display: str) -> Document:
    try:
        doc = load_file(path, root)
    except FleetError as exc:
        rel = exc.file or path.relative_to(root).as_posix()
        msg = str(exc.args[0]) if exc.args else str(exc)
        where = f"{rel}:{exc.line}" + (f":{exc.column}" if exc.column else "") if exc.line else rel
        msg = msg.removeprefix(f"{where}: ")
        raise RecipeFileError(f"{display.rstrip('/')}/{rel}", exc.line, msg, exc.fix) from exc
    return Document(f"{display.rstrip('/')}/{doc.file}", doc.data, doc.positions)


def _shape(doc: Document, path: PathKey, _display: str, message: str) -> RecipeFileError:
    where = f" at {dotted(path)}" if path else ""
    return RecipeFileError(
        doc.file,
        doc.where(path)[0],
        f"{message}{where}",
        "fix the file to AICR's recipe format (see the recipes README), or point --recipes at "
        "an unmodified AICR checkout",
    )


def _get(doc: Document, path: PathKey, kind: type | tuple[type, ...], what: str) -> Any:
    node: Any = doc.data
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    if node is not None and not isinstance(node, kind):
        raise _shape(doc, path, "", f"{what} has the wrong type ({type(node).__name__})")
    return node


def _scalar_str(doc: Document, path: PathKey, value: Any, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _shape(doc, path, "", f"{what} must be a string")
    return str(value)


def _origin(doc: Document, path: PathKey) -> str:
    return f"{doc.file}:{doc.where(path)[0]}"


def _recipe(doc: Document, kind: str) -> Recipe:
    name = _get(doc, ("metadata", "name"), str, "metadata.name")
    if not name:
        raise _shape(doc, ("metadata",), "", f"a {kind} needs metadata.name")
    _get(doc, ("spec",), dict, "spec")
    base = _get(doc, ("spec", "base"), str, "spec.base") or ""
    criteria: dict[str, str] = {}
    for key, value in (_get(doc, ("spec", "criteria"), dict, "spec.criteria") or {}).items():
        path: PathKey = ("spec", "criteria", key)
        if key == "nodes":
            continue  # node count: not a criterion a pool states
        if key not in CRITERIA_FIELDS:
            raise _shape(doc, path, "", f"unknown criteria field '{key}'")
        criteria[key] = _scalar_str(doc, path, value, f"criteria {key}").strip().lower()
    mixins = _get(doc, ("spec", "mixins"), list, "spec.mixins") or []
    for i, m in enumerate(mixins):
        _scalar_str(doc, ("spec", "mixins", i), m, "a mixin name")
    constraints = []
    for i, c in enumerate(_get(doc, ("spec", "constraints"), list, "spec.constraints") or []):
        path = ("spec", "constraints", i)
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise _shape(doc, path, "", "a constraint needs a name and a value")
        value = _scalar_str(doc, (*path, "value"), c.get("value"), "constraint value")
        constraints.append(Constraint(c["name"], value, _origin(doc, path)))
    refs = []
    for i, r in enumerate(_get(doc, ("spec", "componentRefs"), list, "spec.componentRefs") or []):
        path = ("spec", "componentRefs", i)
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise _shape(doc, path, "", "a componentRef needs a name")
        overrides = r.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise _shape(doc, (*path, "overrides"), "", "overrides must be a mapping")
        fields: dict[str, Any] = {}
        for key in ("type", "source", "version", "valuesFile", "namespace", "chart"):
            if r.get(key) is not None:
                fields[key] = _scalar_str(doc, (*path, key), r[key], key)
        for key in ("dependencyRefs", "manifestFiles"):
            if r.get(key) is not None and not isinstance(r[key], list):
                raise _shape(doc, (*path, key), "", f"{key} must be a list")
            fields[key] = list(r.get(key) or [])
        refs.append(ComponentRef(r["name"], fields, overrides, _origin(doc, path), doc, path))
    return Recipe(
        name=name,
        file=doc.file,
        base=base,
        criteria=criteria,
        mixins=tuple(str(m) for m in mixins),
        constraints=tuple(constraints),
        components=tuple(refs),
        line=doc.where(("metadata", "name"))[0],
    )


def _registry(root: Path, display: str) -> dict[str, str]:
    path = root / "registry.yaml"
    if not path.is_file():
        return {}
    doc = _load(path, root, display)
    out: dict[str, str] = {}
    for i, comp in enumerate(_get(doc, ("components",), list, "components") or []):
        if not isinstance(comp, dict) or not isinstance(comp.get("name"), str):
            raise _shape(doc, ("components", i), "", "a registry component needs a name")
        helm = comp.get("helm") or {}
        if isinstance(helm, dict) and helm.get("defaultVersion") is not None:
            out[comp["name"]] = str(helm["defaultVersion"])
    return out


def load_catalog(root: Path, display: str | None = None) -> Catalog:
    """Load the recipes directory ``root``; RecipeFileError names the malformed file and line."""
    shown = display or str(root)
    overlays: dict[str, Recipe] = {}
    mixins: dict[str, Recipe] = {}
    base: Recipe | None = None
    for sub, kind, into in (("overlays", METADATA_KIND, overlays), ("mixins", MIXIN_KIND, mixins)):
        for path in sorted((root / sub).rglob("*.yaml")) if (root / sub).is_dir() else []:
            doc = _load(path, root, shown)
            if not isinstance(doc.data, dict):
                raise _shape(doc, (), shown, f"a {kind} file must be a mapping")
            found = doc.data.get("kind")
            if found not in (None, "", kind):
                if sub == "mixins":
                    raise _shape(doc, ("kind",), shown, f"kind '{found}', expected {kind}")
                continue  # AICR skips other kinds (a ValidatorCatalog, ...)
            recipe = _recipe(doc, kind)
            if sub == "overlays" and path.name == "base.yaml":
                base = recipe
                continue
            if recipe.name in into:
                raise RecipeFileError(
                    recipe.file,
                    recipe.line,
                    f"{kind} name '{recipe.name}' is also used by {into[recipe.name].file}",
                    "give every overlay and mixin its own metadata.name",
                )
            into[recipe.name] = recipe
    if base is None:
        raise RecipeFileError(
            f"{shown.rstrip('/')}/overlays/base.yaml",
            0,
            "the recipes directory has no overlays/base.yaml (the root of every recipe)",
            "pass --recipes the recipes/ directory of an AICR checkout",
        )
    return Catalog(root, shown, base, overlays, mixins, _registry(root, shown))
