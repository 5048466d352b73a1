"""What a pass's written statuses announce, and the two message formats that carry it."""

from __future__ import annotations

import json
from dataclasses import replace

from ui_facts import NEW, OLD, T0, facts, node, pool

from gitops_gpu.components.health import Health
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.notify import SCHEMA, messages
from gitops_gpu.notify.transitions import MAX_NODES, headline, of_pass
from gitops_gpu.rollout.authentic import Judged
from gitops_gpu.rollout.inputs import Commit, PoolObservation
from gitops_gpu.rollout.phases import Phase, pending_description
from gitops_gpu.rollout.span import cluster_context
from gitops_gpu.rollout.status import (
    PREFLIGHT_CONTEXT,
    CommitStatus,
    approval_context,
    stage_context,
)
from gitops_gpu.ui.facts import PassFacts
from gitops_gpu_dev import paths

SUBJECT = "driver 580.126.20 for the canary"
AT = T0 + 180


def _wrote(*written: CommitStatus, sick: int = 1) -> PassFacts:
    return replace(facts(sick=sick), written=written, subjects={NEW: SUBJECT})


def _pending(stage: str, phase: Phase, detail: str = "") -> CommitStatus:
    return CommitStatus(
        NEW, stage_context(stage), "pending", pending_description(stage, phase, AT, detail), "", AT
    )


def test_a_pending_status_rewritten_in_the_same_phase_is_not_a_transition() -> None:
    again = _pending("canary", Phase.ROLLING_OUT, "3/4 nodes on 580.126.20")
    assert of_pass(_wrote(again)) == []


def test_a_new_phase_is_a_transition_from_the_phase_the_record_held() -> None:
    (t,) = of_pass(_wrote(_pending("canary", Phase.SOAKING)))
    assert (t.commit, t.stage, t.state, t.phase) == (NEW, "canary", "pending", "soaking")
    assert (t.previous_state, t.previous_phase) == ("pending", "rolling out")
    assert t.subject == SUBJECT
    assert t.pools == ("canary",)
    assert t.nodes == {"Degraded": 1, "Healthy": 1}
    assert t.failing == ()  # only a failure says which nodes held it
    assert headline(t) == f"canary: {NEW[:12]} soaking"


def test_a_verdict_on_a_context_the_record_had_nothing_for_is_a_transition() -> None:
    done = CommitStatus(NEW, stage_context("inference"), "success", "inference: 1/1", "", AT)
    (t,) = of_pass(_wrote(done))
    assert (t.previous_state, t.previous_phase, t.phase) == ("", "", "")
    assert headline(t) == f"inference: {NEW[:12]} succeeded"
    assert t.at == AT


def test_a_failure_names_the_nodes_that_held_the_stage_worst_first_and_counts_the_rest() -> None:
    failed = CommitStatus(NEW, stage_context("canary"), "failure", "canary: 7 degraded", "", AT)
    (t,) = of_pass(_wrote(failed, sick=MAX_NODES + 2))
    assert len(t.failing) == MAX_NODES and t.more_failing == 2
    first = t.failing[0]
    assert (first.node, first.pool, first.rung) == ("canary-000", "canary", "device-plugin")
    assert first.reason == "plugin pod CrashLoopBackOff"
    assert "canary-ok" not in {n.node for n in t.failing}
    assert headline(t) == f"canary: {NEW[:12]} failed"


def test_preflight_is_announced_and_approvals_and_unknown_stages_are_not() -> None:
    ran = CommitStatus(NEW, PREFLIGHT_CONTEXT, "failure", "pools/a.yaml:3 spec.driver", "", AT)
    approved = CommitStatus(NEW, approval_context("training"), "success", "approved by ops")
    gone = CommitStatus(NEW, stage_context("no-such-stage"), "success", "?")
    (t,) = of_pass(_wrote(ran, approved, gone))
    assert (t.stage, t.cluster, t.state) == ("preflight", None, "failure")
    assert headline(t) == f"preflight: {NEW[:12]} failed"


