"""`gitops-gpu controller --notify-url-file` as a process on the testbed (real kube-apiserver,
the GPU Operator, simulated hosts, a real fleet repo), posting to a receiver on loopback: each
stage's transitions once and in order, signed, and a canary failure naming the node that
failed it."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Env, fast_gates, set_driver

from gitops_gpu.notify import SCHEMA
from gitops_gpu.notify.sender import SIGNATURE_HEADER
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.webhook_receiver import Receiver

pytestmark = pytest.mark.e2e
KEY = b"receiver-shared-key"


def _transitions(bodies: list[Any]) -> list[dict[str, Any]]:
    return [t for b in bodies for t in b["transitions"]]


def _of(bodies: list[Any], sha: str, stage: str) -> list[tuple[str, str]]:
    return [
        (t["state"], t["phase"])
        for t in _transitions(bodies)
        if t["commit"] == sha and t["context"] == stage_context(stage)
    ]


def test_the_controller_announces_each_transition_once_and_a_failure_with_its_node(
    env: Env, tmp_path: Path
) -> None:
    first = env.remote.commit("fast gates", fast_gates())
    env.start_nodes()
    (tmp_path / "key").write_bytes(KEY + b"\n")
    log = tmp_path / "controller.log"
    with Receiver("/hooks/s3cr3t") as rx, log.open("w") as out:
        (tmp_path / "url").write_text(rx.url)
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "gitops_gpu", "controller",
                "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig,
                "--interval", "0.5s", "--metrics-addr", "127.0.0.1:0",
                "--no-leader-election", "--cache-dir", str(tmp_path / "cache"),
                "--notify-url-file", str(tmp_path / "url"), "--notify-format", "json",
                "--notify-key-file", str(tmp_path / "key"),
                "--notify-link", "https://gpu.example/ui", "--notify-per-minute", "600",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            rx.wait_for(
                "the training stage's success",
                lambda got: ("success", "") in _of(got, first, "training"),
                timeout=300,
            )
            env.tb.client.patch(
                "v1",
                "Node",
                "canary-000",
                {"metadata": {"annotations": {sim.FAULT_ANN: "upgrade-failed"}}},
            )
            bad = env.remote.commit("bump driver (fails on canary)", set_driver("580.159.03"))
            bodies = rx.wait_for(
                "the canary's failure",
                lambda got: any(s == "failure" for s, _ in _of(got, bad, "canary")),
                timeout=300,
            )
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        assert proc.returncode == 0, log.read_text()
    text = log.read_text()
    assert "s3cr3t" not in text, "the webhook URL's secret path reached the log"
    for _, headers, raw in rx.got:
        want = "sha256=" + hmac.new(KEY, raw, hashlib.sha256).hexdigest()
        assert headers[SIGNATURE_HEADER] == want
    assert {b["schema"] for b in bodies} == {SCHEMA}
    keys = [(t["commit"], t["context"], t["state"], t["phase"]) for t in _transitions(bodies)]
    assert len(keys) == len(set(keys)), f"a transition was announced twice: {keys}"
    for stage in ("canary", "inference", "training"):
        seen = _of(bodies, first, stage)
        assert seen[-1] == ("success", ""), (stage, seen)
        assert seen[0][0] == "pending" and seen[0][1], (stage, seen)  # a named phase first
    failed = next(
        t
        for t in _transitions(bodies)
        if t["commit"] == bad and t["stage"] == "canary" and t["state"] == "failure"
    )
    assert failed["subject"] == "bump driver (fails on canary)"
    assert failed["url"] == f"https://gpu.example/ui/commit/{bad}"
    assert "canary-000" in {n["node"] for n in failed["failing"]}, failed
    assert all(n["reason"] for n in failed["failing"]), failed
    assert _of(bodies, bad, "inference") == []  # a held commit announces nothing past the canary
