"""The one pull-request comment: summary first, details folded, found by its marker, never over
the forge's size limit."""

from __future__ import annotations

from gitops_gpu.rollout import pr_comment

HEAD = "0d7061c2b8a4" + "0" * 28


def test_summary_first_details_folded_marker_on_top() -> None:
    body = pr_comment.render(
        HEAD,
        "preflight passed (0 errors, 1 warnings)",
        ["**drains 16 nodes**", "clean (1 warnings)"],
        [("Plan", "stage canary:\n  pool canary ...")],
    )
    lines = body.splitlines()
    assert lines[0] == pr_comment.MARKER
    assert lines[1] == "**gitops-gpu** for `0d7061c2b8a4`: preflight passed (0 errors, 1 warnings)"
    assert lines[3:5] == ["- **drains 16 nodes**", "- clean (1 warnings)"]
    assert "<details><summary>Plan</summary>" in body and "```\nstage canary:" in body


def test_a_125_pool_plan_is_cut_to_the_limit_and_keeps_its_summary() -> None:
    plan = "\n".join(f"  pool pool-{i:03d}: driver upgrade ... [1 at a time]" for i in range(125))
    big = "\n".join([plan] * 40)  # ~250 KB of details
    body = pr_comment.render(HEAD, "preflight passed", ["**cordons 2000 nodes**"], [("P", big)])
    assert len(body) <= pr_comment.LIMITS["github"]
    assert "- **cordons 2000 nodes**" in body
    assert "more lines: run `gitops-gpu check --base <base>` for all of it)" in body
    small = pr_comment.render(HEAD, "ok", ["x"], [("P", plan)])
    assert "more lines" not in small and plan in small  # under the limit: nothing cut


def test_a_fence_in_the_text_cannot_end_the_block_early() -> None:
    body = pr_comment.render(HEAD, "ok", [], [("P", "a\n```\n<script>")])
    assert body.count("```") == 2


def test_ours_is_the_comment_with_the_marker() -> None:
    comments = [
        {"id": 1, "body": "LGTM"},
        {"id": 2, "body": f"{pr_comment.MARKER}\nold plan"},
        {"id": 3, "body": f"quoting: {pr_comment.MARKER}"},
    ]
    found = pr_comment.ours(comments)
    assert found is not None and found["id"] == 2
    assert pr_comment.ours([{"id": 1, "body": None}]) is None
