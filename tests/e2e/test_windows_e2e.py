"""Stage windows on the testbed (issue 27): a commit that lands while the canary's window is
closed waits, visibly, with nothing applied; it is adopted within a pass of the opening, never
before. Real kube-apiserver, the GPU Operator, simulated hosts, a real fleet repo."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Env, fast_gates, set_driver
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev.testbed import nodes

pytestmark = pytest.mark.e2e
SKIP = names.UPGRADE_SKIP_LABEL


def _phase(env: Env, sha: str, stage: str) -> Phase | None:
    latest = env.record.latest(sha, stage_context(stage))
    mark = read_mark(latest) if latest else None
    return mark.phase if mark else None


def _edit_canary(work: Path, change: Callable[[Any], None]) -> None:
    """Apply ``change`` to the canary's stage entry in fleet.yaml."""
    yaml = YAML()
    doc = yaml.load((work / "fleet.yaml").read_text())
    change(next(s for s in doc["spec"]["stages"] if s["name"] == "canary"))
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(doc, fh)


def _canary_window(kind: str, starts: datetime, minutes: int) -> Callable[[Path], None]:
    """A daily ``kind`` (allow | deny) window for the canary, starting at ``starts``."""
    entry = {"schedule": f"{starts.minute} {starts.hour} * * *", "duration": f"{minutes}m"}

    def edit(work: Path) -> None:
        _edit_canary(work, lambda canary: canary.__setitem__("windows", {kind: [entry]}))

    return edit


@pytest.mark.timeout(900)  # its waits add up past the default on a loaded machine
def test_a_commit_waits_for_the_canary_window_and_is_adopted_as_it_opens(env: Env) -> None:
    first = env.remote.commit("fast gates", fast_gates())
    env.start_nodes(1)
    env.controller()
    env.wait("first rollout", lambda: env.state(first, "canary") == "success", 150)
    # The next whole minute at least 40 s away: the commit lands well before it opens.
    opens_at = math.ceil((time.time() + 40) / 60) * 60
    opens = datetime.fromtimestamp(opens_at, UTC)
    window = _canary_window("allow", opens, 10)

    def change(work: Path) -> None:
        window(work)
        set_driver("580.142.01")(work)

    bump = env.remote.commit("driver bump, canary windowed", change)
    env.wait(
        "the canary waits for its window",
        lambda: _phase(env, bump, "canary") is Phase.AWAITING_WINDOW,
        60,
    )
    waiting = env.description(bump, "canary")
    assert f"opens {opens:%a %H:%M} UTC" in waiting, waiting
    while time.time() < opens_at - 1:  # up to the opening, nothing of the bump is applied
        assert env.pool_commit("canary") == first
        time.sleep(0.5)
    env.wait("adopted once open", lambda: env.pool_commit("canary") == bump, 60)
    adopted_at = time.time()
    assert opens_at <= adopted_at < opens_at + 10, adopted_at - opens_at
    env.wait("the canary passes", lambda: env.state(bump, "canary") == "success", 300)
    phases = [read_mark(s) for s in env.statuses(bump) if s.context == stage_context("canary")]
    assert [p.phase for p in phases if p][:2] == [Phase.AWAITING_WINDOW, Phase.ROLLING_OUT]


TRAIN = {"app": "e2e-train"}
DENY_MINUTES = 2


def _pdb_held_canary(work: Path) -> None:
    """The canary's driver upgrade deletes GPU pods by eviction (so a PDB holds it) for as long
    as it takes (timeoutSeconds 0: no limit); bare pods, so force. The operator drains only
    when that fails (k8s-operator-libs pod_manager.go), so drain stays off."""
    yaml = YAML()
    path = work / "nodepools" / "canary" / "clusterpolicy.yaml"
    doc = yaml.load(path.read_text())
    doc["spec"] = {
        "driver": {"upgradePolicy": {"podDeletion": {"force": True, "timeoutSeconds": 0}}}
    }
    with path.open("w") as fh:
        yaml.dump(doc, fh)


