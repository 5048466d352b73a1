"""plan/apply against the real apiserver and real git repos, through the CLI."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.preflight import crd_source
from gitops_gpu.sync import engine, slim
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration
DRV = names.NVIDIA_DRIVER_API
CP = names.CLUSTER_POLICY_API


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _add_nodes(tb: Testbed, work: Path, per_pool: int = 2) -> list[str]:
    names_ = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(work), per_pool)
    nodes.wait_ready(tb.client, names_)
    return names_


def _plan_json(
    capsys: pytest.CaptureFixture[str], url: str, kubeconfig: str, *extra: str
) -> tuple[int, dict[str, Any]]:
    rc, out, _ = run(
        capsys, "plan", "--repo", url, "--kubeconfig", kubeconfig, "--format", "json", *extra
    )
    return rc, json.loads(out)


def _driver_versions(tb: Testbed) -> dict[str, str]:
    """Each NVIDIADriver's resourceVersion: equal before and after means nothing was written."""
    return {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"]
        for d in tb.client.list(*DRV)["items"]
    }


def _edit_fleet(work: Path, edit: Callable[[Any], None]) -> None:
    yaml = YAML()
    fleet = yaml.load((work / "fleet.yaml").read_text())
    edit(fleet["spec"])
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(fleet, fh)


def _drop_pools(*pools: str) -> Callable[[Path], None]:
    """A commit's edit removing ``pools``: their directories and stage entries (and a stage
    left empty)."""

    def drop(work: Path) -> None:
        for pool in pools:
            shutil.rmtree(work / "nodepools" / pool)

        def unlist(spec: Any) -> None:
            for stage in spec["stages"]:
                stage["pools"] = [p for p in stage["pools"] if p not in pools]
            spec["stages"] = [s for s in spec["stages"] if s["pools"]]

        _edit_fleet(work, unlist)

    return drop


def test_apply_then_in_sync_without_churn(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    node_names = _add_nodes(tb, fleet_remote.work)
    rc, plan = _plan_json(capsys, fleet_remote.url, tb.kubeconfig)
    assert rc == 3
    actions = {o["action"] for p in plan["plans"] for pool in p["pools"] for o in pool["objects"]}
    assert actions == {"created"}
    rc, _out, err = run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert rc == 0, err
    rc, plan = _plan_json(capsys, fleet_remote.url, tb.kubeconfig)
    assert rc == 0, plan
    assert plan["plans"][0]["inSync"] is True
    drivers = tb.client.list(*DRV)["items"]
    before = {d["metadata"]["name"]: d["metadata"]["resourceVersion"] for d in drivers}
    head = fleet_remote.commit("empty commit")
    for d in drivers:
        assert d["metadata"]["annotations"][names.COMMIT_ANNOTATION] != head
    # Re-applying the same content writes nothing (no resourceVersion churn) ...
    rc, _, _ = run(
        capsys,
        "apply",
        "--repo",
        fleet_remote.url,
        "--rev",
        drivers[0]["metadata"]["annotations"][names.COMMIT_ANNOTATION],
        "--kubeconfig",
        tb.kubeconfig,
    )
    after = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"]
        for d in tb.client.list(*DRV)["items"]
    }
    assert rc == 0 and after == before
    # ... and every node we labelled names the commit its labels came from.
    for name in node_names:
        node = tb.client.get("v1", "Node", name)
        assert node is not None
        assert node["metadata"]["annotations"][names.COMMIT_ANNOTATION]
        assert node["metadata"]["labels"][names.POOL_LABEL]


def test_foreign_field_manager_drift_is_shown_and_needs_force(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    assert run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)[0] == 0
    live = tb.client.get(*CP, names.CLUSTER_POLICY_NAME)
    assert live is not None
    original = live["spec"]["dcgmExporter"]["enabled"]
    tb.client.patch(
        *CP,
        names.CLUSTER_POLICY_NAME,
        {"spec": {"dcgmExporter": {"enabled": not original}}},
        field_manager="kubectl-edit",
    )
    rc, plan = _plan_json(capsys, fleet_remote.url, tb.kubeconfig)
    assert rc == 3
    (cp,) = [o for o in plan["plans"][0]["clusterObjects"] if o["kind"] == "ClusterPolicy"]
    assert cp["action"] == "configured"
    assert cp["changes"] == [
        {"path": "spec.dcgmExporter.enabled", "live": not original, "desired": original}
    ]
    assert all(p["inSync"] for p in plan["plans"][0]["pools"])
    rc, out, _ = run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert rc == 1 and "CONFLICT ClusterPolicy/cluster-policy" in out and "kubectl-edit" in out
    rc, out, _ = run(
        capsys,
        "apply",
        "--repo",
        fleet_remote.url,
        "--kubeconfig",
        tb.kubeconfig,
        "--force-conflicts",
    )
    assert rc == 0, out
    restored = tb.client.get(*CP, names.CLUSTER_POLICY_NAME)
    assert restored is not None and restored["spec"]["dcgmExporter"]["enabled"] == original
    assert _plan_json(capsys, fleet_remote.url, tb.kubeconfig)[0] == 0


