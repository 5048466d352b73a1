"""`gitops-gpu status`, `pause`/`resume` and `rollback` steering a running controller."""

from __future__ import annotations

import json
import time

import pytest
from e2e_harness import Env, fast_gates, set_driver

from gitops_gpu.cli import main
from gitops_gpu.rollout.line import LINE_CONTEXT
from gitops_gpu.rollout.status import CommitStatus

pytestmark = pytest.mark.e2e
STAGES = ("canary", "inference", "training")


def _cli(env: Env, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main([*args, "--kubeconfig", env.tb.kubeconfig])
    return rc, capsys.readouterr().out


def _repo(env: Env) -> list[str]:
    return ["--repo", env.remote.url]


def test_status_pause_resume_rollback(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    first = env.remote.commit("fast gates", fast_gates())
    env.start_nodes()
    env.controller()
    env.wait("first rollout", lambda: all(env.state(first, s) == "success" for s in STAGES))

    rc, out = _cli(env, capsys, "status", *_repo(env), "--format", "json")
    assert rc == 0
    status = json.loads(out)
    assert status["paused"] is False
    canary = next(s for s in status["stages"] if s["stage"] == "canary")
    assert canary["commit"] == first and canary["state"] == "success"
    assert canary["pools"][0]["healthy"] == canary["pools"][0]["total"] == 1

    # Stop the line: a new commit is not adopted, and its commit status says who stopped it.
    assert _cli(env, capsys, "pause", "--reason", "incident 42")[0] == 0
    time.sleep(1.0)  # let the controller finish the pass it may be in
    bump = env.remote.commit("bump", set_driver("580.142.01"))

    def line() -> CommitStatus | None:
        return env.record.latest(bump, LINE_CONTEXT)

    env.wait("the line's status on the bump", lambda: getattr(line(), "state", None) == "error")
    said = line()
    assert said is not None and said.description.endswith(": incident 42"), said
    assert env.pool_commit("canary") == first and env.state(bump, "canary") is None
    rc, out = _cli(env, capsys, "status", *_repo(env))
    assert rc == 0 and out.startswith("PAUSED: line stopped by "), out
    assert out.count("  hold: line stopped by ") == len(STAGES), out
    assert _cli(env, capsys, "resume")[0] == 0
    env.wait(
        "bump everywhere after resume", lambda: all(env.state(bump, s) == "success" for s in STAGES)
    )
    resumed = line()
    assert resumed is not None and resumed.state == "success", resumed

    # Roll inference back by hand: its pools go back to the last good commit before the bump,
    # and the controller does not re-adopt the bump there.
    rc, out = _cli(env, capsys, "rollback", *_repo(env), "--stage", "inference", "--to", first)
    assert rc == 0, out
    assert env.pool_commit("infer-l40s") == first
    assert env.state(bump, "inference") == "failure"
    time.sleep(3.0)
    assert env.pool_commit("infer-l40s") == first
    assert env.pool_commit("canary") == bump  # other stages untouched
