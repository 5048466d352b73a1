"""Plan accuracy on the real GPU Operator: what `plan --base` predicts for a change vs what the
testbed saw while it rolled out (operand pod UIDs replaced, driver pod replaced, node cordoned),
per pool. Used by test_plan_accuracy_e2e.py (which fails on any miss) and bench/plan_accuracy.py
(which prints the table).

What the testbed cannot show: KWOK runs no containers, so the MIG manager's reconfiguration is
played by the simulator (it sets the MIG state labels but does not pause the GPU clients the
real MIG manager stops), and the device plugin's config-manager switch happens inside a pod that
does not run; both are predicted without pod restarts, and none are seen.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e_harness import Env, fast_gates, set_driver
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.cli import main

NS = "gpu-operator"
STAGES = ("canary", "inference", "training")


def _edit_yaml(rel: str, change: Callable[[Any], None]) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        yaml = YAML()
        path = work / rel
        doc = yaml.load(path.read_text())
        change(doc)
        with path.open("w") as fh:
            yaml.dump(doc, fh)

    return edit


def _comment(work: Path) -> None:
    path = work / "base" / "clusterpolicy.yaml"
    path.write_text("# Reviewed by the platform team, 2026-12.\n" + path.read_text())


CHANGES: list[tuple[str, Callable[[Path], None]]] = [
    ("driver bump", set_driver("580.142.01")),
    (
        "toolkit bump",
        _edit_yaml(
            "base/clusterpolicy.yaml", lambda d: d["spec"]["toolkit"].update(version="v1.19.2")
        ),
    ),
    (
        "device-plugin config switch",
        _edit_yaml(
            "nodepools/infer-l40s/pool.yaml",
            lambda d: d["spec"].update(devicePluginConfig="l40s-time-sliced-8"),
        ),
    ),
    (
        "MIG profile change",
        _edit_yaml(
            "configs/mig/h100-train-mix.yaml",
            lambda d: d["mig-configs"]["h100-train-mix"][0].update({"mig-devices": {"1g.10gb": 7}}),
        ),
    ),
    ("comment only", _comment),
    (
        "cluster-wide operand change",
        _edit_yaml(
            "base/clusterpolicy.yaml",
            lambda d: d["spec"]["daemonsets"].update(annotations={"example.com/team": "ml"}),
        ),
    ),
]


def operand(ds: str) -> str:
    """The rules' operand name for a DaemonSet of the real operator."""
    if ds.startswith("nvidia-gpu-driver") or ds.startswith("nvidia-driver"):
        return "driver"
    name = ds.removeprefix("nvidia-").removesuffix("-daemonset")
    return name.removeprefix("device-plugin-") if name.endswith("mps-control-daemon") else name


@dataclass
class Seen:
    uids: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (node, operand)
    cordoned: set[str] = field(default_factory=set)


class Watcher:
    """Polls nodes and operator pods (LISTs of a handful of objects) while a change rolls."""

    def __init__(self, client: Any) -> None:
        self.client, self.seen = client, Seen()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def snapshot(self) -> None:
        for n in self.client.list("v1", "Node")["items"]:
            if n["spec"].get("unschedulable"):
                self.seen.cordoned.add(n["metadata"]["name"])
        for p in self.client.list("v1", "Pod", namespace=NS)["items"]:
            owner: dict[str, Any] = next(iter(p["metadata"].get("ownerReferences") or []), {})
            node = p["spec"].get("nodeName")
            if owner.get("kind") == "DaemonSet" and node:
                key = (node, operand(owner["name"]))
                self.seen.uids.setdefault(key, set()).add(p["metadata"]["uid"])

    def _run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):
                self.snapshot()
            time.sleep(0.25)

    def __enter__(self) -> Watcher:
        self.snapshot()
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.snapshot()


