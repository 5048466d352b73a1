"""Nobody skips the canary by writing the record or rewinding history (issue 24), on the testbed
with the GPU Operator and a git-notes record that anyone with push access can write.

The attacker has a clone of the fleet remote and no key: they append forged verdicts and an
approval to the notes and push them, then force-push main back to an older commit. Each attack
is measured from its push to the controller's Event.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_harness import Env, fast_gates, set_driver
from ruamel.yaml import YAML

from gitops_gpu.cli import main
from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.status import approval_context, stage_context

pytestmark = pytest.mark.e2e
NOTES = "refs/notes/gitops-gpu"


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def long_canary_soak(work: Path) -> None:
    yaml = YAML()
    doc = yaml.load((work / "fleet.yaml").read_text())
    for stage in doc["spec"]["stages"]:
        if stage["name"] == "canary":
            stage["gate"]["soak"] = "30m"
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(doc, fh)


def events(env: Env, reason: str, sha: str) -> list[str]:
    return [
        e["message"]
        for e in env.tb.client.list("v1", "Event", namespace="default")["items"]
        if e["reason"] == reason and sha[:12] in e["message"]
    ]


def until_event(env: Env, reason: str, sha: str, since: float, timeout: float = 60) -> float:
    env.wait(f"a {reason} Event about {sha[:7]}", lambda: bool(events(env, reason, sha)), timeout)
    return time.monotonic() - since


def say(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():  # the measured times, shown with -s
        print(text)


def forge_note(clone: Path, sha: str, lines: list[dict[str, object]]) -> None:
    """Append lines to the commit's note and push the notes ref, as anyone could."""
    git(clone, "fetch", "-q", "origin", f"+{NOTES}:{NOTES}")
    for line in lines:
        git(clone, "notes", "--ref", NOTES, "append", "-m", json.dumps(line), sha)
    git(clone, "push", "-q", "origin", f"{NOTES}:{NOTES}")


def approvers(keys: list[str]) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        fast_gates(approval=True)(work)
        yaml = YAML()
        doc = yaml.load((work / "fleet.yaml").read_text())
        for stage in doc["spec"]["stages"]:
            if stage["name"] == "training":
                stage["gate"]["approvers"] = {"keys": keys}
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(doc, fh)

    return edit


def ssh_key(tmp: Path, name: str) -> Path:
    path = tmp / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return path


