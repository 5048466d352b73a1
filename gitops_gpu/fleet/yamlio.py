"""Read YAML from a fleet repo safely, keeping the position of every key.

Why not ``YAML().load``: we need (1) a refusal, not an expansion, of anchors and aliases (a
"billion laughs" file must cost nothing), (2) duplicate keys refused with both positions,
(3) plain ``dict``/``list``/``str`` values that later layers can compare and serialise, and
(4) the line and column of every key and list item so a finding can point at ``file:line``.
So we take ruamel.yaml's event stream (scanner + parser + resolver only, no composer) and
build the values ourselves from the events, in one pass: parsing was 60 % of a 2,000-pool
`check`, and composing after a separate bounds pass parsed every file twice.

Scalars follow YAML 1.2 core schema (``yes``/``on`` stay strings), timestamps stay strings
(the apiserver reads them as strings too), custom tags are refused.
"""

from __future__ import annotations

import collections
import errno
import functools
import math
import os
import pickle
import stat
from collections.abc import Iterator
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import Event
from ruamel.yaml.nodes import ScalarNode

from gitops_gpu.errors import FleetError

try:  # libyaml's parser, through PyYAML: the same events as ruamel's, 10x faster
    import yaml as pyyaml

    _CPARSER: Any = pyyaml.CSafeLoader if pyyaml.__with_libyaml__ else None
    _CERROR: type[Exception] = pyyaml.YAMLError
except ImportError:  # pragma: no cover - PyYAML is a dependency; without it, ruamel parses
    _CPARSER, _CERROR = None, YAMLError
# Tags are resolved by ruamel's resolver whichever parser made the events: YAML 1.2, or 1.1
# for a document that says ``%YAML 1.1``.
_RESOLVER = YAML(typ="safe", pure=True).resolver
_YAML11 = YAML(typ="safe", pure=True)
_YAML11.version = (1, 1)
_RESOLVERS = {(1, 1): _YAML11.resolver}


@dataclass
class Limits:
    """What one fleet repo may cost to read. Fleet files are small and hand-written; these
    bound memory and time on hostile input (a 600 KB file of 300k list items, 10,000-deep
    nesting, a 5,000-digit integer) long before they could hurt. ``configure`` sets them from
    the CLI flags; the defaults are documented in docs/fleet-repo.md."""

    file_bytes: int = 1024 * 1024  # per file
    repo_bytes: int = 16 * 1024 * 1024  # every file the fleet format reads, together
    depth: int = 64  # nesting of maps and lists in one document
    nodes: int = 20_000  # scalars, maps and lists in one document
    int_digits: int = 20  # Kubernetes integers are int64: 19 digits and a sign


LIMITS = Limits()


def configure(**values: int) -> None:
    """Set limits process-wide (CLI flags); unknown names are a programming error."""
    for key, value in values.items():
        if not hasattr(LIMITS, key):
            raise TypeError(f"unknown limit {key}")
        if value < 1:
            raise ValueError(f"limit {key} must be positive")
        setattr(LIMITS, key, value)


PathKey = tuple[str | int, ...]
_TAG = "tag:yaml.org,2002:"


@dataclass(frozen=True)
class Document:
    """One YAML document: plain data plus the (line, column) of every key and item (1-based)."""

    file: str  # path relative to the repo root, as shown to users
    data: Any
    positions: dict[PathKey, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: PathKey) -> tuple[int, int]:
        """Position of ``path`` or of its nearest ancestor that exists in this document."""
        p = tuple(path)
        while p:
            if p in self.positions:
                return self.positions[p]
            p = p[:-1]
        return self.positions.get((), (1, 1))

    def has(self, path: PathKey) -> bool:
        return tuple(path) in self.positions


def _err(file: str, message: str, line: int = 0, column: int = 0, fix: str = "") -> FleetError:
    return FleetError(message, file=file, line=line, column=column, fix=fix)