def test_removed_pool_is_pruned_and_unlabelled_others_untouched(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    _add_nodes(tb, fleet_remote.work)
    assert run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)[0] == 0
    pools = sorted(p.name for p in nodes.read_pool_shapes(fleet_remote.work))
    victim, keep = pools[-1], [p for p in pools if p != pools[-1]]
    before = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"]
        for d in tb.client.list(*DRV)["items"]
        if d["metadata"]["name"] != victim
    }

    fleet_remote.commit(f"remove pool {victim}", _drop_pools(victim))
    rc, plan = _plan_json(capsys, fleet_remote.url, tb.kubeconfig)
    assert rc == 3
    pruned = [o for o in plan["plans"][0]["clusterObjects"] if o["action"] == "pruned"]
    assert [(o["kind"], o["name"]) for o in pruned] == [("NVIDIADriver", victim)]
    assert run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)[0] == 0
    assert tb.client.get(*DRV, victim) is None
    after = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"]
        for d in tb.client.list(*DRV)["items"]
    }
    assert after == before and sorted(after) == keep
    for node in tb.client.list("v1", "Node")["items"]:
        labels = node["metadata"]["labels"]
        if node["metadata"]["name"].startswith(victim + "-"):
            assert names.POOL_LABEL not in labels
            assert names.MANAGED_LABELS_ANNOTATION not in (
                node["metadata"].get("annotations") or {}
            )
            assert labels["nvidia.com/gpu.product"]  # labels we did not set stay
        else:
            assert labels[names.POOL_LABEL] in keep


def test_apply_refuses_a_commit_removing_most_pools_without_the_opt_in(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The controller's guard (GG041 against what the cluster runs) holds for `apply` too."""
    tb = clean_cluster
    assert run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)[0] == 0
    state = _driver_versions(tb)
    pools = sorted(state)
    gone, kept = pools[1:], pools[0]
    assert len(gone) * 2 > len(pools), "the example fleet needs three pools or more"

    fleet_remote.commit("remove most pools", _drop_pools(*gone))
    rc, _out, err = run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert rc == 1, err
    assert f"removes {len(gone)} of the {len(pools)} pools" in err and "allowMassPoolRemoval" in err
    assert _driver_versions(tb) == state  # nothing written, not even the pool that stays

    fleet_remote.commit(
        "yes, remove them",
        lambda work: _edit_fleet(work, lambda spec: spec.update(allowMassPoolRemoval=True)),
    )
    rc, _out, err = run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert rc == 0, err
    assert sorted(d["metadata"]["name"] for d in tb.client.list(*DRV)["items"]) == [kept]


def test_preflight_error_refuses_and_changes_nothing(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    assert run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)[0] == 0
    state = _driver_versions(tb)
    pool = sorted(state)[0]

    def break_it(work: Path) -> None:
        yaml = YAML()
        path = work / "nodepools" / pool / "clusterpolicy.yaml"
        doc = yaml.load(path.read_text())
        doc["spec"].setdefault("driver", {})["kernelModuleType"] = "bogus"
        with path.open("w") as fh:
            yaml.dump(doc, fh)

    fleet_remote.commit("bad enum", break_it)
    rc, _out, err = run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
    assert rc == 1
    assert "kernelModuleType" in err and "nothing was applied" in err
    assert _driver_versions(tb) == state