@pytest.mark.parametrize("env", ["sim"], indirect=True)
def test_only_an_approver_key_approves_a_stage_on_git_notes(
    env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, mallory = ssh_key(tmp_path, "alice"), ssh_key(tmp_path, "mallory")
    line = alice.with_suffix(".pub").read_text().strip()
    first = env.remote.commit("training approved by alice's key", approvers([line]))
    env.start_nodes()
    env.controller()
    env.wait("canary and inference", lambda: env.state(first, "inference") == "success", 120)

    def awaiting() -> bool:
        mine = [s for s in env.statuses(first) if s.context == stage_context("training")]
        return bool(mine) and "awaiting approval" in mine[-1].description

    env.wait("training awaiting approval", awaiting)
    base = ["approve", first, "--stage", "training", "--repo", env.remote.url]
    base += ["--kubeconfig", env.tb.kubeconfig]
    assert main(base) == 0  # the controller's key: not an approver of this stage
    assert main([*base, "--key", str(mallory)]) == 0  # someone else's key
    time.sleep(3)  # many passes at 0.3s
    assert env.pool_commit("train-h100") is None and awaiting()
    assert main(["status", "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig]) == 0
    shown = capsys.readouterr().out
    assert shown.count("not an approver of stage training") == 2, shown
    start = time.monotonic()
    assert main([*base, "--key", str(alice)]) == 0
    env.wait("alice's approval lets training adopt", lambda: env.pool_commit("train-h100") == first)
    say(
        capsys, f"approval sealed by an approver key: adopted after {time.monotonic() - start:.1f}s"
    )
    env.wait("training passes", lambda: env.state(first, "training") == "success")


def test_forged_notes_and_a_rewound_branch_never_skip_the_canary(
    env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = env.remote.commit("fast gates", fast_gates(approval=False))
    env.start_nodes()
    env.controller()
    stages = ("canary", "inference", "training")
    env.wait("first everywhere", lambda: all(env.state(first, s) == "success" for s in stages))
    env.remote.commit("canary soaks 30m", long_canary_soak)
    bump = env.remote.commit("bump driver", set_driver("580.142.01"))

    def soaking() -> bool:
        # The controller's own (sealed) statuses: the attacker's lines are in the same note.
        mine = [s for s in env.statuses(bump) if s.context == stage_context("canary") and s.seal]
        mark = read_mark(mine[-1]) if mine else None
        return mark is not None and mark.phase is Phase.SOAKING

    env.wait("the bump soaking on the canary", soaking, 120)
    attacker = tmp_path / "attacker"
    git(tmp_path, "clone", "-q", env.remote.url, str(attacker))
    now = time.time()

    # 1. A forged canary success (and approvals) for the bump: the fleet must not take it.
    forged = [
        {"context": stage_context("canary"), "state": "success", "created_at": now},
        {"context": approval_context("training"), "state": "success", "created_at": now},
    ]
    start = time.monotonic()
    forge_note(attacker, bump, forged)
    took = until_event(env, "RecordStatusIgnored", bump, start)
    say(capsys, f"forged canary success: ignored, Event after {took:.1f}s")
    deadline = time.monotonic() + 8  # many passes at 0.3s
    while time.monotonic() < deadline:
        assert env.pool_commit("infer-l40s") == first, "the fleet adopted a forged promotion"
        time.sleep(0.3)
    assert soaking(), "the canary's own soak was disturbed"

    # 2. A forged failure for the bump: the canary must not roll back.
    start = time.monotonic()
    forge_note(attacker, bump, [{"context": stage_context("canary"), "state": "failure"}])
    env.wait(
        "the forged failure is ignored",
        lambda: len(events(env, "RecordStatusIgnored", bump)) >= 3,
    )
    say(capsys, f"forged canary failure: ignored, Event after {time.monotonic() - start:.1f}s")
    time.sleep(3)
    assert env.pool_commit("canary") == bump and soaking()

    # `status` names what it ignored and why.
    assert main(["status", "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig]) == 0
    shown = capsys.readouterr().out
    assert f"ignored: gitops-gpu/stage/canary success on {bump[:12]}" in shown, shown
    assert "unsigned (not written by a trusted controller)" in shown
    assert "names no approvers, so only the controller's key can approve" in shown

    # 3. main force-pushed back to the first commit: nothing moves until a person accepts it.
    git(env.remote.work, "reset", "-q", "--hard", first)
    start = time.monotonic()
    git(env.remote.work, "push", "-q", "--force", "origin", "main")
    took = until_event(env, "HistoryRewritten", first, start)
    say(capsys, f"force-push back to {first[:7]}: held, Event after {took:.1f}s")
    held = env.record.latest(first, "gitops-gpu/history")
    assert held is not None and held.state == "failure"
    moved = f"history rewritten: main moved from {bump[:7]} to {first[:7]}, not a descendant"
    assert held.description.startswith(moved), held
    time.sleep(3)
    assert env.pool_commit("canary") == bump  # the rewind did not reach the canary
    assert main(["status", "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig]) == 0
    assert "HELD: history rewritten: main moved from" in capsys.readouterr().out
    accept = ["accept-history", first, "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig]
    assert main(accept) == 0
    env.wait("the accepted history followed", lambda: env.pool_commit("canary") == first, 60)
    accepted = env.record.latest(first, "gitops-gpu/history")
    assert accepted is not None and accepted.state == "success"
    assert accepted.description.startswith("history accepted by ")
