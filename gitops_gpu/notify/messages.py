"""The two message formats: Slack-compatible (incoming webhooks; Mattermost and others accept
it too) and plain JSON (schema ``gitops-gpu.notification/v1``, docs/notifications.md). One
message carries one transition, or a digest of several when the rate limit held them back."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gitops_gpu.notify import FORMATS, SCHEMA
from gitops_gpu.notify.transitions import Transition, headline
from gitops_gpu.timefmt import stamp

_ICON = {"success": ":white_check_mark:", "failure": ":x:", "error": ":warning:"}


def render(fmt: str, transitions: Sequence[Transition], link: str = "") -> dict[str, Any]:
    """The body to POST; ``link`` is the web view's base URL ("" for none)."""
    assert fmt in FORMATS, fmt
    if fmt == "slack":
        return slack(transitions, link)
    return plain(transitions, link)


def _commit_link(link: str, sha: str) -> str:
    return f"{link.rstrip('/')}/commit/{sha}" if link else ""


def _changed(t: Transition) -> str:
    before = t.previous_phase or t.previous_state or "nothing recorded"
    return f"{before} -> {t.phase or t.state}"


def _why(t: Transition) -> list[str]:
    """Lines saying why a stage halted: its verdict's description, then the failing nodes."""
    lines = [t.description] if t.description else []
    for n in t.failing:
        rung = f" {n.rung}" if n.rung else ""
        lines.append(f"{n.node} ({n.pool}){rung}: {n.reason}")
    if t.more_failing:
        lines.append(f"and {t.more_failing} more nodes not healthy")
    return lines


def slack(transitions: Sequence[Transition], link: str = "") -> dict[str, Any]:
    lines = []
    for t in transitions:
        icon = _ICON.get(t.state, ":hourglass_flowing_sand:")
        url = _commit_link(link, t.commit)
        title = _escape(headline(t))
        if url:
            title = f"<{url}|{title}>"
        subject = f" {_escape(t.subject)}" if t.subject else ""
        text = f"{icon} *{title}*{subject}\n{_changed(t)}"
        why = _why(t)
        if why:
            text += "\n" + "\n".join(f"> {_escape(w)}" for w in why)
        lines.append(text)
    fallback = (
        headline(transitions[0])
        if len(transitions) == 1
        else f"{len(transitions)} rollout transitions"
    )
    return {
        "text": fallback,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": line[:3000]}} for line in lines
        ][:50],  # Slack's limits: 3,000 characters a section, 50 blocks a message
    }


def _escape(text: str) -> str:
    """Slack's three control characters in mrkdwn."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain(transitions: Sequence[Transition], link: str = "") -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "transitions": [
            {
                "commit": t.commit,
                "subject": t.subject,
                "stage": t.stage,
                "cluster": t.cluster,
                "context": t.context,
                "state": t.state,
                "phase": t.phase,
                "previous": {"state": t.previous_state, "phase": t.previous_phase},
                "description": t.description,
                "at": stamp(datetime.fromtimestamp(t.at, UTC)),
                "pools": list(t.pools),
                "nodes": dict(t.nodes),
                "failing": [
                    {"node": n.node, "pool": n.pool, "rung": n.rung, "reason": n.reason}
                    for n in t.failing
                ],
                "moreFailing": t.more_failing,
                "url": _commit_link(link, t.commit),
            }
            for t in transitions
        ],
    }
