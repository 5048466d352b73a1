"""The web view's pages from one pass's facts: what each page says, paging, filters, escaping
and the colours' contrast (no browser: tests/e2e/test_ui_browser.py drives one)."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest
from ui_facts import NEW, OLD, T0, facts, node, pool

from gitops_gpu.components.health import Health, NodeHealth, RungResult
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.rollout.authentic import Judged
from gitops_gpu.rollout.inputs import Commit, PoolObservation
from gitops_gpu.rollout.span import cluster_context
from gitops_gpu.rollout.status import CommitStatus, stage_context
from gitops_gpu.sync import slim
from gitops_gpu.ui import model, pages
from gitops_gpu.ui.app import WebView
from gitops_gpu.ui.facts import PassFacts
from gitops_gpu_dev import paths


def _get(view: WebView, target: str) -> str:
    code, body, ctype = view.page(target)
    assert (code, ctype) == (200, "text/html; charset=utf-8"), body
    return body.decode()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_pipeline_shows_stages_in_order_with_what_each_runs_takes_and_waits_for() -> None:
    view = WebView()
    view.publish(facts())
    page = _get(view, "/ui/")
    assert page.index('aria-label="Stage canary"') < page.index('aria-label="Stage inference"')
    assert page.index('aria-label="Stage inference"') < page.index('aria-label="Stage training"')
    text = _text(page)
    assert f"runs {OLD[:7]} success" in text
    assert f"taking {NEW[:7]} pending : canary: rolling out" in text
    assert f"waits: training: {OLD[:7]} awaiting approval" in text
    assert "gate: approval required" in text
    assert "first failure: canary-000: plugin pod CrashLoopBackOff" in text
    assert "<main" in page and "<header" in page and 'aria-label="Breadcrumb"' in page


def test_a_stage_lists_only_its_nodes_that_are_not_healthy_worst_first_and_paged() -> None:
    view = WebView()
    view.publish(facts(sick=230))
    text = _text(_get(view, "/ui/stage/canary"))
    assert "Nodes not healthy (230)" in text
    assert "canary-ok" not in text
    assert "canary-000 canary Degraded device-plugin plugin pod CrashLoopBackOff" in text
    assert "page 1 of 3" in text
    body = _get(view, "/ui/stage/canary?page=3")
    assert body.count('href="/ui/node/canary-') == 30
    assert "page 3 of 3" in _text(body)


def test_the_node_filter_keeps_one_state_and_the_search_matches_name_rung_or_reason() -> None:
    view = WebView()
    view.publish(facts(sick=3))
    assert "Nodes not healthy (0)" in _text(_get(view, "/ui/pool/canary?health=Progressing"))
    assert "Nodes not healthy (3)" in _text(_get(view, "/ui/pool/canary?q=crashloop"))
    assert "Nodes not healthy (1)" in _text(_get(view, "/ui/pool/canary?q=canary-002"))
    assert 'value="canary-002"' in _get(view, "/ui/pool/canary?q=canary-002")  # kept in the form


def test_a_node_shows_every_rung_and_how_long_it_has_been_in_its_state() -> None:
    view = WebView()
    first = facts(seq=1)
    view.publish(first)
    later = facts(seq=2)
    view.publish(PassFacts(**{**later.__dict__, "at": first.at + 3600}))
    text = _text(_get(view, "/ui/node/canary-000"))
    assert "driver Healthy 580.126.20" in text
    assert "device-plugin Degraded plugin pod CrashLoopBackOff" in text
    assert "since 2027-01-15" in text  # first seen degraded in the first pass, not the second
    stage = _text(_get(view, "/ui/stage/canary"))
    assert "CrashLoopBackOff 1h" in stage  # the "for" column: an hour in this state


def test_a_commit_shows_its_record_with_who_sealed_it_and_what_was_ignored() -> None:
    view = WebView()
    view.publish(facts())
    text = _text(_get(view, f"/ui/commit/{NEW[:7]}"))
    assert f"{stage_context('canary')} pending canary: rolling out" in text
    assert "ctl-key" in text
    assert f"{stage_context('training')} success not sealed by a trusted controller mallory" in text
    assert "preflight success clean" in text


def test_what_the_pass_did_not_see_is_a_404_and_values_are_escaped() -> None:
    view = WebView()
    assert view.page("/ui/node/x")[0] == 404  # no pass yet
    assert "has not finished a pass" in _get(view, "/ui/")
    view.publish(facts(reason="<script>alert(1)</script>"))
    assert view.page("/ui/node/no-such-node")[0] == 404
    assert view.page("/ui/stage/nope")[0] == 404
    assert view.page("/ui/commit/" + "c" * 40)[0] == 404
    page = _get(view, "/ui/stage/canary")
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_live_update_asks_for_main_alone() -> None:
    view = WebView()
    view.publish(facts())
    code, body, _ = view.page("/ui/", fragment=True)
    assert code == 200
    assert body.startswith(b"<h1>Pipeline</h1>") and b"<script>" not in body


def test_an_idle_pass_keeps_the_version_and_what_a_page_shows_changes_it() -> None:
    view = WebView()
    first = facts(seq=1)
    view.publish(first)
    v1 = view.version
    assert f'data-version="{v1}" data-live="version"' in _get(view, "/ui/")
    view.publish(replace(first, seq=2, at=first.at + 5))  # same objects, a later clock
    assert view.version == v1
    view.publish(replace(first, seq=3, head=OLD))
    assert view.version != v1
    view.publish(first)
    assert view.version == v1  # back to what it was
    sicker = dict(first.health)
    sicker["canary"] = pool("canary", [node("canary-000", Health.DEGRADED, "xid 79")])
    view.publish(replace(first, seq=4, health=sicker))  # a new health object: a move
    assert view.version != v1
    moved = view.version
    assert first.judged is not None
    status = CommitStatus(NEW, stage_context("training"), "pending", "training: rolling out")
    trusted = Judged([*first.judged.trusted, status], list(first.judged.ignored))
    view.publish(replace(first, seq=5, health=sicker, judged=trusted))  # a new verdict
    assert view.version not in (v1, moved)


def test_a_nodes_page_follows_every_pass() -> None:
    view = WebView()
    view.publish(facts())
    assert 'data-live="pass"' in _get(view, "/ui/node/canary-000")


def test_publishing_tells_every_listener_the_pass_number() -> None:
    view, heard = WebView(), list[int]()
    view.listen(heard.append)
    view.publish(facts(seq=7))
    assert heard == [7]


def _luminance(colour: str) -> float:
    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


@pytest.mark.parametrize("pair", [*pages.PALETTE.values(), pages.BODY, pages.LINK])
def test_text_colours_meet_wcag_aa_contrast(pair: tuple[str, str]) -> None:
    light, dark = sorted(map(_luminance, pair), reverse=True)
    assert (light + 0.05) / (dark + 0.05) >= 4.5, pair


def test_the_first_failing_rung_skips_healthy_and_switched_off_ones() -> None:
    node = NodeHealth(
        "n",
        Health.DEGRADED,
        "x",
        (
            RungResult("driver", Health.HEALTHY, ""),
            RungResult("dcgm", Health.DEGRADED, "off", skipped=True),
            RungResult("mig", Health.DEGRADED, "layout differs"),
        ),
    )
    assert model.first_rung(node) == ("mig", "layout differs")


def test_a_controller_of_one_cluster_shows_its_pools_and_each_clusters_part() -> None:
    compiled = compile_fleet(
        load_repo(paths.fleet_example().parent / "fleet-repo-example-two-clusters"), NEW
    )
    health = {p: pool(p, [node(f"{p}-0", Health.HEALTHY)]) for p in ("canary", "infer-l40s")}
    obs = {p: PoolObservation(p, OLD, True, 1, 1) for p in health}
    parts = [
        CommitStatus(OLD, cluster_context("fleet", "staging"), "success", "staging part"),
        CommitStatus(OLD, cluster_context("fleet", "prod-eu"), "pending", "prod-eu part"),
    ]
    view = WebView()
    view.publish(
        PassFacts(
            1,
            T0,
            "ok",
            OLD,
            cluster="staging",
            commits=(Commit(OLD, True),),
            compiled=compiled,
            judged=Judged(parts),
            pools=obs,
            health=health,
        )
    )
    card = _text(_get(view, "/ui/stage/fleet"))
    assert f"cluster staging: {OLD[:7]} success" in card
    assert f"cluster prod-eu: {OLD[:7]} pending" in card
    assert "1/1 nodes healthy in 1 pools" in card  # infer-l40s; train-h100 is prod-eu's
    assert "train-h100" not in card


def test_a_cached_reports_gpus_show_as_the_json_the_agent_wrote() -> None:
    """The cache keeps GPUs as records: the node page still shows them as JSON fields."""
    gpu = {"index": 0, "uuid": "GPU-1a2b", "state": "ok", "migMode": {"current": "disabled"}}
    cached = slim.report({"metadata": {"name": "n"}, "status": {"gpus": [gpu]}})
    text = html.unescape(pages.pretty(cached["status"]))
    assert '"uuid": "GPU-1a2b"' in text and '"migMode": {' in text
    assert "Gpu(" not in text
