"""Options every command spells the same way: one meaning and one parser each."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitops_gpu.fleet.models import parse_duration

if TYPE_CHECKING:
    from gitops_gpu.pass_types import Config


def duration(text: str) -> float:
    """``30s``, ``2m``, ``1h30m``, ``500ms`` or plain seconds (fleet.yaml's rules)."""
    try:
        number = float(text)
    except ValueError:
        number = None
    try:
        return parse_duration(text if number is None else number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fleet_source(p: argparse.ArgumentParser, *, rev: bool = True) -> None:
    """The fleet repo as the read verbs and the controller read it: a commit of a branch."""
    p.add_argument(
        "--repo",
        required=True,
        help="the fleet repo: a git URL (https://, ssh://, file://) or a local repo path",
    )
    p.add_argument("--branch", default="main", help="the branch the fleet is read from (main)")
    if rev:
        p.add_argument("--rev", help="commit or ref to read (default: the branch head)")
    p.add_argument(
        "--cache-dir",
        type=Path,
        help="where fetched repos are kept (default: $GITOPS_GPU_CACHE or ~/.cache/gitops-gpu)",
    )


def kubeconfig(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    default = "" if required else " (default: in-cluster, then ~/.kube/config)"
    p.add_argument(
        "--kubeconfig",
        required=required,
        help=f"kubeconfig; a multi-cluster fleet uses its clusters[].context entries{default}",
    )


def selection(p: argparse.ArgumentParser) -> None:
    sel = p.add_mutually_exclusive_group()
    sel.add_argument("--pool", help="only this pool")
    sel.add_argument("--stage", help="only the pools of this stage")


def output_format(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (text)"
    )


def operator_namespace(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--operator-namespace",
        default="gpu-operator",
        help="the GPU Operator's namespace, where its operand pods run (gpu-operator)",
    )


def status_record(p: argparse.ArgumentParser) -> None:
    """Where commit statuses (the promotion record) are read and written."""
    p.add_argument(
        "--status-backend",
        default="gitnotes",
        help="the promotion record: gitnotes (on the fleet remote) | github:OWNER/REPO | "
        "gitea:URL/OWNER/REPO | gitlab:URL/GROUP/PROJECT (docs/status-backends.md)",
    )
    p.add_argument(
        "--status-token-file",
        type=Path,
        help="the forge token for statuses (default: $GITOPS_GPU_STATUS_TOKEN)",
    )
    p.add_argument(
        "--record-key",
        type=Path,
        help="the ed25519 key that seals the controller's statuses (default: the Secret "
        "gitops-gpu-record-key in --namespace, created on first start; docs/trust.md)",
    )
    p.add_argument(
        "--record-trusted-keys",
        type=Path,
        help="more controllers whose sealed statuses count: 'ssh-ed25519 AAAA... name' lines "
        "(the other clusters' controllers; a key being rotated out)",
    )


def namespace(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--namespace",
        default="default",
        help="the controller's namespace: its Lease and the pause flag (ConfigMap "
        "gitops-gpu-control) live there (default)",
    )


def crds(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--crds", type=Path, help=f"GPU Operator CRD directory for preflight (default: {default})"
    )


def controller_config(args: argparse.Namespace, cache: str, **more: Any) -> Config:
    """The controller Config that fleet_source, status_record, namespace and (where the command
    has it) --cluster spell; fetched repos go to ``cache`` beside the default cache."""
    from gitops_gpu.pass_types import Config  # noqa: PLC0415 (every command loads options)
    from gitops_gpu.sync.source import default_cache_dir  # noqa: PLC0415

    return Config(
        repo=args.repo,
        branch=args.branch,
        namespace=args.namespace,
        cache_dir=args.cache_dir or default_cache_dir().parent / cache,
        status_backend=args.status_backend,
        status_token_file=args.status_token_file,
        record_key=args.record_key,
        record_trusted_keys=args.record_trusted_keys,
        cluster=getattr(args, "cluster", None),
        **more,
    )
