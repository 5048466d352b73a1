"""run_agent: once and loop modes, failure handling, the real pynvml on a GPU-less machine."""

from __future__ import annotations

import argparse
import ctypes.util
import logging
import threading
from typing import Any

import pytest

from gitops_gpu.agent import fake_nvml, loop, make_agent, run_agent
from gitops_gpu.cli import agent as agent_cli
from gitops_gpu.cli import build_parser

Reports = list[dict[str, Any]]


def test_once_publishes_one_report() -> None:
    out: Reports = []
    fake = fake_nvml.from_snapshot_file("a100-40gb", seed="gpu-1")
    assert run_agent("gpu-1", 30, True, fake, None, sink=out.append) == loop.OK
    [obj] = out
    assert obj["apiVersion"] == "gitops-gpu.io/v1alpha1"
    assert obj["kind"] == "NodeGPUReport"
    assert obj["metadata"] == {"name": "gpu-1"}
    assert obj["status"]["gpuCount"] == 8
    assert fake.initialized == 0  # NVML shut down on the way out


def test_once_with_nvml_down_returns_1_and_still_reports() -> None:
    out: Reports = []
    fake = fake_nvml.from_snapshot_file("h100-80gb", nvml_error="DriverNotLoaded")
    assert run_agent("gpu-1", 30, True, fake, None, sink=out.append) == loop.NVML_UNAVAILABLE
    assert out[0]["status"]["conditions"][0]["reason"] == "DriverNotLoaded"


def test_loop_accumulates_xids_and_skips_unchanged_reports() -> None:
    out: Reports = []
    fake = fake_nvml.from_snapshot_file("h100-80gb", seed="gpu-1", xid_events=[(1, 48)])
    rc = run_agent("gpu-1", 0.001, False, fake, None, sink=out.append, iterations=3)
    assert rc == loop.OK
    assert len(out) == 1  # passes 2 and 3 saw identical content
    assert out[0]["status"]["xidEvents"][0]["xid"] == 48


def test_loop_survives_nvml_failure_and_recovers() -> None:
    out: Reports = []
    fake = fake_nvml.from_snapshot_file("h100-80gb", nvml_error="DriverNotLoaded")
    passes = [0]

    def sink(obj: dict[str, Any]) -> None:
        out.append(obj)
        passes[0] += 1
        fake.init_error = None  # the driver pod comes back after the first report

    rc = run_agent("gpu-1", 0.001, False, fake, None, sink=sink, iterations=2)
    assert rc == loop.OK
    assert [o["status"]["conditions"][0]["status"] for o in out] == ["False", "True"]
    assert out[1]["status"]["gpuCount"] == 8


def test_loop_survives_a_bug_in_a_pass(caplog: pytest.LogCaptureFixture) -> None:
    calls = [0]

    def sink(_obj: dict[str, Any]) -> None:
        calls[0] += 1
        raise RuntimeError("boom")

    fake = fake_nvml.from_snapshot_file("h100-80gb")
    with caplog.at_level(logging.ERROR, logger="gitops_gpu.agent"):
        rc = run_agent("gpu-1", 0.001, False, fake, None, sink=sink, iterations=2)
    assert rc == loop.PUBLISH_FAILED
    assert calls[0] == 2
    assert sum("agent pass failed" in r.message for r in caplog.records) == 2


def test_stop_event_ends_the_loop() -> None:
    stop = threading.Event()
    stop.set()
    fake = fake_nvml.from_snapshot_file("h100-80gb")
    assert run_agent("gpu-1", 3600, False, fake, None, sink=lambda _o: None, stop=stop) == 0


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver"
)
def test_real_pynvml_without_a_driver(caplog: pytest.LogCaptureFixture) -> None:
    """The real pynvml path: the library is absent, the loop reports it and keeps going."""
    out: Reports = []
    with caplog.at_level(logging.ERROR, logger="gitops_gpu.agent"):
        rc = run_agent("gpu-1", 0.001, False, None, None, sink=out.append, iterations=2)
    assert rc == loop.NVML_UNAVAILABLE
    failures = [r for r in caplog.records if "NVML unavailable (LibraryNotFound)" in r.message]
    assert len(failures) == 2  # both passes tried NVML again
    assert len(out) == 1  # the second, identical error report was not re-sent
    [cond] = out[0]["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "NVMLReady",
        "False",
        "LibraryNotFound",
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("2m", 120.0), ("1h", 3600.0), ("500ms", 0.5), ("7", 7.0), ("1h30m", 5400.0)],
)
def test_duration(text: str, seconds: float) -> None:
    assert agent_cli.duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "nan", "-5", "inf"])
def test_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        agent_cli.duration(text)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    agent_cli.register(parser.add_subparsers(required=True))
    return parser.parse_args(argv)


def test_cli_agent_once_with_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["agent", "--node", "gpu-9", "--once", "--stdout", "--nvml-snapshot", "l40s"])
    assert args.interval == 30.0
    assert args.func(args) == 0
    assert '"gpuCount": 4' in capsys.readouterr().out


def test_cli_nodes_arguments_are_the_read_verbs_own() -> None:
    argv = ["nodes", "--kubeconfig", "k", "--repo", "https://git.example/fleet", "--stage", "s"]
    args = build_parser("nodes").parse_args([*argv, "--format", "json"])
    assert (args.pool, args.stage, args.format) == (None, "s", "json")
    assert (args.operator_namespace, args.branch, args.rev) == ("gpu-operator", "main", None)
    plan = build_parser("plan").parse_args(["plan", *argv[1:]])
    assert (plan.repo, plan.kubeconfig) == (args.repo, args.kubeconfig)


def test_stepped_agent_keeps_xid_history_across_passes() -> None:
    out: Reports = []
    fake = fake_nvml.from_snapshot_file("b200", seed="gpu-1")
    agent = make_agent("gpu-1", fake, sink=out.append, heartbeat=3600)
    assert agent.step() == loop.OK
    fake.inject_xid(4, 48)
    agent.step()
    fake.lose_gpu(6)
    agent.step()
    assert agent.step() == loop.OK  # nothing new: not re-published
    assert len(out) == 3
    last = out[-1]["status"]
    assert [(e["gpu"], e["xid"]) for e in last["xidEvents"]] == [(4, 48), (6, 79)]
    assert last["gpus"][6]["state"] == "lost"