def predicted(repo: str, base: str, kubeconfig: str) -> dict[str, dict[str, Any]]:
    """Per pool: operands restarted, driver replaced, cordon, from `plan --base`'s JSON."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(
            ["plan", "--repo", repo, "--base", base, "--kubeconfig", kubeconfig, "--format", "json"]
        )
    doc = json.loads(out.getvalue())
    pools: dict[str, dict[str, Any]] = {}
    for stage in doc["disruption"]["stages"]:
        for p in stage["pools"]:
            ops: set[str] = set()
            for e in p["effects"]:
                if e["kind"] == "operand-restart":
                    listed = e["text"].split(":", 1)[1].split("(")[0]
                    ops |= {o.strip() for o in listed.split(",") if o.strip()}
                if e["kind"] in ("driver-upgrade", "driver-restart"):
                    ops.add("driver")
            pools[p["pool"]] = {
                "operands": ops,
                "cordon": any(e["cordons"] for e in p["effects"]),
                "kinds": sorted({e["kind"] for e in p["effects"]}),
            }
    return pools


def settled(env: Env, sha: str) -> bool:
    if not all(env.state(sha, s) == "success" for s in STAGES):
        return False
    nodes = env.tb.client.list("v1", "Node")["items"]
    return all(
        n["metadata"]["labels"].get(names.UPGRADE_STATE_LABEL) == "upgrade-done"
        and not n["spec"].get("unschedulable")
        for n in nodes
    )


def pool_of(env: Env) -> dict[str, str]:
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get(names.POOL_LABEL, "")
        for n in env.tb.client.list("v1", "Node")["items"]
    }


@dataclass(frozen=True)
class Row:
    change: str
    pool: str
    kinds: tuple[str, ...]
    predicted: frozenset[str]
    observed: frozenset[str]
    cordon_predicted: bool
    cordon_seen: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.predicted == self.observed and self.cordon_predicted == self.cordon_seen


def measure(env: Env, say: Callable[[str], None] = lambda _m: None) -> list[Row]:
    """Roll fleet-repo-example out, then each change in CHANGES; a row per (change, pool)."""
    rows: list[Row] = []
    sha = env.remote.commit("fast gates", fast_gates())
    env.start_nodes(1)
    env.controller()
    t0 = time.monotonic()
    env.wait("the first rollout", lambda: settled(env, sha), 900)
    say(f"first rollout settled in {time.monotonic() - t0:.0f}s")
    for name, edit in CHANGES:
        base = sha
        t0 = time.monotonic()
        with Watcher(env.tb.client) as watch:
            before = {k: set(v) for k, v in watch.seen.uids.items()}
            head = env.remote.commit(name, edit)
            want = predicted(env.remote.url, base, env.tb.kubeconfig)
            env.wait(name, lambda h=head: settled(env, h), 900)
            time.sleep(3)  # late pod replacements would show here
        took = time.monotonic() - t0
        say(f"{name}: settled in {took:.0f}s")
        for node, pool in sorted(pool_of(env).items(), key=lambda kv: kv[1]):
            if not pool:
                continue
            got = {
                op
                for (n, op), uids in watch.seen.uids.items()
                if n == node and before.get((n, op)) and uids - before[(n, op)]
            }
            p = want.get(pool, {"operands": set(), "cordon": False, "kinds": []})
            rows.append(
                Row(
                    name,
                    pool,
                    tuple(p["kinds"]),
                    frozenset(p["operands"]),
                    frozenset(got),
                    bool(p["cordon"]),
                    node in watch.seen.cordoned,
                    took,
                )
            )
        sha = head
    return rows


def table(rows: list[Row]) -> str:
    def ops(o: frozenset[str]) -> str:
        return ",".join(sorted(o)) or "-"

    out = [
        f"{'change':28} {'pool':11} {'predicted effects':31} {'cordon':13} "
        "restarts predicted | observed (pod UIDs)"
    ]
    for r in rows:
        cordon = f"{'yes' if r.cordon_predicted else 'no'}/{'yes' if r.cordon_seen else 'no'}"
        out.append(
            f"{r.change:28} {r.pool:11} {','.join(r.kinds) or 'none':31} {cordon:13} "
            f"{ops(r.predicted)} | {ops(r.observed)}  {'ok' if r.ok else 'MISS'}"
        )
    return "\n".join(out) + "\n"
