"""The device-plugin rung against what a fleet-repo sharing config promises: the node must
advertise gpu.count x replicas of the config's resource, GFD's sharing labels agreeing, or the
config was applied but never took effect."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from components_builders import NOW, edit, healthy, pool

from gitops_gpu.components import device_plugin
from gitops_gpu.components.health import Health, Options
from gitops_gpu.fleet.sharing_promise import SharingPromise, promise

KEY = "infer-l40s-0a1b2c3d"
TS4 = SharingPromise("time-slicing", "nvidia.com/gpu", 4)
LONG_AGO = Options(since=NOW - timedelta(hours=1))
JUST_NOW = Options(since=NOW - timedelta(seconds=20))


def _node(allocatable: dict[str, str], **labels: str | None) -> object:
    return edit(
        healthy("l40s-1", "l40s"),
        labels={"nvidia.com/device-plugin.config": KEY, **labels},
        allocatable=allocatable,
    )


def _check(ev: object, promised: SharingPromise, opts: Options) -> tuple[Health, str]:
    target = pool(device_plugin_config=KEY, mig_config=None, device_plugin_promise=promised)
    got = device_plugin.check(ev, target, opts)  # type: ignore[arg-type]
    return got.health, got.reason


def test_a_node_advertising_the_promise_is_healthy() -> None:
    ev = _node(
        {"nvidia.com/gpu": "16"},
        **{"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
    )
    health, reason = _check(ev, TS4, LONG_AGO)
    assert health is Health.HEALTHY and "16 nvidia.com/gpu (time-slicing x4" in reason


def test_a_config_that_never_took_effect_is_degraded_with_the_numbers() -> None:
    ev = _node({"nvidia.com/gpu": "4"}, **{"nvidia.com/gpu.replicas": "1"})
    health, reason = _check(ev, TS4, LONG_AGO)
    assert health is Health.DEGRADED
    assert f"allocatable nvidia.com/gpu 4, config {KEY} promises 4 GPUs x 4 replicas = 16" in reason
    assert "nvidia.com/gpu.replicas=1, config" in reason and "never took effect" in reason


def test_right_after_adoption_it_is_still_progressing() -> None:
    health, reason = _check(_node({"nvidia.com/gpu": "4"}), TS4, JUST_NOW)
    assert health is Health.PROGRESSING and "= 16" in reason


def test_a_node_that_joined_after_adoption_gets_its_own_grace() -> None:
    ev = _node({"nvidia.com/gpu": "4"})
    ev.node["metadata"]["creationTimestamp"] = (NOW - timedelta(seconds=30)).strftime(  # type: ignore[attr-defined]
        "%Y-%m-%dT%H:%M:%SZ"
    )
    assert _check(ev, TS4, LONG_AGO)[0] is Health.PROGRESSING


def test_a_renamed_resource_is_counted_under_its_new_name() -> None:
    shared = SharingPromise("time-slicing", "nvidia.com/gpu.shared", 2)
    ok = _node({"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "8"})
    assert _check(ok, shared, LONG_AGO)[0] is Health.HEALTHY
    unrenamed = _node({"nvidia.com/gpu": "8"})
    health, reason = _check(unrenamed, shared, LONG_AGO)
    assert health is Health.DEGRADED and "allocatable nvidia.com/gpu.shared 0" in reason


def test_the_wrong_sharing_strategy_label_is_degraded() -> None:
    ev = _node({"nvidia.com/gpu": "16"}, **{"nvidia.com/gpu.sharing-strategy": "mps"})
    health, reason = _check(ev, TS4, LONG_AGO)
    assert health is Health.DEGRADED and "sharing-strategy=mps" in reason


@pytest.mark.parametrize(
    ("config", "want"),
    [
        (
            {
                "sharing": {
                    "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
                }
            },
            TS4,
        ),
        (
            {
                "sharing": {
                    "mps": {
                        "renameByDefault": True,
                        "resources": [{"name": "nvidia.com/gpu", "replicas": 3}],
                    }
                }
            },
            SharingPromise("mps", "nvidia.com/gpu.shared", 3),
        ),
        (
            {
                "sharing": {
                    "timeSlicing": {
                        "renameByDefault": True,
                        "resources": [
                            {"name": "nvidia.com/gpu", "rename": "gpu-ts", "replicas": 2}
                        ],
                    }
                }
            },
            SharingPromise("time-slicing", "gpu-ts", 2),
        ),
        # a device subset: what the node advertises depends on its devices, no promise
        (
            {
                "sharing": {
                    "timeSlicing": {
                        "resources": [{"name": "nvidia.com/gpu", "replicas": 4, "devices": 2}]
                    }
                }
            },
            None,
        ),
        (
            {
                "sharing": {
                    "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}
                }
            },
            None,
        ),
        ({"flags": {"migStrategy": "none"}}, None),
        ("not a mapping", None),
    ],
)
def test_what_a_config_promises(config: object, want: SharingPromise | None) -> None:
    assert promise(config) == want


def test_a_node_relabelled_in_a_later_batch_gets_its_grace_from_then() -> None:
    ev = _node({"nvidia.com/gpu": "4"})
    stamp = (NOW - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ev.node["metadata"]["annotations"]["gitops-gpu.io/relabelled-at"] = stamp  # type: ignore[attr-defined]
    assert _check(ev, TS4, LONG_AGO)[0] is Health.PROGRESSING


MIG_KEY = "train-0a1b2c3d"
PER_GPU = {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1}


def _mig(allocatable: dict[str, str], state: str = "success") -> tuple[object, object]:
    ev = edit(
        healthy(),
        labels={"nvidia.com/mig.config": MIG_KEY, "nvidia.com/mig.config.state": state},
        allocatable=allocatable,
    )
    target = pool(mig_config=MIG_KEY)
    return ev, replace(target, mig_layout_file="configs/mig/x.yaml", mig_resources=PER_GPU)


def test_a_mig_layout_is_held_to_the_devices_it_creates() -> None:
    ok, target = _mig({"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-3g.40gb": "8"})
    got = device_plugin.check(ok, target, LONG_AGO)  # type: ignore[arg-type]
    assert got.health is Health.HEALTHY and "24 MIG devices" in got.reason
    bad, _ = _mig({"nvidia.com/gpu": "8"})
    soon = Options(since=NOW - timedelta(minutes=10))  # mig-manager's own bound is 30m
    early = device_plugin.check(bad, target, soon)  # type: ignore[arg-type]
    assert early.health is Health.PROGRESSING
    want = f"allocatable nvidia.com/mig-1g.10gb 0, MIG layout {MIG_KEY} gives 8 GPUs x 2 = 16"
    assert want in early.reason
    late = device_plugin.check(bad, target, LONG_AGO)  # type: ignore[arg-type]
    assert late.health is Health.DEGRADED and "never appeared" in late.reason


def test_a_mig_layout_still_applying_is_not_judged_by_its_devices() -> None:
    pending, target = _mig({"nvidia.com/gpu": "8"}, state="pending")
    assert device_plugin.check(pending, target, LONG_AGO).health is Health.HEALTHY  # type: ignore[arg-type]