def read_text(path: Path, root: Path) -> tuple[str, str]:
    """Read ``path`` (inside ``root``) as UTF-8 text; returns (relative name, text).

    Refuses symlinks that leave the repo, files over MAX_FILE_BYTES and non-UTF-8 bytes.
    One path walk each for the file and the root, then open and fstat: every `check` reads
    every fleet file through here.
    """
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        rel = path.as_posix()
    real, root_real = os.path.realpath(path), os.path.realpath(root)
    if real != root_real and not real.startswith(root_real.rstrip("/") + "/"):
        raise _err(
            rel,
            f"symlink points outside the repository (to {real})",
            fix="replace the symlink with a regular file inside the repository",
        )
    try:
        # O_NONBLOCK: a fifo is refused below, not waited on
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _err(
                rel,
                f"cannot resolve the path ({exc.strerror})",
                fix="replace the symlink (a loop or dangling link) with a regular file",
            ) from None
        raise _err(
            rel, f"cannot read: {exc.strerror}", fix="check the file exists and is readable"
        ) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _err(rel, "not a regular file", fix="replace it with a regular YAML file")
        if st.st_size > LIMITS.file_bytes:
            raise _err(
                rel,
                f"file is {st.st_size} bytes, over the {LIMITS.file_bytes} byte limit",
                fix="fleet files are small hand-written YAML: split or trim this file",
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(LIMITS.file_bytes + 1)
    finally:
        os.close(fd)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _err(
            rel,
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})",
            line,
            col,
            fix="save the file as UTF-8",
        ) from exc
    return rel, text.removeprefix("\ufeff")


def _check_tabs(file: str, text: str) -> None:
    for n, line in enumerate(text.splitlines(), 1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent:
            raise _err(
                file,
                "tab character in indentation",
                n,
                indent.index("\t") + 1,
                fix="indent with spaces only (YAML forbids tabs in indentation)",
            )


# Parsed files by (name, text, limits): a new commit re-parses only the files it changed (a
# driver bump in base/ leaves 125 pool files as they were). Kept pickled: a caller's own copy
# is a pickle.loads (0.025 ms for the example's base policy, vs 0.118 ms for copy.deepcopy),
# and the first caller takes the freshly built data itself.
_Cached = tuple[str, bytes, dict[PathKey, tuple[int, int]]]
_PARSED: collections.OrderedDict[tuple[str, str, tuple[int, ...]], list[_Cached]] = (
    collections.OrderedDict()
)
PARSED_MAX = 2048


def parse_documents(file: str, text: str) -> list[Document]:
    """Parse every document of ``text``; raise FleetError with file:line:column on any problem.
    Each call returns its own copy of the data (callers may change it)."""
    key = (file, text, astuple(LIMITS))
    cached = _PARSED.get(key)
    if cached is not None:
        _PARSED.move_to_end(key)
        return [Document(f, pickle.loads(data), positions) for f, data, positions in cached]
    docs = _parse_documents(file, text)
    _PARSED[key] = [(d.file, pickle.dumps(d.data, protocol=5), d.positions) for d in docs]
    if len(_PARSED) > PARSED_MAX:
        _PARSED.popitem(last=False)
    return docs


def _parse_documents(file: str, text: str) -> list[Document]:
    _check_tabs(file, text)
    if _CPARSER is not None:
        try:
            return list(_documents(file, iter(pyyaml.parse(text, Loader=_CPARSER))))
        except _CERROR:
            pass  # libyaml's words are terser ("did not find expected node content"): ruamel's
    try:
        return list(_documents(file, _events(text)))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise _err(
            file,
            f"YAML syntax error: {problem}",
            line,
            col,
            fix="fix the YAML syntax at this position",
        ) from exc
    except YAMLError as exc:
        raise _err(file, f"YAML error: {exc}", fix="fix the YAML syntax") from exc


def _events(text: str) -> Iterator[Any]:
    """ruamel's event stream of ``text`` (pure Python: the reference, and its errors)."""
    return iter(YAML(typ="safe", pure=True).parse(text))


def _kind(event: Any) -> str:
    """The event's class name, the same in ruamel and PyYAML ("ScalarEvent", ...)."""
    return type(event).__name__


def _tag(event: Any) -> str | None:
    """An explicit tag (ruamel: ``ctag``, PyYAML: ``tag``); None or "!" when implicit."""
    raw = event.ctag if hasattr(event, "ctag") else event.tag
    return None if raw is None else str(raw)


def _resolved(event: Any, resolver: Any) -> str:
    tag = _tag(event)
    if tag is None or tag == "!":
        value = event.value
        if len(value) > _RESOLVED_LEN:  # not remembered: a hostile file's long scalars
            return str(resolver.resolve(ScalarNode, value, event.implicit))
        tag = _resolve_short(resolver, value, event.implicit)
    return tag


_RESOLVED_LEN = 64


@functools.lru_cache(maxsize=8192)
def _resolve_short(resolver: Any, value: str, implicit: tuple[bool, bool]) -> str:
    # fleet files repeat their scalars ("true", "nvidia.com/gpu", versions) across thousands
    # of pools; ruamel's resolver was a third of parsing a 2,000-pool repo
    return str(resolver.resolve(ScalarNode, value, implicit))


@dataclass
class _Open:
    """A mapping or sequence being built; a mapping's key waiting for its value."""

    path: PathKey
    value: dict[str, Any] | list[Any]
    key: str | None = None
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)


