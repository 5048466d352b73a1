"""The disruption plan: what a change does to nodes and GPU workloads, per stage and pool."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.preflight import disruption_rules as rules
from gitops_gpu.preflight.disruption import (
    Disruption,
    Effect,
    Inventory,
    PoolDisruption,
    StageDisruption,
    inventory,
    make_disruption,
)
from gitops_gpu.preflight.disruption_text import NONE, disruption_json, disruption_text, summary
from gitops_gpu.preflight.plan import make_plan

H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
STAGES = [
    {"name": "canary", "pools": ["a"]},
    {"name": "prod", "pools": ["b"], "gate": {"approval": "required", "soak": "30m"}},
]


class Repo:
    """Two commits of a two-pool fleet, compiled from files as a user writes them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.n = tmp, 0
        self.pools: dict[str, dict[str, Any]] = {
            "a": dict(H100),
            "b": {**H100, "maxUnavailable": 2},
        }
        self.base = minimal_base()
        self.overlays: dict[str, dict[str, Any]] = {}

    def compile(self) -> CompiledFleet:
        self.n += 1
        root = write_repo(
            self.tmp / f"c{self.n}",
            self.pools,
            base=self.base,
            overlays={p: overlay(s) for p, s in self.overlays.items()},
            stages=STAGES,
        )
        return fleet_compile.compile_fleet(load_repo(root), f"{self.n:040d}")


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def _change(repo: Repo, edit: Any, inv: Inventory | None = None) -> Disruption:
    before = repo.compile()
    edit(repo)
    after = repo.compile()
    return make_disruption(make_plan(before, after), before, after, inv)


def _kinds(d: Disruption, pool: str) -> list[str]:
    return [e.kind for p in d.pools if p.pool == pool for e in p.effects]


def _spec(repo: Repo) -> dict[str, Any]:
    spec: dict[str, Any] = repo.base["spec"]
    return spec


def test_a_driver_bump_upgrades_every_pool_with_cordon_and_gpu_pod_deletion(repo: Repo) -> None:
    d = _change(repo, lambda r: _spec(r)["driver"].update(version="580.142.01"))
    for pool in ("a", "b"):
        (effect,) = [e for p in d.pools if p.pool == pool for e in p.effects]
        assert effect.kind == "driver-upgrade" and effect.cordons and effect.stops_gpu_pods
        assert not effect.drains and effect.cause == ("spec.version",)
        assert "580.126.20 -> 580.142.01" in effect.text and "no drain" in effect.text
    assert summary(d).startswith("cordons every node of 2 pools, stops GPU pods on every node")
    assert not d.none


def test_a_toolkit_bump_restarts_only_toolkit_pods_stage_by_stage(repo: Repo) -> None:
    d = _change(repo, lambda r: _spec(r)["toolkit"].update(version="v1.19.2"))
    assert _kinds(d, "a") == _kinds(d, "b") == ["operand-restart"]
    effect = d.stages[1].pools[0].effects[0]
    assert "container-toolkit" in effect.text and effect.batch == 2  # pool b's maxUnavailable
    assert not effect.cordons and not effect.stops_gpu_pods
    assert d.cluster_wide == ()
    assert summary(d) == "restarts operand pods on every node of 2 pools"


def test_a_validator_bump_restarts_every_validated_operand_but_those_a_pool_disables(
    repo: Repo,
) -> None:
    repo.base["spec"]["validator"] = {"version": "v26.7.0"}
    repo.overlays["b"] = {"dcgmExporter": {"enabled": False}}  # lowered to a deploy label
    d = _change(repo, lambda r: _spec(r)["validator"].update(version="v26.7.1"))
    a, b = (d.stages[i].pools[0].effects[0].text for i in (0, 1))
    for operand in ("container-toolkit", "device-plugin", "gpu-feature-discovery"):
        assert operand in a and operand in b
    assert "dcgm-exporter" in a and "dcgm-exporter" not in b


def test_a_driver_label_change_restarts_the_driver_in_place_without_evicting(repo: Repo) -> None:
    d = _change(repo, lambda r: _spec(r)["driver"].update(labels={"team": "ml"}))
    effect = d.stages[0].pools[0].effects[0]
    assert effect.kind == "driver-restart" and effect.cordons and not effect.stops_gpu_pods


def test_an_upgrade_policy_change_alone_disrupts_nothing(repo: Repo) -> None:
    def edit(r: Repo) -> None:
        r.pools["a"]["maxUnavailable"] = 2  # lands in the NVIDIADriver's upgradePolicy only

    d = _change(repo, edit)
    (effect,) = d.stages[0].pools[0].effects
    assert effect.kind == "none" and "upgradePolicy" in effect.text
    assert d.none and summary(d) == NONE


