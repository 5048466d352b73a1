"""An infrastructure error while checking a commit is not a verdict: the commit stays unjudged,
nothing is written about it, and the next pass judges it. (The apiserver failing only the CRD
read is injected; everything else is the real testbed and a real fleet remote.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.controller import Controller
from gitops_gpu.errors import KubeError
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.status import PREFLIGHT_CONTEXT
from gitops_gpu.sync.trust import Verdict, untrusted
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def test_a_failed_crd_read_leaves_the_commit_unjudged(
    clean_cluster: Testbed,
    fleet_remote: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = fleet_remote.commit("a good commit")
    ctl = Controller(
        Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl"), clean_cluster.client
    )
    fetch = ctl.verdicts.fetch_crds

    def refused() -> None:
        raise KubeError("GET customresourcedefinitions: 503 Service Unavailable")

    monkeypatch.setattr(ctl.verdicts, "fetch_crds", refused)
    ctl.start_informers()
    try:
        report = ctl.run_pass()
        assert report.result == "ok", report.error
        assert ctl.checked(head) is None
        assert ctl.backend.list_statuses(head) == []  # no failure from an outage
        assert ctl.metrics.registry.get_sample_value("gitops_gpu_commits_unjudged_total") >= 1
        monkeypatch.setattr(ctl.verdicts, "fetch_crds", fetch)
        assert ctl.run_pass().result == "ok"
        states = [(s.context, s.state) for s in ctl.backend.list_statuses(head)]
        assert (PREFLIGHT_CONTEXT, "success") in states
        assert all(state != "failure" for _, state in states)
    finally:
        ctl.stop_informers()


def test_the_verdict_cache_keeps_only_the_history_window(
    clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path
) -> None:
    cfg = Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl", history=3)
    ctl = Controller(cfg, clean_cluster.client)
    ctl.start_informers()
    try:
        shas = [fleet_remote.commit(f"c{i}") for i in range(6)]
        for _ in range(2):
            ctl.run_pass()
        assert set(ctl.verdicts.cache) == set(shas[-3:])
    finally:
        ctl.stop_informers()


class _NoneTrusted:
    """--verify-signatures with a key that signed none of these commits (the real verifier's
    judgement is tested in test_trust*.py; here only the cache bound matters)."""

    mode = "head"

    def verify(self, _repo: object, _sha: str, at: object = None) -> Verdict:
        return untrusted("unsigned", "unsigned")


def test_the_untrusted_commit_cache_keeps_only_the_history_window(
    clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path
) -> None:
    cfg = Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl", history=3)
    cfg.verifier = _NoneTrusted()  # type: ignore[assignment]
    ctl = Controller(cfg, clean_cluster.client)
    ctl.start_informers()
    try:
        first = [fleet_remote.commit(f"c{i}") for i in range(3)]
        ctl.run_pass()
        assert set(ctl.verdicts.runs_in_cluster) == set(first)
        later = [fleet_remote.commit(f"d{i}") for i in range(3)]
        ctl.run_pass()
        assert set(ctl.verdicts.runs_in_cluster) == set(later)  # the first three left the window
        assert not any(ctl.verdicts.runs_in_cluster.values())  # held back, never applied
    finally:
        ctl.stop_informers()
