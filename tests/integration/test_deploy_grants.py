"""The deploy RBAC as data (from deploy/kustomize, which test_deploy_chart proves is the chart's
render) and the helpers the least-privilege tests share: install it on the testbed, mint real
service-account tokens with the TokenRequest API, assert refusals."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu import kube, names
from gitops_gpu.errors import KubeError
from gitops_gpu_dev.testbed.session import Testbed

Obj = dict[str, Any]
NS = "gitops-gpu"
KUSTOMIZE = Path(__file__).resolve().parents[2] / "deploy" / "kustomize"
INSTALL = (  # what can exist without images: no Deployment, DaemonSet or Service
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ConfigMap",
)

RBAC_API = "rbac.authorization.k8s.io/v1"


def rendered() -> list[Obj]:
    docs: list[Obj] = []
    for path in sorted(KUSTOMIZE.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in YAML(typ="safe").load_all(path.read_text()) if d]
    return docs


def controller_roles() -> list[Obj]:
    return [
        d
        for d in rendered()
        if d["kind"] in ("ClusterRole", "Role")
        and d["metadata"]["name"].startswith("gitops-gpu-controller")
    ]


Grant = tuple[str, str, str | None]  # verb, resource, namespace (None: cluster-wide)


def granted() -> set[Grant]:
    return {
        (verb, res, role["metadata"].get("namespace"))
        for role in controller_roles()
        for rule in role["rules"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.fixture(scope="module")
def installed(testbed: Testbed) -> Testbed:
    admin = testbed.client
    operator_ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
    admin.apply(operator_ns, field_manager="gitops-gpu-test")
    docs = rendered()
    for kind in INSTALL:
        for doc in (d for d in docs if d["kind"] == kind):
            admin.apply(doc, field_manager="gitops-gpu-test-install", force=True)
    # The policy is enforced once the apiserver has compiled it: a node-less agent token's
    # dry-run write is then refused by it (RBAC alone would allow it).
    unbound = client_for(testbed, token_for(admin, "gitops-gpu-agent"))

    def policy_active() -> None:
        try:
            unbound.apply(report_obj("probe"), field_manager="probe", dry_run=True)
        except KubeError as exc:
            assert "gitops-gpu-agent-own-node" in str(exc), exc
            return
        raise AssertionError("the admission policy is not enforced yet")

    eventually(policy_active, 30)
    return testbed


def token_for(admin: kube.Client, sa: str, pod: Obj | None = None) -> str:
    """A real service-account token from the TokenRequest API, bound to ``pod`` if given."""
    spec: Obj = {"expirationSeconds": 3600}
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "uid": meta["uid"],
        }
    reply = admin.request(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts/{sa}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(reply["status"]["token"])


def client_for(tb: Testbed, token: str) -> kube.Client:
    return kube.Client.from_token(tb.state.server, token, str(tb.state.ca_file))


def lists_nodes(client: kube.Client) -> None:
    assert isinstance(client.list("v1", "Node")["items"], list)


def refused(call: Callable[[], object]) -> str:
    with pytest.raises(KubeError, match="forbidden") as info:
        call()
    return str(info.value)


def eventually(check: Callable[[], None], timeout: float = 15) -> None:
    """RBAC and admission policies reach the authorizer through informers: allow a moment."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except (AssertionError, KubeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


# -- the grant --------------------------------------------------------------------------------
def test_controller_rbac_is_small_and_has_no_wildcards() -> None:
    roles = controller_roles()
    cluster = [r for r in roles if r["kind"] == "ClusterRole"]
    assert len(cluster) == 1 and len(cluster[0]["rules"]) <= 10
    # 11th: evicting stale operand pods; 12-14: smoke-test Jobs, their pods and pod logs, in
    # one namespace only; 15-18: the ledger ConfigMap and the seal key Secret (create, then
    # get/update by name only, the ledger also watched by name); 19: listing the pods and PDBs
    # of nodes a driver upgrade waits on;
    # 20-21: the repo-built sharing/MIG ConfigMaps in the operator's namespace (create, then
    # get/patch by name only).
    assert sum(len(r["rules"]) for r in roles) <= 21
    named = {
        (res, tuple(rule.get("resourceNames", ())), tuple(rule["verbs"]))
        for r in roles
        if r["kind"] == "Role"
        for rule in r["rules"]
        for res in rule["resources"]
        if res in ("configmaps", "secrets")
    }
    assert named == {
        ("configmaps", ("gitops-gpu-control",), ("get", "list", "watch")),
        ("configmaps", (), ("create",)),
        ("configmaps", ("gitops-gpu-ledger",), ("get", "list", "watch", "update")),
        (
            "configmaps",
            ("gitops-gpu-device-plugin-config", "gitops-gpu-mig-parted-config"),
            ("get", "list", "watch", "patch"),
        ),
        ("secrets", (), ("create",)),
        ("secrets", ("gitops-gpu-record-key",), ("get",)),
    }, named
    smoke = {
        (v, res, r["metadata"]["namespace"])
        for r in roles
        if r["metadata"]["name"].endswith("-smoke")
        for rule in r["rules"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }
    assert smoke == {
        ("list", "jobs", NS),
        ("create", "jobs", NS),
        ("delete", "jobs", NS),
        ("list", "pods", NS),
        ("get", "pods/log", NS),
    }
    for d in rendered():
        for rule in d.get("rules", []) if d["kind"] in ("ClusterRole", "Role") else []:
            for key in ("verbs", "resources", "apiGroups", "resourceNames"):
                assert "*" not in rule.get(key, []), (d["metadata"]["name"], rule)
            assert "nonResourceURLs" not in rule


def report_obj(node: str) -> Obj:
    api, kind = names.NODE_GPU_REPORT_API
    return {"apiVersion": api, "kind": kind, "metadata": {"name": node}, "spec": {"nodeName": node}}
