"""An idle pass reads from its watches: the brake, the ledger and the repo-built ConfigMaps
come from memory, so a controller with nothing to do makes no per-pass requests (issue 32)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu import ledger
from gitops_gpu.controller import Controller
from gitops_gpu.kube import Client
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.sync import live
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def _calls(client: Client) -> Counter[str]:
    """Requests but watches (a watch is one long request, renewed every few minutes)."""
    return Counter({k: n for k, n in client.requests.items() if not k.startswith("WATCH ")})


def test_idle_passes_make_no_requests(
    clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without its watch the ledger would be read every pass, and the managed NVIDIADriver LIST,
    # renewed once a minute, is kept out of the window.
    monkeypatch.setattr(ledger, "REREAD_SECONDS", 0.0)
    monkeypatch.setattr(live, "MANAGED_MAX_AGE", 3600.0)
    head = fleet_remote.commit("head")
    client = Client.from_kubeconfig(clean_cluster.kubeconfig)
    cfg = Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl", interval=0.2)
    ctl = Controller(cfg, client)
    passes: list[int] = []
    stop = threading.Event()
    worker = threading.Thread(
        target=ctl.run,
        args=(stop,),
        kwargs={"on_pass": lambda r: passes.append(r.applied)},
        daemon=True,
    )
    worker.start()
    try:
        deadline = time.monotonic() + 60
        # Settled: the canary's first status is out and the last three passes applied nothing.
        while not (
            len(passes) > 3
            and passes[-3:] == [0, 0, 0]
            and any(s.context == stage_context("canary") for s in ctl.backend.list_statuses(head))
        ):
            assert time.monotonic() < deadline, f"never settled: {passes}"
            time.sleep(0.1)
        before, seen = _calls(client), len(passes)
        while len(passes) < seen + 10:
            assert time.monotonic() < deadline + 30, f"passes stopped: {passes}"
            time.sleep(0.05)
        made = _calls(client) - before
        assert passes[seen:] == [0] * (len(passes) - seen)
        assert made == Counter(), f"{len(passes) - seen} idle passes made {dict(made)}"
    finally:
        stop.set()
        ctl.trigger()
        worker.join(30)
        client.close()