class Trace:
    """Every canary node's upgrade state and skip label, sampled every 0.2 s in a thread: the
    node timestamps the story is judged by."""

    def __init__(self, client: Any, nodes: list[str]) -> None:
        self.client, self.nodes = client, nodes
        self.seen: list[tuple[float, str, str, str | None]] = []  # (t, node, state, skip)
        self._last: dict[str, tuple[str, str | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name in self.nodes:
                labels = (self.client.get("v1", "Node", name) or {}).get("metadata", {})
                labels = labels.get("labels") or {}
                now = (labels.get(names.UPGRADE_STATE_LABEL, ""), labels.get(SKIP))
                if self._last.get(name) != now:
                    self._last[name] = now
                    self.seen.append((time.time(), name, *now))
            time.sleep(0.2)

    def state(self, node: str) -> tuple[str, str | None]:
        return self._last.get(node, ("", None))

    def started(self, node: str) -> float | None:
        """When ``node`` first left upgrade-required (the operator took it on)."""
        required = [t for t, n, s, _ in self.seen if n == node and s == "upgrade-required"]
        later = [
            t
            for t, n, s, _ in self.seen
            if n == node and required and t > required[0] and s != "upgrade-required"
        ]
        return later[0] if later else None

    def first(self, node: str, state: str, after: float = 0.0) -> float | None:
        return next((t for t, n, s, _ in self.seen if n == node and s == state and t > after), None)

    def __repr__(self) -> str:
        t0 = self.seen[0][0] if self.seen else 0.0
        return "; ".join(f"+{t - t0:.1f}s {n} {s or '-'} skip={k}" for t, n, s, k in self.seen)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.mark.timeout(900)
def test_a_window_closing_mid_rollout_lets_the_node_in_flight_finish_and_starts_no_other(
    env: Env,
) -> None:
    client = env.tb.client

    def first_commit(work: Path) -> None:
        fast_gates()(work)
        _pdb_held_canary(work)
        # The eviction is held on purpose for minutes of open time: not a stall to fail on.
        _edit_canary(work, lambda canary: canary["gate"].__setitem__("timeout", "20m"))

    first = env.remote.commit("fast gates, PDB-held canary", first_commit)
    # Three canary nodes (one in flight, two to hold), one in every other pool.
    shapes = nodes.read_pool_shapes(env.remote.work)
    canary = nodes.create_pool_nodes(client, [s for s in shapes if s.name == "canary"], 3)
    rest = nodes.create_pool_nodes(client, [s for s in shapes if s.name != "canary"], 1)
    nodes.wait_ready(client, canary + rest)
    env.sim.start()
    assert len(canary) == 3, canary
    env.controller()
    env.wait("first rollout", lambda: env.state(first, "canary") == "success", 240)
    ns = f"t-{uuid.uuid4().hex[:4]}"  # short: the commit status holds 140 characters
    client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for node in canary:
        client.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"w-{node}", "namespace": ns, "labels": TRAIN},
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "c",
                            "image": "train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
        )
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train-pdb", "namespace": ns},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": TRAIN}},
    }
    client.create(pdb)
    trace = Trace(client, canary)
    try:
        # The deny starts on the next whole minute at least 45 s away: by then the bump is
        # adopted and the operator's first canary node waits to evict its GPU pod, held by the PDB.
        closes_at = math.ceil((time.time() + 45) / 60) * 60
        closes = datetime.fromtimestamp(closes_at, UTC)

        def change(work: Path) -> None:
            _canary_window("deny", closes, DENY_MINUTES)(work)
            set_driver("580.142.01")(work)

        bump = env.remote.commit("driver bump; canary denied from the next minute", change)
        env.wait("adopted while open", lambda: env.pool_commit("canary") == bump, 60)
        deadline = closes_at - 5
        while not any(trace.state(n)[0] == "pod-deletion-required" for n in canary):
            assert time.time() < deadline, (
                f"no canary node held by the PDB before the close: {trace}"
            )
            time.sleep(0.2)
        in_flight = next(n for n in canary if trace.state(n)[0] == "pod-deletion-required")
        others = [n for n in canary if n != in_flight]
        waiting_since = trace.first(in_flight, "pod-deletion-required")
        assert waiting_since is not None
        named = time.time() + 30
        while not (
            f"pod {ns}/w-{in_flight}" in env.description(bump, "canary")
            and "PDB train-pdb" in env.description(bump, "canary")
        ):
            said = env.description(bump, "canary")
            assert time.time() < named, f"the stage does not name the pod and PDB: {said!r}"
            time.sleep(0.2)
        said = time.time() - waiting_since
        print(
            f"\n[measure] PDB-held node named in the stage status {said:.1f}s after its wait began"
        )
        assert all(trace.state(n)[0] == "upgrade-required" for n in others), trace
        while time.time() < closes_at:
            # The PDB holds the node in flight up to the close (the story needs it so).
            assert trace.state(in_flight)[0] == "pod-deletion-required", (
                trace,
                client.get("v1", "Pod", f"w-{in_flight}", ns),
                client.get("policy/v1", "PodDisruptionBudget", "train-pdb", ns),
            )
            time.sleep(0.2)
        env.wait(
            "the not-started canary nodes held",
            lambda: all(trace.state(n)[1] == "true" for n in others),
            60,
        )
        held_at = time.time() - closes_at
        print(f"[measure] window closed -> {len(others)} not-started nodes held in {held_at:.1f}s")
        for node in others:
            ann = client.get("v1", "Node", node)["metadata"]["annotations"]
            assert ann[names.UPGRADE_HOLD_ANNOTATION].startswith("waiting for window"), ann
        client.delete("policy/v1", "PodDisruptionBudget", "train-pdb", ns)
        env.wait(
            "the node in flight finishes",
            lambda: trace.first(in_flight, "upgrade-done", after=waiting_since) is not None,
            150,
        )
        done_at = trace.first(in_flight, "upgrade-done", after=waiting_since)
        assert done_at is not None and done_at > closes_at, trace
        # The operator has a free slot now; for 20 s of its reconciles it starts nobody.
        quiet_until = time.time() + 20
        while time.time() < quiet_until:
            assert all(trace.state(n)[0] == "upgrade-required" for n in others), trace.seen
            time.sleep(0.2)
        opens_at = closes_at + DENY_MINUTES * 60
        assert time.time() < opens_at, "the window opened before the quiet spell ended"
        env.wait("the canary passes", lambda: env.state(bump, "canary") == "success", 480)
        starts = {n: trace.started(n) for n in others}
        assert all(t is not None and t >= opens_at for t in starts.values()), starts
        for node in others:  # our hold went ("false" is the simulated hosts' nudge)
            meta = client.get("v1", "Node", node)["metadata"]
            assert meta["labels"].get(SKIP) in (None, "false"), meta["labels"]
            assert names.UPGRADE_HOLD_ANNOTATION not in meta["annotations"]
        print(
            f"[measure] in-flight node done {done_at - closes_at:.1f}s after the close; "
            f"held nodes started {', '.join(f'{t - opens_at:.1f}s' for t in starts.values() if t)}"
            " after the opening"
        )
    finally:
        trace.stop()
        client.delete("v1", "Namespace", ns)
