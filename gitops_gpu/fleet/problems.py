"""Load problems as values: each one a FleetError with position, field, fix and finding code.

pydantic's validation errors are translated here into messages a person can act on: the key
that is wrong (not pydantic's union tags), its line and column, and the fields that would be
accepted instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet.yamlio import Document, PathKey, dotted

# Finding codes of load problems (the full list lives in gitops_gpu.preflight.findings).
YAML_CODE, SHAPE_CODE, STAGE_CODE, REF_CODE = "GG001", "GG002", "GG003", "GG004"
TREE_CODE = "GG005"  # an entry the controller cannot read where the fleet format reads (export.py)


class RepoError(FleetError):
    """One load problem; ``code`` is its preflight finding code."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        file: str = "",
        line: int = 0,
        column: int = 0,
        field: str = "",
        fix: str = "",
    ) -> None:
        super().__init__(message, file=file, line=line, column=column, field=field, fix=fix)
        self.code = code
        self.message = message

    @classmethod
    def at(
        cls,
        doc: Document,
        path: PathKey,
        message: str,
        *,
        code: str,
        field: str = "",
        fix: str = "",
    ) -> RepoError:
        """A problem at ``path`` of ``doc`` (its file, line and column)."""
        line, column = doc.where(path)
        return cls(
            message, code=code, file=doc.file, line=line, column=column, field=field, fix=fix
        )


class RepoLoadError(FleetError):
    """Every problem that stopped the repo from loading; ``str()`` shows the first one."""

    def __init__(self, errors: list[RepoError]) -> None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(
            first.message + more,
            file=first.file,
            line=first.line,
            column=first.column,
            field=first.field,
            fix=first.fix,
        )
        self.errors = errors


def shape_errors(
    model: type[BaseModel], doc: Document, exc: ValidationError
) -> Iterator[RepoError]:
    """pydantic errors as RepoLoadError pointing at the offending key."""
    for e in exc.errors():
        loc = _data_loc(doc.data, e["loc"], e["type"])
        line, col = doc.where(loc)
        name = str(loc[-1]) if loc else ""
        msg, fix = (
            e["msg"].removeprefix("Value error, "),
            "see fleet-repo-example/ for a valid file",
        )
        if e["type"] == "extra_forbidden":
            allowed = _allowed_fields(model, loc[:-1])
            msg = f"unknown field '{name}'"
            fix = "remove it or fix its spelling" + (
                f"; known fields: {', '.join(allowed)}" if allowed else ""
            )
        elif e["type"] == "missing":
            msg, fix = f"required field '{name}' is missing", f"add '{name}'"
        elif e["type"] in ("string_type", "dict_type", "list_type", "int_type", "bool_type"):
            msg = f"{msg} (got {type(e['input']).__name__} {e['input']!r})"
            if e["type"] == "string_type":
                fix = "quote the value so YAML reads it as a string"
        elif e["type"] == "literal_error":
            msg = f"{msg} (got {e['input']!r})"
            fix = f"use {e.get('ctx', {}).get('expected', 'an allowed value')}"
        yield RepoError(
            msg, code=SHAPE_CODE, file=doc.file, line=line, column=col, field=dotted(loc), fix=fix
        )


def _data_loc(data: Any, loc: tuple[Any, ...], kind: str) -> PathKey:
    """The part of a pydantic loc that names real keys (drops union tags like 'int')."""
    out: list[str | int] = []
    cur = data
    for part in loc:
        in_map = isinstance(cur, dict) and isinstance(part, str) and part in cur
        in_list = isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)
        if in_map or in_list:
            cur = cur[part]
        else:
            if kind == "missing" and isinstance(part, str):
                out.append(part)
            break
        out.append(part)
    return tuple(out)


def _allowed_fields(model: Any, loc: PathKey) -> list[str]:
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        for name, info in model.model_fields.items():
            if (info.alias or name) == part:
                model = _model_of(info.annotation)
                break
        else:
            return []
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(info.alias or name for name, info in model.model_fields.items())
    return []


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None or get_args(annotation):
        for arg in get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None
