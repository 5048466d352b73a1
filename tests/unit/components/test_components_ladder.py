"""The verification ladder: a healthy node passes every rung; each broken node fails exactly
at the rung that owns the fault, and that rung's reason is the node's reason."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from components_builders import (
    NOW,
    edit,
    healthy,
    pool,
    status_for,
    with_pods,
    with_status,
)

from gitops_gpu.components import health, ladder
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import Health, Options
from gitops_gpu.fleet.compiled import PoolTarget

H, P, D, U = Health.HEALTHY, Health.PROGRESSING, Health.DEGRADED, Health.UNKNOWN
DEFAULT_POOL = pool()


def test_rungs_in_deploy_order() -> None:
    assert ladder.COMPONENTS == (
        "node",
        "nfd",
        "driver",
        "gpu",
        "toolkit",
        "gfd",
        "device-plugin",
        "dcgm",
        "mig-manager",
        "validator",
    )


@pytest.mark.parametrize("snapshot", ["h100-80gb", "a100-40gb", "b200"])
def test_healthy_node_passes_every_rung(snapshot: str) -> None:
    verdict = ladder.walk(healthy(snapshot=snapshot), pool(gpu_product=None))
    assert verdict.health is H, verdict.reason
    assert [r.component for r in verdict.rungs] == list(ladder.COMPONENTS)
    assert all(r.ok for r in verdict.rungs)
    assert (
        verdict.reason == "all rungs healthy (driver: NVML reports 580.126.20, desired 580.126.20, "
        "upgrade-state upgrade-done)"
    )


def test_healthy_node_with_operator_pods() -> None:
    assert ladder.walk(with_pods(healthy()), DEFAULT_POOL).health is H


def test_healthy_mig_node() -> None:
    verdict = ladder.walk(healthy(snapshot="h100-80gb-mig"), pool(mig_config="all-1g.10gb"))
    assert verdict.health is H, verdict.reason
    assert "56 MIG devices" in next(
        r.reason for r in verdict.rungs if r.component == "device-plugin"
    )


def test_healthy_l40s_node_skips_mig() -> None:
    ev = healthy(snapshot="l40s")
    verdict = ladder.walk(ev, pool(gpu_product="NVIDIA-L40S"))
    assert verdict.health is H, verdict.reason
    mig = next(r for r in verdict.rungs if r.component == "mig-manager")
    assert mig.skipped


def _ecc() -> NodeEvidence:
    status = status_for("gpu-1")
    status["gpus"][4]["eccUncorrected"]["volatile"] = 3
    return with_status(healthy(), status)


def _remap(**flags: bool) -> NodeEvidence:
    status = status_for("gpu-1")
    status["gpus"][1]["pageRetirement"].update(flags)
    return with_status(healthy(), status)


Case = tuple[str, Callable[[], NodeEvidence], PoolTarget, str, Health, str]
G = "nvidia.com/"
CASES: list[Case] = [
    # -- node
    (
        "node NotReady",
        lambda: edit(healthy(), ready="Unknown"),
        DEFAULT_POOL,
        "node",
        D,
        "node: NotReady (NodeStatusUnknown: Kubelet stopped posting node status.)",
    ),
    (
        "node without Ready",
        lambda: NodeEvidence("gpu-1", {"metadata": {"name": "gpu-1"}, "status": {}}, None),
        DEFAULT_POOL,
        "node",
        U,
        "no Ready condition",
    ),
    # -- nfd
    (
        "no NFD labels",
        lambda: edit(
            healthy(),
            labels={"feature.node.kubernetes.io/pci-10de.present": None, G + "gpu.present": None},
        ),
        DEFAULT_POOL,
        "nfd",
        D,
        "NFD has not labelled the node",
    ),
    # -- driver
    (
        "no report",
        lambda: with_status(healthy(), None),
        DEFAULT_POOL,
        "driver",
        U,
        "driver: no NodeGPUReport for the node",
    ),
    (
        "stale report",
        lambda: with_status(healthy(), status_for("gpu-1", age=3600)),
        DEFAULT_POOL,
        "driver",
        U,
        "driver: NodeGPUReport is stale: 3600s old (limit 300s)",
    ),
    (
        "NVML missing",
        lambda: with_status(healthy(), status_for("gpu-1", nvml_error="LibraryNotFound")),
        DEFAULT_POOL,
        "driver",
        D,
        "driver: NVML unavailable (LibraryNotFound",
    ),
    (
        "NVML down mid-upgrade",
        lambda: edit(
            with_status(healthy(), status_for("gpu-1", nvml_error="DriverNotLoaded")),
            labels={G + "gpu-driver-upgrade-state": "pod-restart-required"},
        ),
        DEFAULT_POOL,
        "driver",
        P,
        "upgrade-state pod-restart-required",
    ),
    (
        "upgrade failed",
        lambda: edit(
            with_status(healthy(), status_for("gpu-1", driver_version="570.86.10")),
            labels={G + "gpu-driver-upgrade-state": "upgrade-failed"},
        ),
        DEFAULT_POOL,
        "driver",
        D,
        "driver: NVML reports 570.86.10, desired 580.126.20, upgrade-state upgrade-failed",
    ),
    (
        "upgrade in progress",
        lambda: edit(
            with_status(healthy(), status_for("gpu-1", driver_version="570.86.10")),
            labels={G + "gpu-driver-upgrade-state": "drain-required"},
        ),
        DEFAULT_POOL,
        "driver",
        P,
        "upgrade-state drain-required",
    ),
    (
        "upgrade held by a closed window",
        lambda: edit(
            with_status(healthy(), status_for("gpu-1", driver_version="570.86.10")),
            labels={
                G + "gpu-driver-upgrade-state": "upgrade-required",
                G + "gpu-driver-upgrade.skip": "true",
            },
            annotations={"gitops-gpu.io/upgrade-held": "frozen until Mon 00:00 UTC: launch"},
        ),
        DEFAULT_POOL,
        "driver",
        P,
        "upgrade-state upgrade-required (held: frozen until Mon 00:00 UTC: launch)",
    ),
    (
        "version never applied",
        lambda: with_status(healthy(), status_for("gpu-1", driver_version="570.86.10")),
        DEFAULT_POOL,
        "driver",
        P,
        "NVML reports 570.86.10, desired 580.126.20",
    ),
    (
        "validation pending",
        lambda: edit(healthy(), labels={G + "gpu-driver-upgrade-state": "validation-required"}),
        DEFAULT_POOL,
        "driver",
        P,
        "upgrade-state validation-required",
    ),
    (
        "other NVIDIADriver owns the node",
        lambda: edit(healthy(), labels={G + "gpu-operator.driver.owner": "infer"}),
        DEFAULT_POOL,
        "driver",
        P,
        "owned by NVIDIADriver infer, the pool's is train",
    ),
    # -- gpu
    (
        "GPU fell off the bus",
        lambda: with_status(healthy(), status_for("gpu-1", lost_gpus=[6])),
        DEFAULT_POOL,
        "gpu",
        D,
        "GPU 6 is lost (fell off the bus)",
    ),
    (
        "Xid 48",
        lambda: with_status(healthy(), status_for("gpu-1", xid_events=[(2, 48)])),
        DEFAULT_POOL,
        "gpu",
        D,
        "gpu: Xid 48 on GPU 2",
    ),
    (
        "uncorrectable ECC",
        _ecc,
        DEFAULT_POOL,
        "gpu",
        D,
        "3 uncorrectable ECC errors since the driver loaded",
    ),
    (
        "row remap pending",
        lambda: _remap(pending=True),
        DEFAULT_POOL,
        "gpu",
        D,
        "remapped-rows pending, the GPU needs a reset",
    ),
    (
        "row remap failed",
        lambda: _remap(failed=True),
        DEFAULT_POOL,
        "gpu",
        D,
        "row remapping failed",
    ),
    # -- toolkit
    (
        "toolkit paused",
        lambda: edit(
            healthy(), labels={G + "gpu.deploy.container-toolkit": "paused-for-driver-upgrade"}
        ),
        DEFAULT_POOL,
        "toolkit",
        P,
        "gpu.deploy.container-toolkit=paused-for-driver-upgrade",
    ),
    (
        "toolkit crash loop",
        lambda: with_pods(
            healthy(),
            **{
                "nvidia-container-toolkit-daemonset": {
                    "ready": False,
                    "waiting": "CrashLoopBackOff",
                }
            },
        ),
        DEFAULT_POOL,
        "toolkit",
        D,
        "CrashLoopBackOff (7 restarts)",
    ),
    (
        "toolkit label not applied",
        lambda: edit(healthy(), labels={G + "gpu.deploy.container-toolkit": "false"}),
        DEFAULT_POOL,
        "toolkit",
        P,
        "label not applied yet",
    ),
    # -- gfd
    (
        "gfd labels missing",
        lambda: edit(healthy(), labels={G + "cuda.driver-version.full": None}),
        DEFAULT_POOL,
        "gfd",
        P,
        "labels missing: nvidia.com/cuda.driver-version.full",
    ),
    (
        "gfd count disagrees",
        lambda: edit(healthy(), labels={G + "gpu.count": "7"}),
        DEFAULT_POOL,
        "gfd",
        P,
        "nvidia.com/gpu.count=7, NVML counts 8",
    ),
    (
        "gfd driver label lags",
        lambda: edit(healthy(), labels={G + "cuda.driver-version.full": "570.86.10"}),
        DEFAULT_POOL,
        "gfd",
        P,
        "labels say 570.86.10, NVML reports 580.126.20",
    ),
    (
        "wrong GPU product",
        lambda: healthy(snapshot="a100-40gb"),
        DEFAULT_POOL,
        "gfd",
        D,
        "the pool expects NVIDIA-H100-80GB-HBM3",
    ),
    # -- device plugin
    (
        "no GPUs advertised",
        lambda: edit(healthy(), allocatable={"nvidia.com/gpu": "0"}),
        DEFAULT_POOL,
        "device-plugin",
        P,
        "advertises no GPUs yet",
    ),
    (
        "GPU marked unhealthy",
        lambda: edit(healthy(), allocatable={"nvidia.com/gpu": "7"}),
        DEFAULT_POOL,
        "device-plugin",
        D,
        "allocatable nvidia.com/gpu 7 < 8 GPUs x 1 replicas",
    ),
    (
        "plugin config not applied",
        healthy,
        pool(device_plugin_config="ts-4"),
        "device-plugin",
        P,
        "nvidia.com/device-plugin.config=<unset>, desired ts-4",
    ),
    # -- dcgm
    (
        "dcgm exporter not ready",
        lambda: with_pods(healthy(), **{"nvidia-dcgm-exporter": {"ready": False}}),
        DEFAULT_POOL,
        "dcgm",
        P,
        "pod nvidia-dcgm-exporter-x1y2z not Ready",
    ),
    # -- mig manager
    (
        "mig label not applied",
        healthy,
        pool(mig_config="all-1g.10gb"),
        "mig-manager",
        P,
        "nvidia.com/mig.config=all-disabled, desired all-1g.10gb",
    ),
    (
        "mig failed",
        lambda: edit(healthy(), labels={G + "mig.config.state": "failed"}),
        DEFAULT_POOL,
        "mig-manager",
        D,
        "mig.config.state=failed applying all-disabled",
    ),
    (
        "mig rebooting",
        lambda: edit(healthy(), labels={G + "mig.config.state": "rebooting"}),
        DEFAULT_POOL,
        "mig-manager",
        P,
        "mig.config.state=rebooting",
    ),
    (
        "mig manager paused",
        lambda: edit(healthy(), labels={G + "gpu.deploy.mig-manager": "paused-for-mig-change"}),
        DEFAULT_POOL,
        "mig-manager",
        P,
        "paused-for-mig-change",
    ),
    (
        "mig mode pending reset",
        lambda: with_status(healthy(), status_for("gpu-1", mig_pending="enabled")),
        DEFAULT_POOL,
        "mig-manager",
        P,
        "MIG disabled, pending enabled (needs a GPU reset)",
    ),
    (
        "mig success but NVML disagrees",
        lambda: edit(healthy(), labels={G + "mig.config": "all-1g.10gb"}),
        pool(mig_config="all-1g.10gb"),
        "mig-manager",
        P,
        "NVML shows MIG disabled on GPU 0",
    ),
    (
        "MIG profile on L40S",
        lambda: healthy(snapshot="l40s"),
        pool(mig_config="all-1g.10gb", gpu_product="NVIDIA-L40S"),
        "mig-manager",
        D,
        "not MIG-capable",
    ),
    # -- validator
    (
        "validator failed",
        lambda: edit(healthy(), annotations={"gitops-gpu.io/validator": "failed"}),
        DEFAULT_POOL,
        "validator",
        D,
        "validator: gitops-gpu.io/validator=failed",
    ),
    (
        "no validator evidence",
        lambda: edit(healthy(), annotations={"gitops-gpu.io/validator": None}),
        DEFAULT_POOL,
        "validator",
        U,
        "no nvidia-operator-validator pod and no gitops-gpu.io/validator",
    ),
    (
        "validator pod not ready",
        lambda: with_pods(healthy(), **{"nvidia-operator-validator": {"ready": False}}),
        DEFAULT_POOL,
        "validator",
        P,
        "pod nvidia-operator-validator-x1y2z not Ready",
    ),
]


@pytest.mark.parametrize(
    ("title", "build", "target", "rung", "want", "reason"), CASES, ids=[c[0] for c in CASES]
)
def test_node_fails_at_the_rung_that_owns_the_fault(
    title: str,
    build: Callable[[], NodeEvidence],
    target: PoolTarget,
    rung: str,
    want: Health,
    reason: str,
) -> None:
    verdict = ladder.walk(build(), target)
    failing = verdict.failing
    assert failing is not None, f"{title}: node passed every rung"
    assert failing.component == rung, failing.reason
    assert failing.health is want, failing.reason
    assert reason in failing.reason
    assert failing.reason.startswith(f"{rung}: ")
    if verdict.unavailable is None:  # else the pool's unavailableNodes judges it
        assert (verdict.health, verdict.reason) == (failing.health, failing.reason)
    before = ladder.COMPONENTS[: ladder.COMPONENTS.index(rung)]
    assert all(r.ok for r in verdict.rungs if r.component in before)


def test_every_rung_has_a_failing_case() -> None:
    assert {c[3] for c in CASES} == set(ladder.COMPONENTS)


def test_application_xids_are_not_faults() -> None:
    ev = with_status(healthy(), status_for("gpu-1", xid_events=[(0, 13), (1, 31), (2, 43)]))
    assert ladder.walk(ev, DEFAULT_POOL).health is H


def test_xids_before_adoption_are_history() -> None:
    ev = with_status(healthy(), status_for("gpu-1", xid_events=[(2, 79)], age=120))
    assert ladder.walk(ev, DEFAULT_POOL).failing.component == "gpu"  # type: ignore[union-attr]
    adopted = Options(since=NOW - timedelta(seconds=60))
    assert ladder.walk(ev, DEFAULT_POOL, adopted).health is H


def test_slow_agent_heartbeat_widens_staleness() -> None:
    status = status_for("gpu-1", age=600)
    status["heartbeatSeconds"] = 300  # stale only after 2.5 heartbeats = 750s
    assert ladder.walk(with_status(healthy(), status), DEFAULT_POOL).health is H


def test_disabled_components_are_skipped() -> None:
    target = pool(
        extra_labels={
            "nvidia.com/gpu.deploy.dcgm": "false",
            "nvidia.com/gpu.deploy.dcgm-exporter": "false",
            "nvidia.com/gpu.deploy.container-toolkit": "false",
        }
    )
    ev = edit(
        healthy(),
        labels={
            "nvidia.com/gpu.deploy.dcgm": "false",
            "nvidia.com/gpu.deploy.dcgm-exporter": "false",
            "nvidia.com/gpu.deploy.container-toolkit": "false",
        },
    )
    verdict = ladder.walk(ev, target)
    assert verdict.health is H
    assert {r.component for r in verdict.rungs if r.skipped} == {"toolkit", "dcgm"}


def test_first_failure_wins_over_later_worse_ones() -> None:
    ev = edit(
        with_status(healthy(), status_for("gpu-1", driver_version="570.86.10")),
        labels={"nvidia.com/gpu-driver-upgrade-state": "drain-required"},
        annotations={"gitops-gpu.io/validator": "failed"},
    )
    verdict = ladder.walk(ev, DEFAULT_POOL)
    assert (verdict.failing.component, verdict.health) == ("driver", P)  # type: ignore[union-attr]
    assert next(r for r in verdict.rungs if r.component == "validator").health is D


def test_judge_pool_worst_of() -> None:
    nodes = [healthy("a"), with_status(healthy("b"), None), healthy("c")]
    result = ladder.judge_pool(DEFAULT_POOL, nodes)
    assert result.health is U
    assert (result.count(H), result.count(U), result.total) == (2, 1, 3)
    assert result.reason.startswith("train: 2 Healthy, 1 Unknown (e.g. b: driver: no NodeGPUR")
    assert health.aggregate("empty", []).health is U


def _driver_pod(ev: NodeEvidence, waiting: str, restarts: int, age_s: float) -> NodeEvidence:
    created = (NOW - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = {
        "metadata": {
            "name": "nvidia-gpu-driver-ubuntu22.04-train-abcde",
            "namespace": "gpu-operator",
            "labels": {"app.kubernetes.io/component": "nvidia-driver"},
            "creationTimestamp": created,
        },
        "spec": {"nodeName": ev.name},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "nvidia-driver-ctr",
                    "restartCount": restarts,
                    "state": {"waiting": {"reason": waiting}},
                }
            ],
        },
    }
    return NodeEvidence(ev.name, ev.node, ev.report, (*ev.pods, pod), ev.now)


@pytest.mark.parametrize(
    ("waiting", "restarts", "age_s", "want"),
    [
        ("CrashLoopBackOff", 2, 60, P),  # building or loading the module: may still recover
        ("CrashLoopBackOff", 11, 60, D),  # past the bound: broken, not "progressing" forever
        ("ImagePullBackOff", 0, 60, P),
        ("ImagePullBackOff", 0, 600, D),
    ],
)
def test_a_broken_driver_pod_names_itself_and_degrades_past_a_bound(
    waiting: str, restarts: int, age_s: float, want: Health
) -> None:
    """The node still says upgrade-done and NVML still reports the loaded driver: only the
    driver pod tells."""
    ev = _driver_pod(with_pods(healthy("gpu-1")), waiting, restarts, age_s)
    verdict = ladder.walk(ev, DEFAULT_POOL)
    assert verdict.health is want
    assert verdict.reason == (
        f"driver: driver pod nvidia-gpu-driver-ubuntu22.04-train-abcde: container "
        f"nvidia-driver-ctr {waiting} ({restarts} restarts), upgrade-state upgrade-done"
    )


def test_equal_verdicts_share_their_rungs_and_a_different_fact_does_not() -> None:
    """At 10,000 nodes ten rung results a node were most of the judge's memory: equal results
    are one object (health.result), and one node's different fact stays its own."""
    one = ladder.walk(healthy("gpu-1"), DEFAULT_POOL)
    two = ladder.walk(healthy("gpu-2"), DEFAULT_POOL)
    assert one.rungs is two.rungs and one.reason is two.reason
    assert (one.node, two.node) == ("gpu-1", "gpu-2")
    down = ladder.walk(edit(healthy("gpu-3"), ready="False"), DEFAULT_POOL)
    assert down.rungs[0] is not one.rungs[0] and down.rungs[0].health is not Health.HEALTHY
    assert down.rungs[1:] == one.rungs[1:]
    assert all(r is s for r, s in zip(down.rungs[1:], one.rungs[1:], strict=True))
