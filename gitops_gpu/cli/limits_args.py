"""``--max-*`` flags: what reading one fleet repo may cost (docs/fleet-repo.md, "Limits")."""

from __future__ import annotations

import argparse

from gitops_gpu.fleet import yamlio

_FLAGS = (
    ("--max-file-bytes", "file_bytes", "bytes per fleet file"),
    ("--max-repo-bytes", "repo_bytes", "bytes of all fleet files of one commit together"),
    ("--max-yaml-depth", "depth", "nesting of maps and lists in one YAML document"),
    ("--max-yaml-nodes", "nodes", "values (scalars, maps, lists) in one YAML document"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    defaults = yamlio.Limits()
    for flag, attr, what in _FLAGS:
        p.add_argument(
            flag,
            type=_positive,
            default=None,
            metavar="N",
            help=f"limit on {what} (default {getattr(defaults, attr)})",
        )


def apply(args: argparse.Namespace) -> None:
    values = {attr: getattr(args, attr_name(flag)) for flag, attr, _ in _FLAGS}
    yamlio.configure(**{k: v for k, v in values.items() if v is not None})


def attr_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
