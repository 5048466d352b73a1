"""`gitops-gpu`: the command line. Each command group lives in its own module under cli/
and registers its subparsers; this module only dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gitops_gpu import logs
from gitops_gpu.cli.exits import Exit
from gitops_gpu.errors import GitopsGpuError

# Command modules, in the order `--help` lists them.
COMMAND_MODULES = ("check", "sync", "operator", "nodes", "agent", "rollout", "controller")
# Commands other distributions add (the dev tools: `testbed`, `demo`): name -> module.
PLUGIN_GROUP = "gitops_gpu.commands"
# command -> the module that registers it: a run imports only its own command's module, so
# `gitops-gpu controller` never loads the testbed or the demo (tests keep this table honest).
COMMANDS = {
    "check": "check",
    "compile": "check",
    "plan": "sync",
    "apply": "sync",
    "operator": "operator",
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


# command -> its one line in `gitops-gpu --help`, which lists the commands without importing
# any of their modules (test_cli_startup.py checks these against what each module registers).
SUMMARIES = {
    "check": "preflight a fleet repo: shape, CRD schema, compile rules, version matrix, plan "
    "against --base",
    "compile": "write the compiled objects as YAML, one file per object",
    "plan": "what would change in the cluster, per pool and field",
    "apply": "preflight, then server-side apply what drifted",
    "operator": "the cluster's GPU Operator release (gpuOperator): operator apply",
    "nodes": "per-node health: the first failing component rung",
    "agent": "node agent: publish this node's NVML facts (NodeGPUReport)",
    "status": "per stage: commit, state, gate; per pool: node health",
    "approve": "approve COMMIT for a stage whose gate requires it",
    "accept-history": "follow a branch head that does not descend from the last one (after a "
    "force-push)",
    "pause": "pause every stage at the next pass (stop the line: docs/rollout.md)",
    "resume": "resume every stage at the next pass (stop the line: docs/rollout.md)",
    "rollback": "put a stage back on its last good (or a given) commit",
    "controller": "poll the fleet repo and roll out canary-first",
}


DESCRIPTION = """\
GitOps for NVIDIA GPU Operator fleets: a git repo of per-nodepool ClusterPolicies, compiled
into what the operator honours and rolled out canary first, stage by stage."""
EPILOG = """\
a pull request's loop:
  gitops-gpu check fleet-repo --base origin/main    preflight, with file:line findings
  gitops-gpu plan --repo fleet-repo --kubeconfig K  what would change, per pool and field
in the cluster:
  gitops-gpu controller --repo URL                  follow the branch, stage by stage
  gitops-gpu status --repo URL                      where each stage stands, and why

`gitops-gpu COMMAND --help` for a command's options; docs/ for the rest."""


def version() -> str:
    from importlib import metadata  # noqa: PLC0415 - 35 ms, only --version and plugins need it

    try:
        return metadata.version("gitops-gpu")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def plugins() -> dict[str, str]:
    """Commands installed by other distributions (entry points), name -> module."""
    from importlib import metadata  # noqa: PLC0415 - see version()

    return {ep.name: ep.value for ep in metadata.entry_points(group=PLUGIN_GROUP)}


class _Version(argparse.Action):
    """argparse's "version" action, with the version looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(f"gitops-gpu {version()}\n")
        parser.exit()


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand argv names (the first word that is not a global option)."""
    words = iter(argv)
    for word in words:
        if word == "--log-format":
            next(words, None)  # its value
        elif not word.startswith("-"):
            return word
    return None


def build_parser(command: str | None = None, *, listing: bool = False) -> argparse.ArgumentParser:
    """The whole CLI, or with ``command`` only the module that registers it; ``listing``: the
    commands' names and summaries only, no command module imported."""
    parser = argparse.ArgumentParser(
        prog="gitops-gpu",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object per log line (structured logs)",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    if listing:
        order = sorted(COMMANDS, key=lambda c: COMMAND_MODULES.index(COMMANDS[c]))
        for name in order:
            sub.add_parser(name, help=SUMMARIES[name])
        for name, where in sorted(plugins().items()):
            sub.add_parser(name, help=f"see `gitops-gpu {name} --help` ({where.split('.')[0]})")
        return parser
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
    command = _command(words)
    # No command named (--help, --version, nothing): list the commands, import none of them.
    parser = build_parser(command, listing=command is None)
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
