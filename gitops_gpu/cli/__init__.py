"""`gitops-gpu`: the command line. Each command group lives in its own module under cli/
and registers its subparsers; this module only dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from gitops_gpu import logs
from gitops_gpu.cli.exits import Exit
from gitops_gpu.errors import GitopsGpuError

# Command modules, in the order `--help` lists them.
COMMAND_MODULES = ("check", "sync", "nodes", "agent", "rollout", "controller")
# Commands other distributions add (the dev tools: `testbed`, `demo`): name -> module.
PLUGIN_GROUP = "gitops_gpu.commands"
# command -> the module that registers it: a run imports only its own command's module, so
# `gitops-gpu controller` never loads the testbed or the demo (tests keep this table honest).
COMMANDS = {
    "check": "check",
    "compile": "check",
    "plan": "sync",
    "apply": "sync",
    "agent": "agent",
    "nodes": "nodes",
    "status": "rollout",
    "approve": "rollout",
    "accept-history": "rollout",
    "pause": "rollout",
    "resume": "rollout",
    "rollback": "rollout",
    "controller": "controller",
}


def plugins() -> dict[str, str]:
    """Commands installed by other distributions (entry points), name -> module."""
    return {ep.name: ep.value for ep in entry_points(group=PLUGIN_GROUP)}


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand argv names (the first word that is not a global option)."""
    words = iter(argv)
    for word in words:
        if word == "--log-format":
            next(words, None)  # its value
        elif not word.startswith("-"):
            return word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or with ``command`` only the module that registers it."""
    parser = argparse.ArgumentParser(prog="gitops-gpu", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object per log line (structured logs)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    if command in COMMANDS:
        modules = [f"gitops_gpu.cli.{COMMANDS[command]}"]
    else:
        extra = plugins()
        core = [f"gitops_gpu.cli.{m}" for m in COMMAND_MODULES]
        modules = [extra[command]] if command in extra else core + sorted(set(extra.values()))
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name.startswith("gitops_gpu.") or exc.name != name.split(".")[0]:
                raise
            continue  # a plugin's metadata without its code (a half-removed dev install)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(words))
    args = parser.parse_args(words)
    logs.configure(verbose=args.verbose, fmt=args.log_format)
    try:
        rc: int = args.func(args)
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    return rc
