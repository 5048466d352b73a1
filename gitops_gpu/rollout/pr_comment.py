"""The one pull-request comment gitops-gpu keeps per PR: what the change will do, summary first,
details folded, found again by its marker and edited in place. Pure: text in, Markdown out.

A forge caps a comment's size (GitHub 65,535 characters, Gitea the same by default, GitLab
1,000,000): the folded sections are cut, longest first, so the summary always fits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MARKER = "<!-- gitops-gpu:plan -->"
LIMITS: Mapping[str, int] = {"github": 65_535, "gitea": 65_535, "gitlab": 1_000_000}
CUT = "\n... ({lines} more lines: run `gitops-gpu check --base <base>` for all of it)"


def _fence(text: str) -> str:
    return "```\n" + text.replace("```", "``\u200b`").rstrip("\n") + "\n```"


def _section(title: str, text: str) -> str:
    return f"<details><summary>{title}</summary>\n\n{_fence(text)}\n\n</details>"


def render(
    head: str,
    verdict: str,
    summary: Sequence[str],
    details: Sequence[tuple[str, str]],
    limit: int = LIMITS["github"],
) -> str:
    """``summary``: lines shown open (the verdict's detail, the disruption summary, stage
    progress); ``details``: (title, text) sections folded away. The result is at most
    ``limit`` characters."""
    top = [MARKER, f"**gitops-gpu** for `{head[:12]}`: {verdict}", ""]
    top += [f"- {line}" for line in summary]
    sections = [list(d) for d in details]
    while True:
        body = "\n".join([*top, "", *(_section(t, x) for t, x in sections)]).rstrip() + "\n"
        if len(body) <= limit or not any(x for _, x in sections):
            return body[:limit]
        # Cut the longest section to what is left, with a line saying so.
        longest = max(range(len(sections)), key=lambda i: len(sections[i][1]))
        title, text = sections[longest]
        over = len(body) - limit
        lines = text.splitlines()
        keep = max(0, len(text) - over - len(CUT) - 20)
        kept = text[:keep].rsplit("\n", 1)[0] if keep else ""
        dropped = len(lines) - len(kept.splitlines())
        sections[longest] = [title, kept + CUT.format(lines=dropped) if kept else ""]


PLAN_TITLE = "Plan: objects and fields"
DISRUPTION_TITLE = "Disruption: nodes and workloads"


def ours(comments: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The comment gitops-gpu keeps on the PR: the first carrying the marker."""
    return next((c for c in comments if MARKER in str(c.get("body") or "")), None)
