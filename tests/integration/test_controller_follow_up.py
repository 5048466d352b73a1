"""A pass that applied something is followed by another within seconds, not a poll interval
later: a push seen by one pass gets its stage's first status right after its objects land."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.controller import FOLLOW_UP_SECONDS, Controller
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def test_apply_is_followed_up_before_the_interval(
    clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path
) -> None:
    head = fleet_remote.commit("head")
    cfg = Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl", interval=120.0)
    ctl = Controller(cfg, clean_cluster.client)
    reports: list[tuple[float, int]] = []
    stop = threading.Event()
    worker = threading.Thread(
        target=ctl.run,
        args=(stop,),
        kwargs={"on_pass": lambda r: reports.append((time.monotonic(), r.applied))},
        daemon=True,
    )
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while len(reports) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(reports) >= 2, reports
        (first_at, applied), (second_at, _) = reports[0], reports[1]
        assert applied > 0
        assert second_at - first_at < FOLLOW_UP_SECONDS + 10  # a pass's own cost, not 120 s
        assert any(s.context == stage_context("canary") for s in ctl.backend.list_statuses(head))
    finally:
        stop.set()
        ctl.trigger()
        worker.join(30)
