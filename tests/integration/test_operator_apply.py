"""`gitops-gpu operator apply` on a real apiserver: the v26.7.0 release over the CRDs v26.3.3
left (Helm never upgraded them). The CRDs go first and are Established before the operator's
objects; the operator's Deployment rolls out (kube-controller-manager, the scheduler and kwok
run its pod); a second run changes nothing; a commit that fails preflight applies nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_operator_crds import _old_driver_crd
from test_operator_release import CRDS, VALUES, fleet, helm_env

from gitops_gpu.cli import main
from gitops_gpu.preflight import crd_change, run_preflight
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import crds, nodes, operator_env
from gitops_gpu_dev.testbed.session import Testbed

__all__ = ["helm_env"]  # the fixture: gpuOperator charts render with the pinned Helm
DRIVERS = "nvidiadrivers.nvidia.com"
NS = "gpu-operator"


@pytest.fixture
def stale_cluster(clean_cluster: Testbed) -> Iterator[Testbed]:
    """v26.3.3's NVIDIADriver CRD, one node for the operator's pod; afterwards the release's
    objects go and the testbed's own install of the operator is put back."""
    tb = clean_cluster
    # As the session's real operator leaves it (the e2e tests run first): the chart's
    # Deployment, scaled to 0, beside the operator process (operator_env.py).
    installed = operator_env.as_installed(operator_env.helm_deployment(NS), NS)
    tb.client.apply(installed, field_manager="gitops-gpu-testbed", force=True)
    crds.install_objects(tb.client, [_old_driver_crd()])
    tb.client.create(nodes.node_manifest("ops-000", {}, "NVIDIA-H100-80GB-HBM3"))
    try:
        yield tb
    finally:
        out = tb.client
        for api, kind in (
            ("apps/v1", "Deployment"),
            ("apps/v1", "DaemonSet"),
            ("v1", "ConfigMap"),
            ("v1", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1", "Role"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ):
            for item in out.list(api, kind, namespace=NS)["items"]:
                if item["metadata"]["name"].startswith(("gpu-operator", "node-feature-discovery")):
                    out.delete(api, kind, item["metadata"]["name"], NS)
        for kind in ("ClusterRole", "ClusterRoleBinding"):
            for item in out.list("rbac.authorization.k8s.io/v1", kind)["items"]:
                if item["metadata"]["name"].startswith("gpu-operator"):
                    out.delete("rbac.authorization.k8s.io/v1", kind, item["metadata"]["name"])
        crds.install(out, [paths.default_crds_dir() / "nvidia.com_nvidiadrivers.yaml"])
        out.apply(installed, field_manager="gitops-gpu-testbed", force=True)  # as it was


def _apply(root: Path, tb: Testbed, tmp: Path, capsys: Any) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(
        ["operator", "apply", "--repo", str(root), "--kubeconfig", tb.kubeconfig,
         "--crds", str(CRDS), "--timeout", "2m", "--cache-dir", str(tmp / "cache")]
    )  # fmt: skip
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def _release_crd() -> dict[str, Any]:
    path = paths.default_crds_dir() / "nvidia.com_nvidiadrivers.yaml"
    doc: dict[str, Any] = YAML(typ="safe").load(path.read_text())
    return doc


def test_crds_first_then_the_operator_then_nothing_to_do(
    stale_cluster: Testbed, tmp_path: Path, capsys: Any
) -> None:
    tb = stale_cluster
    root = fleet(tmp_path)
    before = run_preflight(root, crds_dir=CRDS, kubeconfig=tb.kubeconfig).findings
    assert any(f.code == "GG094" for f in before)  # upgradePolicy would be pruned

    rc, out = _apply(root, tb, tmp_path, capsys)
    assert rc == 0, out
    lines = out.splitlines()
    crd_at = lines.index(f"CustomResourceDefinition/{DRIVERS} configured")
    operator_at = lines.index("Deployment/gpu-operator configured")  # was scaled to 0
    assert crd_at < operator_at  # CRDs first
    assert "CRDs Established, the operator rolled out" in out

    live = tb.client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", DRIVERS)
    schema = crd_change.versions(live)["v1alpha1"]
    assert list(crd_change.missing(schema, crd_change.versions(_release_crd())["v1alpha1"])) == []
    dep = tb.client.get("apps/v1", "Deployment", "gpu-operator", NS)
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v26.7.0")
    assert dep["status"].get("availableReplicas") == 1
    after = run_preflight(root, crds_dir=CRDS, kubeconfig=tb.kubeconfig).findings
    assert [f.text() for f in after if f.code in ("GG094", "GG095")] == []

    rc, out = _apply(root, tb, tmp_path, capsys)
    assert rc == 0, out
    changed = [ln for ln in out.splitlines() if ln.endswith((" created", " configured"))]
    assert changed == []  # the same release again moves nothing


def test_a_commit_that_fails_preflight_applies_nothing(
    stale_cluster: Testbed, tmp_path: Path, capsys: Any
) -> None:
    tb = stale_cluster
    root = fleet(tmp_path, values=VALUES + "daemonset:\n  updateStrategy: OnDelete\n")
    rc, out = _apply(root, tb, tmp_path, capsys)
    assert rc == 1 and "GG089" in out and "nothing was applied" in out
    live = tb.client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", DRIVERS)
    assert "upgradePolicy" not in str(crd_change.versions(live)["v1alpha1"])
    dep = tb.client.get("apps/v1", "Deployment", "gpu-operator", NS)
    assert dep["spec"]["replicas"] == 0  # still the testbed's, untouched
    assert "gitops-gpu" not in {m["manager"] for m in dep["metadata"]["managedFields"]}


def test_plan_names_the_stale_crds_until_the_release_is_applied(
    stale_cluster: Testbed, tmp_path: Path, capsys: Any
) -> None:
    tb = stale_cluster
    root = fleet(tmp_path)

    def plan() -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(
            ["plan", "--repo", str(root), "--kubeconfig", tb.kubeconfig, "--format", "json",
             "--cache-dir", str(tmp_path / "cache"), "--no-nvml"]
        )  # fmt: skip
        captured = capsys.readouterr()
        return rc, captured.out, captured.err

    # The cluster refuses the dry-run of every NVIDIADriver: plan says why, per pool.
    rc, _out, err = plan()
    assert rc == 1 and "field not declared in schema" in err
    for pool in ("canary", "infer-l40s", "train-h100", "train-b200"):
        assert any("GG094" in ln and f"NVIDIADriver/{pool} " in ln for ln in err.splitlines()), err
    assert "GG095" in err and "the release v26.7.0" in err
    rc, out = _apply(root, tb, tmp_path, capsys)
    assert rc == 0, out
    rc, out, err = plan()
    assert rc in (0, 3), err
    assert json.loads(out)["crds"] == []