def test_no_change_says_no_disruption_plainly(repo: Repo) -> None:
    d = _change(repo, lambda r: None)
    assert d.none and summary(d) == NONE
    assert disruption_text(d).startswith(f"disruption: {NONE}\n")
    assert "pool a: no disruption" in disruption_text(d)


def test_a_mig_profile_change_reconfigures_and_stops_gpu_pods(repo: Repo) -> None:
    repo.pools["a"]["migConfig"] = "all-1g.10gb"
    d = _change(repo, lambda r: r.pools["a"].update(migConfig="all-3g.40gb"))
    (effect,) = d.stages[0].pools[0].effects
    assert effect.kind == "mig-reconfig" and effect.stops_gpu_pods
    assert "all-1g.10gb -> all-3g.40gb" in effect.text
    assert _kinds(d, "b") == []


def test_a_device_plugin_config_switch_keeps_running_pods(repo: Repo) -> None:
    d = _change(repo, lambda r: r.pools["b"].update(devicePluginConfig="ts-4"))
    (effect,) = d.stages[1].pools[0].effects
    assert effect.kind == "device-plugin-config" and not effect.stops_gpu_pods
    assert "(default) -> ts-4" in effect.text


def test_turning_an_operand_off_everywhere_is_flagged_cluster_wide(repo: Repo) -> None:
    d = _change(repo, lambda r: _spec(r)["dcgmExporter"].update(enabled=False))
    assert d.cluster_wide == (
        "default: spec.dcgmExporter.enabled: the dcgm-exporter DaemonSet is created or deleted "
        "on every node of the cluster at once",
    )
    assert "not staged" in summary(d)


def test_a_field_outside_the_tables_is_said_and_assumed_to_restart_everything(
    repo: Repo,
) -> None:
    d = _change(repo, lambda r: _spec(r).update(newFeature={"on": True}))
    assert d.unknown == ("default: spec.newFeature",)
    # Every operand the cluster runs (the base turns dcgm off and leaves node-status-exporter
    # at its default, off); the MPS daemon only where the plugin shares by MPS.
    running = [o for o in rules.EVERY if o not in (rules.DCGM, rules.STATUS, rules.MPS)]
    text = d.stages[0].pools[0].effects[0].text
    assert text.startswith(f"operand pods restarted: {', '.join(running)} (")
    assert rules.MPS_NOTE in text


def test_operands_the_cluster_or_the_gpu_does_not_run_are_not_said_to_restart(
    repo: Repo,
) -> None:
    def edit(r: Repo) -> None:
        _spec(r)["daemonsets"] = {"annotations": {"example.com/team": "ml"}}
        _spec(r)["devicePlugin"]["enabled"] = False
        _spec(r)["nodeStatusExporter"]["enabled"] = True

    repo.pools["b"] = {"gpu": {"product": "NVIDIA-L40S"}}  # Ada: no MIG, so no MIG manager
    d = _change(repo, edit)
    ops = {p.pool: e.text for p in d.pools for e in p.effects if e.kind == "operand-restart"}
    assert rules.MIG in ops["a"] and rules.MIG not in ops["b"]
    for text in ops.values():
        assert rules.STATUS in text  # enabled now
        assert rules.PLUGIN not in text and rules.MPS not in text  # the plugin is off
        assert rules.DCGM + "," not in text and not text.endswith(rules.DCGM)


def test_auto_upgrade_off_replaces_no_driver_pod(repo: Repo) -> None:
    def edit(r: Repo) -> None:
        _spec(r)["driver"].update(version="580.142.01", upgradePolicy={"autoUpgrade": False})

    d = _change(repo, edit)
    (effect,) = d.stages[0].pools[0].effects
    assert effect.kind == "none" and "autoUpgrade is off" in effect.text


def test_a_removed_pool_loses_its_driver(repo: Repo) -> None:
    before = repo.compile()
    del repo.pools["b"]
    root = write_repo(repo.tmp / "gone", repo.pools, base=repo.base, stages=STAGES[:1])
    after = fleet_compile.compile_fleet(load_repo(root), "9" * 40)
    d = make_disruption(make_plan(before, after), before, after)
    (gone,) = d.removed
    assert gone.pool == "b" and [e.kind for e in gone.effects] == ["driver-removed"]
    assert "removed pool b:" in disruption_text(d)


