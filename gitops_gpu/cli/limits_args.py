"""``--max-*`` flags: what reading one fleet repo may cost (docs/fleet-repo.md, "Limits"), and
what one answer from a network peer may cost (peer_limits.py)."""

from __future__ import annotations

import argparse

from gitops_gpu import peer_limits
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
            type=positive,
            default=None,
            metavar="N",
            help=f"limit on {what} (default {getattr(defaults, attr)})",
        )


_PEER_FLAGS = (
    ("--max-refs-bytes", "refs_bytes", int, "bytes of the git remote's ref advertisement"),
    ("--refs-deadline", "refs_deadline", float, "seconds for one read of the remote's refs"),
    ("--fetch-deadline", "fetch_deadline", float, "seconds for one git fetch or push"),
    ("--max-response-bytes", "response_bytes", int, "bytes of one forge or Prometheus answer"),
    ("--max-statuses", "statuses", int, "commit statuses read for one commit"),
)


def add_peer_arguments(p: argparse.ArgumentParser) -> None:
    defaults = peer_limits.PeerLimits()
    for flag, attr, kind, what in _PEER_FLAGS:
        p.add_argument(
            flag,
            type=positive if kind is int else positive_seconds,
            default=None,
            metavar="N",
            help=f"limit on {what} (default {getattr(defaults, attr)})",
        )


def apply_peer(args: argparse.Namespace) -> None:
    values = {attr: getattr(args, attr_name(flag)) for flag, attr, _, _ in _PEER_FLAGS}
    peer_limits.configure(**{k: v for k, v in values.items() if v is not None})


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def apply(args: argparse.Namespace) -> None:
    values = {attr: getattr(args, attr_name(flag)) for flag, attr, _ in _FLAGS}
    yamlio.configure(**{k: v for k, v in values.items() if v is not None})


def attr_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
