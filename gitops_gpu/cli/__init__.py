"""`gitops-gpu`: the command line. Each command group lives in its own module under cli/
and registers its subparsers; this module only dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gitops_gpu import logs
from gitops_gpu.errors import GitopsGpuError

# Command modules, in the order `--help` lists them. Missing ones are skipped so a partial
# checkout still runs the commands it has.
COMMAND_MODULES = ("check", "sync", "agent", "rollout", "controller", "demo", "testbed")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gitops-gpu", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object per log line (structured logs)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"gitops_gpu.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gitops_gpu.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(verbose=args.verbose, fmt=args.log_format)
    try:
        rc: int = args.func(args)
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return rc
