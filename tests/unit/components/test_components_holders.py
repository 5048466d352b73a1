"""Who holds a node the driver upgrade waits on (components/holders.py), per waiting state."""

from __future__ import annotations

from typing import Any

import pytest

from gitops_gpu.components import holders
from gitops_gpu.components.holders import DRAIN, POD_DELETION, WAIT_FOR_JOBS, Holder, NodeWait


def pod(
    name: str,
    *,
    ns: str = "research",
    labels: dict[str, str] | None = None,
    owner: str | None = "Job",
    gpus: bool = False,
    phase: str = "Running",
    mirror: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if mirror:
        meta["annotations"] = {holders.MIRROR_ANNOTATION: "abc"}
    limits = {"nvidia.com/gpu": "1"} if gpus else {"cpu": "1"}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def pdb(name: str, selector: dict[str, Any] | None, allowed: int, ns: str = "research") -> Any:
    spec = {"selector": selector} if selector is not None else {}
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
        "status": {"disruptionsAllowed": allowed},
    }


TRAIN = pod("train-llm-7", labels={"app": "train"})
BUDGETS = [
    pdb("train-pdb", {"matchLabels": {"app": "train"}}, 0),
    pdb("roomy", {"matchLabels": {"app": "train"}}, 2),  # allows disruption: not a holder
    pdb("other-ns", {"matchLabels": {"app": "train"}}, 0, ns="prod"),
    pdb("no-selector", None, 0),  # policy/v1: selects nothing
]


def test_a_drain_is_held_by_the_pdb_that_allows_no_disruption() -> None:
    daemon = pod("exporter", owner="DaemonSet")
    static = pod("static", owner=None, mirror=True)
    done = pod("finished", phase="Succeeded")
    bare = pod("notebook", owner=None)
    found = holders.holders(DRAIN, [TRAIN, daemon, static, done, bare], BUDGETS)
    assert [str(h) for h in found] == [
        "pod research/notebook (no controller)",
        "pod research/train-llm-7 (Job, PDB train-pdb allows 0)",
    ]


def test_the_drains_pod_selector_narrows_what_it_evicts() -> None:
    other = pod("web", labels={"app": "web"})
    selector = holders.parse_selector("app=train")
    assert [h.pod for h in holders.holders(DRAIN, [TRAIN, other], [], selector)] == [
        "research/train-llm-7"
    ]


def test_pod_deletion_waits_only_on_gpu_pods_and_jobs_on_what_was_listed() -> None:
    gpu = pod("train-gpu", gpus=True, owner="StatefulSet")
    mig = pod("mig-user", owner="ReplicaSet")
    mig["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/mig-1g.10gb": "1"}}
    assert [str(h) for h in holders.holders(POD_DELETION, [TRAIN, gpu, mig], BUDGETS)] == [
        "pod research/mig-user (ReplicaSet)",
        "pod research/train-gpu (StatefulSet)",
    ]
    # The operator deletes GPU pods by eviction: a budget that allows nothing holds it too.
    budgeted = pod("train-gpu-2", labels={"app": "train"}, gpus=True)
    assert [str(h) for h in holders.holders(POD_DELETION, [budgeted], BUDGETS)] == [
        "pod research/train-gpu-2 (Job, PDB train-pdb allows 0)"
    ]
    # wait-for-jobs: the pods the waitForCompletion selector listed, unfinished; no PDB read.
    assert holders.holders(WAIT_FOR_JOBS, [TRAIN], BUDGETS) == (
        Holder("research/train-llm-7", "Job"),
    )


def test_a_wait_says_how_long_and_who_and_counts_the_rest() -> None:
    many = tuple(Holder(f"ns/p{i}", "Job") for i in range(5))
    wait = NodeWait("gpu-7", "train", DRAIN, 1000.0, many)
    now = 1000.0 + 3 * 86400 + 4 * 3600 + 59
    assert wait.describe(now) == (
        "waiting 3d 4h for pod ns/p0 (Job), pod ns/p1 (Job), pod ns/p2 (Job) and 2 more"
    )
    assert (
        wait.hold() == "gpu-7 waits on pod ns/p0 (Job), pod ns/p1 (Job), pod ns/p2 (Job) and 2 more"
    )
    empty = NodeWait("gpu-7", "train", DRAIN, None, ())
    assert empty.describe(now) == "waiting in drain-required (no pod holds it now)"
    assert empty.hold() == "" and empty.waited(now) == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h"),
        (3660, "1h 1m"),
        (86400, "1d"),
        (90000, "1d 1h"),
    ],
)
def test_ages_use_the_two_largest_units(seconds: int, text: str) -> None:
    assert holders.age(seconds) == text


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("app=train", {"app": "train"}, True),
        ("app==train,tier!=db", {"app": "train", "tier": "web"}, True),
        ("app=train,tier!=db", {"app": "train", "tier": "db"}, False),
        ("gpu", {"gpu": ""}, True),
        ("!gpu", {"gpu": ""}, False),
        ("", {"anything": "x"}, True),
    ],
)
def test_selector_strings_as_upgrade_policy_writes_them(
    selector: str, labels: dict[str, str], matches: bool
) -> None:
    assert holders.matches(holders.parse_selector(selector), labels) is matches


def test_match_expressions_and_the_since_annotation() -> None:
    sel = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["train", "eval"]}]}
    assert holders.matches(sel, {"app": "eval"}) and not holders.matches(sel, {"app": "web"})
    assert not holders.matches({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, {})
    assert holders.since("drain-required@2026-12-03T04:50:00Z", DRAIN) == 1796273400.0
    assert holders.since("pod-deletion-required@2026-12-03T04:50:00Z", DRAIN) is None  # moved on
    assert holders.since("garbage", DRAIN) is None and holders.since(None, DRAIN) is None