def test_labels_change_in_batches_of_max_unavailable(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    shapes = {s.name: s for s in nodes.read_pool_shapes(fleet_remote.work)}
    pool = next(iter(sorted(shapes)))
    created = nodes.create_pool_nodes(tb.client, [shapes[pool]], 20)
    nodes.wait_ready(tb.client, created)

    def set_budget(work: Path) -> None:
        yaml = YAML()
        path = work / "nodepools" / pool / "pool.yaml"
        doc = yaml.load(path.read_text())
        doc["spec"]["maxUnavailable"] = "25%"
        with path.open("w") as fh:
            yaml.dump(doc, fh)

    fleet_remote.commit("25% budget", set_budget)
    rc, out, err = run(
        capsys,
        "apply",
        "--repo",
        fleet_remote.url,
        "--kubeconfig",
        tb.kubeconfig,
        "--pool",
        pool,
        "--no-wait",
    )
    assert rc == 0, err
    labelled = [
        n
        for n in tb.client.list("v1", "Node")["items"]
        if n["metadata"]["labels"].get(names.POOL_LABEL) == pool
    ]
    assert len(labelled) == 5  # one batch: 25% of 20
    rc, out, _ = run(
        capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig, "--pool", pool
    )
    assert rc == 0
    assert "15 nodes relabelled in 3 batches" in out
    labelled = [
        n
        for n in tb.client.list("v1", "Node")["items"]
        if n["metadata"]["labels"].get(names.POOL_LABEL) == pool
    ]
    assert len(labelled) == 20


def _drop_pool(work: Path, victim: str) -> None:
    shutil.rmtree(work / "nodepools" / victim)
    yaml = YAML()
    fleet = yaml.load((work / "fleet.yaml").read_text())
    for stage in fleet["spec"]["stages"]:
        if victim in stage["pools"]:
            stage["pools"].remove(victim)
    fleet["spec"]["stages"] = [s for s in fleet["spec"]["stages"] if s["pools"]]
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(fleet, fh)


def test_a_removed_pool_is_pruned_only_by_the_stage_that_held_it(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tb = clean_cluster
    _add_nodes(tb, fleet_remote.work)
    assert run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)[0] == 0
    # train-h100 is held by the last stage (training); infer-l40s is the only pool of
    # inference, so that stage goes with it and the last stage prunes it.
    fleet_remote.commit("remove train-h100", lambda w: _drop_pool(w, "train-h100"))
    fleet_remote.commit("remove infer-l40s", lambda w: _drop_pool(w, "infer-l40s"))

    def apply_stage(stage: str) -> None:
        args = ("apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)
        assert run(capsys, *args, "--stage", stage)[0] == 0

    def labelled(pool: str) -> list[str]:
        return [
            n["metadata"]["name"]
            for n in tb.client.list("v1", "Node")["items"]
            if n["metadata"]["labels"].get(names.POOL_LABEL) == pool
        ]

    _, plan = _plan_json(capsys, fleet_remote.url, tb.kubeconfig, "--stage", "canary")
    assert [o for o in plan["plans"][0]["clusterObjects"] if o["action"] == "pruned"] == []
    apply_stage("canary")  # the first stage carries the ClusterPolicy, not these prunes
    assert tb.client.get(*DRV, "train-h100") is not None
    assert tb.client.get(*DRV, "infer-l40s") is not None
    assert labelled("train-h100") and labelled("infer-l40s")
    _, plan = _plan_json(capsys, fleet_remote.url, tb.kubeconfig, "--stage", "training")
    pruned = [o["name"] for o in plan["plans"][0]["clusterObjects"] if o["action"] == "pruned"]
    assert pruned == ["infer-l40s", "train-h100"]
    apply_stage("training")
    assert tb.client.get(*DRV, "train-h100") is None and tb.client.get(*DRV, "infer-l40s") is None
    assert labelled("train-h100") == [] and labelled("infer-l40s") == []
    assert tb.client.get(*DRV, "train-b200") is not None and labelled("train-b200")


def test_apply_checks_against_the_clusters_own_crds_when_none_are_named(
    clean_cluster: Testbed,
    fleet_remote: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    tb = clean_cluster
    monkeypatch.delenv(crd_source.ENV, raising=False)  # as from an installed wheel
    rc, _out, err = run(
        capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig, "--dry-run"
    )
    assert rc == 0, err
    # --crds wins over the cluster: an empty directory is refused with the flag named
    empty = tmp_path / "no-crds"
    empty.mkdir()
    args = ("apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig, "--dry-run")
    rc, _out, err = run(capsys, *args, "--crds", str(empty))
    assert rc == 2
    assert "--crds" in err


def test_a_status_write_does_not_cost_a_server_side_diff(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator writes NVIDIADriver status often; an idle pass must not dry-run every pool
    again for it. A spec or label change still does, and is seen."""
    tb = clean_cluster
    assert run(capsys, "apply", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig)[0] == 0
    sha = tb.client.list(*DRV)["items"][0]["metadata"]["annotations"][names.COMMIT_ANNOTATION]
    compiled = compile_fleet(load_repo(fleet_remote.work), sha)
    (target,) = compiled.clusters.values()
    selection = engine.Selection(frozenset(target.pools), False)
    eng = engine.Engine(tb.client)

    def diffs() -> tuple[int, engine.ClusterPlan]:
        before = tb.client.requests.copy()
        plan = eng.plan(target, selection, sha)
        made = tb.client.requests - before
        return sum(n for k, n in made.items() if k.startswith("PATCH")), plan

    # cold: one dry-run per pool and per repo-built ConfigMap (sharing configs, MIG layouts)
    assert diffs()[0] == len(target.pools) + len(target.config_maps)
    assert diffs() == (0, diffs()[1])
    pool = sorted(target.pools)[0]
    tb.client.apply(
        {
            "apiVersion": DRV[0],
            "kind": DRV[1],
            "metadata": {"name": pool},
            "status": {"state": "notReady"},
        },
        field_manager="operator",
        subresource="status",
        force=True,
    )
    live = tb.client.get(*DRV, pool)
    assert live is not None and live["status"]["state"] == "notReady"
    patches, plan = diffs()
    assert patches == 0 and plan.in_sync
    tb.client.patch(*DRV, pool, {"spec": {"version": "570.195.03"}}, field_manager="kubectl-edit")
    patches, plan = diffs()
    assert patches == 1 and not plan.in_sync
    (drifted,) = [o for p in plan.pools for o in p.objects if o.drifted]
    assert drifted.name == pool


def test_nodes_a_trailing_cache_shows_unlabelled_are_not_patched_again(
    clean_cluster: Testbed, fleet_remote: Any
) -> None:
    """The node cache may not have seen our label writes by the next pass (at 5,000 nodes
    whole pools were patched twice): a node it still shows at the version we planned from is
    planned as our PATCH returned it. A later change by someone else is planned again."""
    tb = clean_cluster
    _add_nodes(tb, fleet_remote.work)
    head = fleet_remote.commit("head")
    (target,) = compile_fleet(load_repo(fleet_remote.work), head).clusters.values()
    selection = engine.Selection(frozenset(target.pools), False)
    eng = engine.Engine(tb.client)
    stale = [slim.node(n) for n in tb.client.list("v1", "Node")["items"]]  # before our writes
    planned = {
        d.node for p in eng.plan(target, selection, head, nodes=stale).pools for d in p.nodes
    }
    assert planned, "every node needs its pool's labels"
    result = eng.apply(eng.plan(target, selection, head, nodes=stale), all_batches=False)
    patched = {n for batch in result.label_batches for n in batch}
    assert patched
    before = tb.client.requests.copy()
    again = eng.plan(target, selection, head, nodes=stale)  # the cache has not moved
    assert {d.node for p in again.pools for d in p.nodes} == planned - patched
    eng.apply(again, all_batches=False)
    rewritten = {
        k.rsplit("/", 1)[1] for k in tb.client.requests - before if k.startswith("PATCH /api/v1/")
    }
    assert not rewritten & patched, rewritten
    # Someone removes a label we set: the cache moves past our write, and it is put back.
    victim = sorted(patched)[0]
    tb.client.patch("v1", "Node", victim, {"metadata": {"labels": {names.POOL_LABEL: None}}})
    fresh = [slim.node(n) for n in tb.client.list("v1", "Node")["items"]]
    repaired = eng.plan(target, selection, head, nodes=fresh)
    assert victim in {d.node for p in repaired.pools for d in p.nodes}


def test_nodes_a_cache_shows_changed_in_between_are_not_patched_again(
    clean_cluster: Testbed, fleet_remote: Any
) -> None:
    """Mid-rollout the operator labels nodes too: the cache may show a version newer than the
    one we planned from but older than our PATCH (the +2,722 PATCHes of a 5,000-node run). It
    is planned as our PATCH returned it; a version after our PATCH is trusted again."""
    tb = clean_cluster
    _add_nodes(tb, fleet_remote.work)
    head = fleet_remote.commit("head")
    (target,) = compile_fleet(load_repo(fleet_remote.work), head).clusters.values()
    selection = engine.Selection(frozenset(target.pools), False)
    eng = engine.Engine(tb.client)
    stale = [slim.node(n) for n in tb.client.list("v1", "Node")["items"]]
    plan = eng.plan(target, selection, head, nodes=stale)
    planned = {d.node for p in plan.pools for d in p.nodes}
    assert planned, "every node needs its pool's labels"
    for name in planned:  # someone else's write after our plan, before our PATCH
        tb.client.patch("v1", "Node", name, {"metadata": {"labels": {"example.com/other": "x"}}})
    between = [slim.node(n) for n in tb.client.list("v1", "Node")["items"]]
    result = eng.apply(plan, all_batches=False)
    patched = {n for batch in result.label_batches for n in batch}
    assert patched
    again = eng.plan(target, selection, head, nodes=between)  # the cache has not seen our PATCH
    assert {d.node for p in again.pools for d in p.nodes} == planned - patched
    # A label of ours removed after our PATCH: a newer version, planned from the cache.
    victim = sorted(patched)[0]
    tb.client.patch("v1", "Node", victim, {"metadata": {"labels": {names.POOL_LABEL: None}}})
    fresh = [slim.node(n) for n in tb.client.list("v1", "Node")["items"]]
    assert victim in {
        d.node for p in eng.plan(target, selection, head, nodes=fresh).pools for d in p.nodes
    }
