"""``--notify-*`` flags: the outgoing notification webhook (docs/notifications.md)."""

from __future__ import annotations

import argparse
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.metrics import Metrics
from gitops_gpu.notify import FORMATS, SCHEMA

if TYPE_CHECKING:
    from gitops_gpu.notify.sender import Notifier


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--notify-url-file",
        type=Path,
        metavar="FILE",
        help="a file holding the webhook URL to send one message per commit per stage "
        "transition to (a secret: a Slack URL carries its token); off without it",
    )
    p.add_argument(
        "--notify-format",
        choices=FORMATS,
        default="slack",
        help="slack: Slack-compatible incoming-webhook JSON; json: the plain schema "
        f"{SCHEMA} (default slack)",
    )
    p.add_argument(
        "--notify-key-file",
        type=Path,
        metavar="FILE",
        help="an HMAC key: each body is signed in X-Gitops-Gpu-Signature-256 (sha256=<hex>)",
    )
    p.add_argument(
        "--notify-link",
        default="",
        metavar="URL",
        help="the web view's address as people reach it (e.g. https://gpu.example/ui): "
        "messages link each commit's page",
    )
    p.add_argument(
        "--notify-per-minute",
        type=float,
        default=12.0,
        metavar="N",
        help="messages per minute at most, bursts of 5; transitions held back go out "
        "together as one digest (12)",
    )


def _secret(path: Path, flag: str) -> str:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise GitopsGpuError(
            f"{flag} {path}: cannot be read ({type(exc).__name__})",
            fix=f"point {flag} at a readable file (a mounted Secret)",
        ) from None
    if not text:
        raise GitopsGpuError(f"{flag} {path}: the file is empty", fix="write the value into it")
    return text


def notifier(args: argparse.Namespace, metrics: Metrics) -> Notifier | None:
    """The notifier the flags ask for (not started), None without --notify-url-file."""
    if args.notify_url_file is None:
        return None
    url = _secret(args.notify_url_file, "--notify-url-file")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GitopsGpuError(
            f"--notify-url-file {args.notify_url_file}: not an http(s) URL",
            fix="write the receiver's full URL, e.g. https://hooks.slack.com/services/...",
        )
    if args.notify_per_minute <= 0:
        raise GitopsGpuError(
            f"--notify-per-minute {args.notify_per_minute:g}: must be above 0",
            fix="give a positive rate, e.g. 12",
        )
    from gitops_gpu.notify.sender import Notifier  # noqa: PLC0415 - only when asked for

    key = _secret(args.notify_key_file, "--notify-key-file") if args.notify_key_file else None
    return Notifier(
        url,
        args.notify_format,
        key=key.encode() if key is not None else None,
        link=args.notify_link,
        per_minute=args.notify_per_minute,
        metrics=metrics,
    )
