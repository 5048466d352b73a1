"""GPU sharing and MIG layouts against the real GPU Operator v26.7.0: the operator mounts the
ConfigMaps gitops-gpu builds from the fleet repo (device plugin and mig-manager), and the hosts
advertise what those configs promise; then the shape users copy from OpenShift and Red Hat's
GitOps catalog (base ``devicePlugin.config: {name: "", default: ""}``, one pool's overlay
turning time-slicing on with a ConfigMap of their own), refused as GG020 before, passes
``check --kubeconfig`` and is applied: the operator mounts the user's ConfigMap and only that
pool's nodes select its key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Env
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.fleet import mig_layouts, sharing
from gitops_gpu_dev.testbed.operator import NAMESPACE

pytestmark = pytest.mark.e2e
PLUGIN_DS = "nvidia-device-plugin-daemonset"
MIG_DS = "nvidia-mig-manager"
DP = names.DEVICE_PLUGIN_CONFIG_LABEL
USERS = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
"""


def _mounted(env: Env, daemonset: str) -> set[str]:
    """The ConfigMaps an operand DaemonSet of the real operator mounts."""
    ds = env.tb.client.get("apps/v1", "DaemonSet", daemonset, NAMESPACE) or {}
    volumes = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
    return {v["configMap"]["name"] for v in volumes if v.get("configMap")}


def _node(env: Env, name: str) -> dict[str, Any]:
    node = env.tb.client.get("v1", "Node", name)
    assert node is not None
    return node


def _allocatable(env: Env, name: str) -> dict[str, str]:
    return dict(_node(env, name)["status"].get("allocatable") or {})


def _facts(env: Env) -> str:
    """What the two nodes carry and whether the simulator still runs, for a failure message."""
    out = [f"simulator alive: {env.sim._thread is not None and env.sim._thread.is_alive()}"]
    for name in ("infer-l40s-000", "train-h100-000"):
        node = _node(env, name)
        labels = {k: v for k, v in node["metadata"]["labels"].items() if "config" in k}
        notes = {k: v for k, v in (node["metadata"].get("annotations") or {}).items() if "sim" in k}
        out.append(f"{name}: {_allocatable(env, name)} {labels} {notes}")
    return "\n".join(out)


def _openshift_shape(work: Path) -> None:
    yaml = YAML()
    base = work / "base" / "clusterpolicy.yaml"
    doc = yaml.load(base.read_text())
    doc["spec"]["devicePlugin"]["config"] = {"name": "", "default": ""}
    with base.open("w") as fh:
        yaml.dump(doc, fh)
    pool = work / "nodepools" / "infer-l40s" / "pool.yaml"
    pdoc = yaml.load(pool.read_text())
    del pdoc["spec"]["devicePluginConfig"]
    with pool.open("w") as fh:
        yaml.dump(pdoc, fh)
    overlay = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"devicePlugin": {"config": {"name": "time-slicing-config", "default": "any"}}},
    }
    with (pool.parent / "clusterpolicy.yaml").open("w") as fh:
        yaml.dump(overlay, fh)


@pytest.mark.timeout(600)
def test_the_operator_mounts_the_sharing_configs_and_the_openshift_shape_applies(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env.start_nodes(1)
    apply = ["apply", "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig]
    assert main(apply) == 0, capsys.readouterr().err
    env.wait(
        "the operator mounts gitops-gpu's device-plugin and MIG ConfigMaps",
        lambda: (
            sharing.CONFIGMAP_NAME in _mounted(env, PLUGIN_DS)
            and mig_layouts.CONFIGMAP_NAME in _mounted(env, MIG_DS)
        ),
        240,
    )
    try:
        env.wait(
            "infer-l40s advertises 4 L40S x 4 replicas, train-h100 its layout's MIG devices",
            lambda: (
                _allocatable(env, "infer-l40s-000").get("nvidia.com/gpu") == "16"
                and _allocatable(env, "train-h100-000").get("nvidia.com/mig-1g.10gb") == "16"
            ),
            120,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_facts(env)}") from None
    # the OpenShift / GitOps-catalog shape, with the user's own ConfigMap
    env.tb.client.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "time-slicing-config", "namespace": NAMESPACE},
            "data": {"any": USERS},
        },
        field_manager="test",
    )
    env.remote.commit("time-slicing for infer-l40s, the OpenShift way", _openshift_shape)
    capsys.readouterr()
    check = ["check", str(env.remote.work), "--kubeconfig", env.tb.kubeconfig, "--format", "json"]
    rc = main(check)
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert rc == 0, findings
    assert not [f for f in findings if f["code"] in ("GG020", "GG082")], findings
    assert main(apply) == 0, capsys.readouterr().err
    env.wait(
        "the operator mounts the user's ConfigMap",
        lambda: "time-slicing-config" in _mounted(env, PLUGIN_DS),
        240,
    )
    assert _node(env, "infer-l40s-000")["metadata"]["labels"].get(DP) == "any"
    assert DP not in _node(env, "canary-000")["metadata"]["labels"]
    env.wait(
        "infer-l40s advertises the user's key: 4 L40S x 2",
        lambda: _node(env, "infer-l40s-000")["status"]["allocatable"].get("nvidia.com/gpu") == "8",
        120,
    )