def _documents(file: str, events: Iterator[Any]) -> Iterator[Document]:
    """Build each document's data and positions straight from the event stream, in one pass
    (no node tree, no second parse): depth and size are bounded as the events arrive, since
    ruamel's composer recurses once per nesting level and keeps every node."""
    depth = nodes = 0
    stack: list[_Open] = []
    positions: dict[PathKey, tuple[int, int]] = {}
    root: list[Any] = []
    # The first problem with the content waits for the end of the stream, so a YAML syntax
    # error anywhere in the file is said first (as when the file was parsed whole before).
    problem: FleetError | None = None
    resolver: Any = _RESOLVER
    for event in events:
        kind = type(event).__name__  # the same class names in ruamel and PyYAML
        if kind == "DocumentStartEvent":
            depth = nodes = 0
            stack, positions, root = [], {}, []
            resolver = _RESOLVERS.get(tuple(event.version or ()), _RESOLVER)
            continue
        if kind == "DocumentEndEvent":
            if root and problem is None:
                yield Document(file, root[0], positions)
            continue
        if kind in ("StreamStartEvent", "StreamEndEvent"):
            continue
        if kind in ("MappingEndEvent", "SequenceEndEvent"):
            depth -= 1
            if problem is None:
                done = stack.pop()
                _place(stack, root, done.value)
            continue
        nodes += 1
        pos = _mark(event)
        if kind in ("MappingStartEvent", "SequenceStartEvent"):
            depth += 1
            if depth > LIMITS.depth:
                raise _err(
                    file,
                    f"nesting deeper than {LIMITS.depth} levels",
                    *pos,
                    fix="flatten the structure; fleet files need a few levels "
                    "(or raise --max-yaml-depth)",
                )
        if nodes > LIMITS.nodes:
            raise _err(
                file,
                f"more than {LIMITS.nodes} values in one document",
                *pos,
                fix="fleet files are small hand-written YAML: trim this document "
                "(or raise --max-yaml-nodes)",
            )
        if problem is not None:
            continue  # only the bounds are checked after a problem
        try:
            _content(file, event, kind, pos, stack, root, positions, resolver)
        except FleetError as exc:
            problem = exc
    if problem is not None:
        raise problem


def _content(
    file: str,
    event: Event,
    kind: str,
    pos: tuple[int, int],
    stack: list[_Open],
    root: list[Any],
    positions: dict[PathKey, tuple[int, int]],
    resolver: Any,
) -> None:
    """Add one node event's value to the document being built."""
    anchor = getattr(event, "anchor", None)
    if kind == "AliasEvent":  # its anchor, if any, was refused before it
        raise _err(
            file,
            f"YAML syntax error: found undefined alias '{anchor}'",
            *pos,
            fix="fix the YAML syntax at this position",
        )
    if anchor:
        raise _err(
            file,
            f"YAML anchor '&{anchor}' (aliases are not supported)",
            *pos,
            fix="write the value out in full; anchors, aliases and merge keys are refused",
        )
    parent = stack[-1] if stack else None
    if isinstance(parent, _Open) and isinstance(parent.value, dict) and parent.key is None:
        _key(file, parent, positions, event, pos, resolver)
        return
    path = _child_path(parent, pos, positions)
    if kind == "MappingStartEvent":
        stack.append(_Open(path, {}))
    elif kind == "SequenceStartEvent":
        stack.append(_Open(path, []))
    else:
        assert kind == "ScalarEvent"
        _place(stack, root, _scalar_event(file, event, resolver))


def _child_path(
    parent: _Open | None, pos: tuple[int, int], positions: dict[PathKey, tuple[int, int]]
) -> PathKey:
    """The path of the value starting at ``pos``, recorded in ``positions``."""
    if parent is None:
        path: PathKey = ()
    elif isinstance(parent.value, dict):
        assert parent.key is not None
        path = (*parent.path, parent.key)
    else:
        path = (*parent.path, len(parent.value))
    if isinstance(parent, _Open) and isinstance(parent.value, dict):
        return path  # a mapping value's position is its key's (recorded with the key)
    positions[path] = pos
    return path