def _node(name: str, pool: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/pool": pool}}}


def _pod(ns: str, name: str, node: str, gpu: bool, labels: Mapping[str, str]) -> dict[str, Any]:
    res = {"limits": {"nvidia.com/gpu": 1}} if gpu else {}
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "labels": dict(labels),
            "ownerReferences": [{"kind": "Job", "controller": True}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": res}]},
        "status": {"phase": "Running"},
    }


def _inventory(repo: Repo) -> Inventory:
    compiled = repo.compile()
    nodes = [_node("a-0", "a"), _node("b-0", "b"), _node("b-1", "b"), _node("b-2", "b")]
    pods = [
        _pod("ml", "train-0", "b-0", True, {"app": "train"}),
        _pod("ml", "train-1", "b-1", True, {"app": "train"}),
        _pod("web", "cpu-0", "b-2", False, {"app": "web"}),
        _pod("ml", "elsewhere", "x-9", True, {"app": "train"}),
    ]
    pdb = {
        "metadata": {"namespace": "ml", "name": "train-pdb"},
        "spec": {"selector": {"matchLabels": {"app": "train"}}},
        "status": {"disruptionsAllowed": 0},
    }
    return inventory(compiled.clusters["default"].pools, nodes, pods, [pdb])


def test_with_the_cluster_it_names_nodes_gpu_workloads_and_blocking_budgets(repo: Repo) -> None:
    inv = _inventory(repo)
    assert inv.pool_nodes == {"a": ("a-0",), "b": ("b-0", "b-1", "b-2")}
    d = _change(repo, lambda r: _spec(r)["driver"].update(version="580.142.01"), inv)
    b = d.stages[1].pools[0]
    assert b.nodes == ("b-0", "b-1", "b-2")
    assert [w.pod for w in b.workloads] == ["ml/train-0", "ml/train-1"]  # GPU pods only
    assert all(w.pdbs == ("train-pdb allows 0",) for w in b.workloads)
    # driver upgrades go one node at a time (the operator's default maxParallelUpgrades 1 is
    # not set, so the pool's maxUnavailable 2 bounds it): 2 batches of 600 s assumed
    assert b.estimate_seconds == 2 * 600.0
    assert d.stages[1].estimate_seconds == 2 * 600.0 + 1800.0  # then the 30m soak
    assert d.stages[1].waits == ("waits for an approval", "soaks 30m")
    text = disruption_text(d)
    assert "pool b (3 nodes: b-0, b-1, b-2):" in text
    assert "pool a (1 node: a-0):" in text  # one node, said as one
    assert "GPU workloads there now: 2 pods (ml: 2)" in text
    assert "blocked: pod ml/train-0 (Job, PDB train-pdb allows 0)" in text
    assert summary(d).startswith("cordons 4 nodes, stops GPU pods on 4 nodes")
    assert disruption_json(d)["stages"][1]["pools"][0]["workloads"][0]["pdbs"] == [
        "train-pdb allows 0"
    ]


def test_a_drain_counts_every_evictable_pod_not_only_gpu_pods(repo: Repo) -> None:
    inv = _inventory(repo)

    def edit(r: Repo) -> None:
        _spec(r)["driver"].update(
            version="580.142.01",
            upgradePolicy={"autoUpgrade": True, "drain": {"enable": True, "timeoutSeconds": 60}},
        )

    d = _change(repo, edit, inv)
    b = d.stages[1].pools[0]
    assert b.effects[0].drains and "node drained (timeout 60s)" in b.effects[0].text
    assert [w.pod for w in b.workloads] == ["ml/train-0", "ml/train-1", "web/cpu-0"]
    assert summary(d).startswith("drains 4 nodes")


def test_upgrade_policy_defaults_follow_the_operator() -> None:
    absent = rules.UpgradePolicy.of({"spec": {}})
    assert absent.auto and absent.max_parallel == 1 and absent.delete_timeout == 300
    given = rules.UpgradePolicy.of({"spec": {"upgradePolicy": {"maxUnavailable": 3}}})
    # given at all, Go's zero values: autoUpgrade false, maxParallelUpgrades 0 (no limit)
    assert not given.auto and given.max_parallel == 0 and given.max_unavailable == 3


def test_pools_with_the_same_effects_are_said_once_per_stage() -> None:
    same = (Effect("operand-restart", "operand pods restarted: container-toolkit", batch=1),)
    pools = tuple(
        PoolDisruption(f"p{i}", "default", same, nodes=(f"p{i}-0", f"p{i}-1")) for i in range(7)
    )
    odd = PoolDisruption("q", "default", (Effect("mig-reconfig", "MIG x", stops_gpu_pods=True),))
    d = Disruption("a", "b", (StageDisruption("fleet", (*pools, odd)),))
    text = disruption_text(d)
    assert "  7 pools (p0, p1, p2, p3, p4 +2, 14 nodes):" in text
    assert text.count("operand pods restarted: container-toolkit") == 1
    assert "  pool q:" in text and "MIG x" in text