def test_a_stage_part_of_a_multi_cluster_fleet_names_its_cluster_and_only_its_pools() -> None:
    compiled = compile_fleet(
        load_repo(paths.fleet_example().parent / "fleet-repo-example-two-clusters"), NEW
    )
    health = {p: pool(p, [node(f"{p}-0", Health.HEALTHY)]) for p in ("canary", "infer-l40s")}
    part = CommitStatus(NEW, cluster_context("fleet", "staging"), "success", "staging part")
    f = PassFacts(
        1,
        AT,
        "ok",
        NEW,
        cluster="staging",
        commits=(Commit(NEW, True),),
        compiled=compiled,
        judged=Judged([]),
        pools={p: PoolObservation(p, NEW, True, 1, 1) for p in health},
        health=health,
        written=(part,),
    )
    (t,) = of_pass(f)
    assert (t.stage, t.cluster, t.pools) == ("fleet", "staging", ("infer-l40s",))
    assert headline(t) == f"fleet (staging): {NEW[:12]} succeeded"


def test_the_json_message_carries_every_field_of_the_schema() -> None:
    failed = CommitStatus(NEW, stage_context("canary"), "failure", "canary: 1 degraded", "", AT)
    body = messages.render("json", of_pass(_wrote(failed)), "https://gpu.example/ui/")
    assert json.loads(json.dumps(body)) == {
        "schema": SCHEMA,
        "transitions": [
            {
                "commit": NEW,
                "subject": SUBJECT,
                "stage": "canary",
                "cluster": None,
                "context": stage_context("canary"),
                "state": "failure",
                "phase": "",
                "previous": {"state": "pending", "phase": "rolling out"},
                "description": "canary: 1 degraded",
                "at": "2027-01-15T08:03:00Z",
                "pools": ["canary"],
                "nodes": {"Degraded": 1, "Healthy": 1},
                "failing": [
                    {
                        "node": "canary-000",
                        "pool": "canary",
                        "rung": "device-plugin",
                        "reason": "plugin pod CrashLoopBackOff",
                    }
                ],
                "moreFailing": 0,
                "url": f"https://gpu.example/ui/commit/{NEW}",
            }
        ],
    }


def test_the_slack_message_links_the_commit_says_why_and_escapes_what_people_wrote() -> None:
    failed = CommitStatus(NEW, stage_context("canary"), "failure", "<!channel> & more", "", AT)
    f = replace(_wrote(failed), subjects={NEW: "bump <driver> & co"})
    body = messages.render("slack", of_pass(f), "https://gpu.example/ui")
    assert body["text"] == f"canary: {NEW[:12]} failed"
    (block,) = body["blocks"]
    text = block["text"]["text"]
    assert block["text"]["type"] == "mrkdwn"
    assert text.startswith(
        f":x: *<https://gpu.example/ui/commit/{NEW}|canary: {NEW[:12]} failed>*"
        " bump &lt;driver&gt; &amp; co\nrolling out -> failure"
    )
    assert "> &lt;!channel&gt; &amp; more" in text  # no @channel from a commit's description
    assert "> canary-000 (canary) device-plugin: plugin pod CrashLoopBackOff" in text
    assert "<!channel>" not in text


def test_a_digest_is_one_slack_message_with_a_section_per_transition() -> None:
    soaking = _pending("canary", Phase.SOAKING)
    done = CommitStatus(OLD, stage_context("inference"), "success", "inference: 1/1", "", AT)
    body = messages.render("slack", of_pass(_wrote(soaking, done)))
    assert body["text"] == "2 rollout transitions"
    texts = [b["text"]["text"] for b in body["blocks"]]
    assert texts[0].startswith(f":hourglass_flowing_sand: *canary: {NEW[:12]} soaking*")
    assert texts[1].startswith(f":white_check_mark: *inference: {OLD[:12]} succeeded*")
    assert "<http" not in "".join(texts)  # no --notify-link: no links