def _key(
    file: str,
    parent: _Open,
    positions: dict[PathKey, tuple[int, int]],
    event: Any,
    pos: tuple[int, int],
    resolver: Any,
) -> None:
    scalar = _kind(event) == "ScalarEvent"
    if not scalar or _resolved(event, resolver) == _TAG + "merge":
        raise _err(
            file,
            "complex or merge key",
            *pos,
            fix="use plain string keys; merge keys ('<<') are refused",
        )
    key = str(event.value)
    if key in parent.seen:
        raise _err(
            file,
            f"duplicate key '{key}' (first at line {parent.seen[key][0]})",
            *pos,
            fix="remove one of the two keys",
        )
    parent.seen[key] = pos
    positions[(*parent.path, key)] = pos
    parent.key = key


def _place(stack: list[_Open], root: list[Any], value: Any) -> None:
    """Put a finished value into the collection that holds it (or make it the document)."""
    if not stack:
        root.append(value)
        return
    parent = stack[-1]
    if isinstance(parent.value, dict):
        assert parent.key is not None
        parent.value[parent.key] = value
        parent.key = None
    else:
        parent.value.append(value)


def _scalar_event(file: str, event: Any, resolver: Any) -> Any:
    return _scalar(file, _resolved(event, resolver), str(event.value), _mark(event))


def _mark(event: Event) -> tuple[int, int]:
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)


def parse_single(file: str, text: str) -> Document:
    docs = parse_documents(file, text)
    if not docs:
        raise _err(file, "file is empty", 1, 1, fix="add the object this file should hold")
    if len(docs) > 1:
        line, col = docs[1].positions[()]
        raise _err(
            file,
            "more than one YAML document",
            line,
            col,
            fix="keep one object per file (remove the '---' and what follows)",
        )
    return docs[0]


def load_file(path: Path, root: Path) -> Document:
    rel, text = read_text(path, root)
    return parse_single(rel, text)


def _scalar(file: str, tag: str, value: str, pos: tuple[int, int]) -> Any:
    """A plain value from a scalar, its resolved tag and its (line, column)."""
    if tag in (_TAG + "str", _TAG + "timestamp"):
        return value
    if tag == _TAG + "null":
        return None
    if tag == _TAG + "bool":
        return value.lower() in ("true", "yes", "on", "y")  # the last three: %YAML 1.1 only
    if tag == _TAG + "int":
        v = value.replace("_", "")
        if len(v.lstrip("+-")) > LIMITS.int_digits:
            line, col = pos
            raise _err(
                file,
                f"integer of {len(v)} digits is too large",
                line,
                col,
                fix="Kubernetes integers are 64-bit: use a value below 2^63",
            )
        sign = -1 if v.startswith("-") else 1
        v = v.lstrip("+-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(v[:2].lower(), 10)
        return sign * int(v[2:] if base != 10 else v, base)
    if tag == _TAG + "float":
        low = value.lower().replace("_", "")
        number = (
            math.nan
            if low in (".nan", "nan")
            else math.copysign(math.inf, -1.0 if low.startswith("-") else 1.0)
            if low.lstrip("+-") in (".inf", "inf")
            else float(low)
        )
        if not math.isfinite(number):
            # JSON, and so Kubernetes, has no NaN or infinity; a duration of .nan would skip
            # a soak. Refused here, once, for every field.
            line, col = pos
            raise _err(
                file,
                f"{value} is not a finite number",
                line,
                col,
                fix="write a finite number (Kubernetes objects are JSON: no NaN or infinity)",
            )
        return number
    line, col = pos
    raise _err(file, f"unsupported YAML tag {tag}", line, col, fix="remove the explicit tag")


def iter_leaves(data: Any, path: PathKey = ()) -> Iterator[tuple[PathKey, Any]]:
    """Every leaf (scalar, empty map/list) of ``data`` with its path."""
    if isinstance(data, dict) and data:
        for k, v in data.items():
            yield from iter_leaves(v, (*path, k))
    elif isinstance(data, list) and data:
        for i, v in enumerate(data):
            yield from iter_leaves(v, (*path, i))
    else:
        yield path, data


def dotted(path: PathKey) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out
