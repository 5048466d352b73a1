"""Least privilege, proven on the real apiserver with real service-account tokens.

The chart's RBAC (as committed in deploy/kustomize, which test_deploy_chart proves is the
chart's render) is installed; the controller then runs a staged rollout and a prune with a
TokenRequest token of its ServiceAccount, every pass must be "ok", every granted verb must have
been used, and requests outside the grant are refused. The agent's token is bound to a pod on a
KWOK node, and the ValidatingAdmissionPolicy lets it write only that node's NodeGPUReport.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu import events, kube, names
from gitops_gpu.agent import publish
from gitops_gpu.controller import Config, Controller
from gitops_gpu.errors import KubeError
from gitops_gpu.leader import LEASE_API, LeaseLock
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.testbed import nodes
from gitops_gpu.testbed.reports import SnapshotReports
from gitops_gpu.testbed.session import Testbed
from gitops_gpu.testbed.simulator import Simulator

pytestmark = pytest.mark.integration
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
STAGES = ("canary", "inference", "training")
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
            unbound.apply(_report("probe"), field_manager="probe", dry_run=True)
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


def _lists_nodes(client: kube.Client) -> None:
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
    assert sum(len(r["rules"]) for r in roles) <= 10
    for d in rendered():
        for rule in d.get("rules", []) if d["kind"] in ("ClusterRole", "Role") else []:
            for key in ("verbs", "resources", "apiGroups", "resourceNames"):
                assert "*" not in rule.get(key, []), (d["metadata"]["name"], rule)
            assert "nonResourceURLs" not in rule


_PATH = re.compile(
    r"^(?P<verb>\w+) /apis?(?:/[^/]+)?/v[^/]+(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?"
)
_VERBS = {"PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete", "WATCH": "watch"}


def used(requests: dict[str, int]) -> set[Grant]:
    """What RBAC saw, from the client's request counter ("VERB /path")."""
    out = set()
    for key in requests:
        m = _PATH.match(key)
        assert m, key
        verb = _VERBS.get(m["verb"]) or ("get" if m["name"] else "list")
        out.add((verb, m["res"], m["ns"]))
    return out


def covered(request: Grant, grants: set[Grant]) -> bool:
    verb, res, _ = request
    return request in grants or (verb, res, None) in grants


def fast_gates(work: Path) -> None:
    yaml = YAML()
    doc = yaml.load((work / "fleet.yaml").read_text())
    for stage in doc["spec"]["stages"]:
        stage.setdefault("gate", {}).update({"soak": "1s", "timeout": "60s"})
        stage["gate"].pop("approval", None)
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(doc, fh)


def drop_pool(pool: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        yaml = YAML()
        doc = yaml.load((work / "fleet.yaml").read_text())
        for stage in doc["spec"]["stages"]:
            if pool in stage["pools"]:
                stage["pools"].remove(pool)
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(doc, fh)
        shutil.rmtree(work / "nodepools" / pool)

    return edit


@pytest.fixture
def simulator(installed: Testbed, clean_cluster: Testbed) -> Iterator[Simulator]:
    sim = Simulator(installed.client, tick=0.1, report_fn=SnapshotReports(), report_heartbeat=5.0)
    yield sim
    sim.stop()


def test_staged_rollout_and_prune_as_the_controller_service_account(
    installed: Testbed,
    simulator: Simulator,
    fleet_remote: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    admin = installed.client
    head = fleet_remote.commit("fast gates", fast_gates)
    created = nodes.create_pool_nodes(admin, nodes.read_pool_shapes(fleet_remote.work), 1)
    nodes.wait_ready(admin, created)
    simulator.start()
    admin.delete(*LEASE_API, "gitops-gpu-controller", NS)  # a lease left by an earlier run
    sa = client_for(installed, token_for(admin, "gitops-gpu-controller"))
    cfg = Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl", interval=0.3, namespace=NS)
    ctl = Controller(cfg, sa)
    # controller.py records Events in --namespace, which the apiserver refuses for cluster-scoped
    # objects (422); "default" is where they belong. test_events_... below pins the bug.
    ctl.recorder = events.EventRecorder(sa, "default")
    lease = LeaseLock(sa, namespace=NS, identity="rbac-test")
    record = GitNotesBackend(str(fleet_remote.bare), remote=None)

    def state(sha: str, stage: str) -> str | None:
        st = record.latest(sha, stage_context(stage))
        return st.state if st else None

    def run_until(what: str, done: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert lease.try_acquire(), "the controller could not take or renew its Lease"
            report = ctl.run_pass()
            assert report.result == "ok", report.error
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    ctl.start_informers()
    try:
        run_until("the rollout", lambda: all(state(head, s) == "success" for s in STAGES))
        # Dropping a pool prunes its NVIDIADriver: the one `delete` the controller makes.
        drop = fleet_remote.commit("retire train-b200", drop_pool("train-b200"))
        run_until(
            "the prune", lambda: admin.get(*names.NVIDIA_DRIVER_API, "train-b200") is None, 60
        )
        assert state(drop, "canary") is not None
    finally:
        ctl.stop_informers()
        lease.release()
    lease_obj = admin.get(*LEASE_API, "gitops-gpu-controller", NS)
    assert lease_obj is not None and lease_obj["spec"]["holderIdentity"] == ""
    # Events are best effort (a refused one is only logged at DEBUG): check they exist.
    recorded = admin.list("v1", "Event", namespace="default")["items"]
    applied = {
        e["involvedObject"]["kind"]
        for e in recorded
        if e["reason"] == "Applied" and f"at commit {head[:12]}" in e["message"]
    }
    assert {"ClusterPolicy", "NVIDIADriver"} <= applied
    assert not [r for r in caplog.records if "forbidden" in r.getMessage().lower()]
    assert not [r for r in caplog.records if "not recorded" in r.getMessage()]
    # Every grant was needed. `create` of ClusterPolicy/NVIDIADriver is exercised by the
    # server-side applies that created them (the apiserver checks `create` when an apply
    # creates the object, dry runs included); the request counter sees those as PATCH.
    grants, seen = granted(), used(dict(sa.requests))
    assert all(covered(r, grants) for r in seen), [r for r in seen if not covered(r, grants)]
    implied = {("create", "clusterpolicies", None), ("create", "nvidiadrivers", None)}
    unused = {g for g in grants - implied if not any(covered(r, {g}) for r in seen)}
    assert not unused, f"granted but never used: {unused}"
    cp = admin.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
    assert cp is not None
    assert names.FIELD_MANAGER in {m["manager"] for m in cp["metadata"]["managedFields"]}


@pytest.mark.xfail(
    strict=True,
    reason="controller.py records Events about cluster-scoped objects in --namespace; the "
    "apiserver accepts those only in 'default' (422 'involvedObject.namespace ... does not match "
    "event.namespace'). Fix: EventRecorder(client, 'default'), then drop this marker.",
)
def test_events_about_cluster_scoped_objects_are_recorded(
    installed: Testbed, fleet_remote: Any, tmp_path: Path
) -> None:
    admin = installed.client
    sa = client_for(installed, token_for(admin, "gitops-gpu-controller"))
    cfg = Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl", namespace=NS)
    marker = f"deploy-rbac-{time.monotonic_ns()}"
    Controller(cfg, sa).recorder.record("nvidia.com/v1", "ClusterPolicy", "x", "Applied", marker)
    recorded = [
        e
        for ns in (NS, "default")
        for e in admin.list("v1", "Event", namespace=ns)["items"]
        if e["message"] == marker
    ]
    assert recorded, "the controller's Event was not recorded"


def test_the_controller_is_refused_everything_else(installed: Testbed) -> None:
    admin = installed.client
    sa = client_for(installed, token_for(admin, "gitops-gpu-controller"))
    eventually(lambda: _lists_nodes(sa))
    refused(lambda: sa.list("v1", "Secret", namespace=NS))
    refused(lambda: sa.get("v1", "Secret", "gitops-gpu", NS))
    refused(lambda: sa.delete("v1", "Node", "any-node"))
    refused(lambda: sa.patch(RBAC_API, "ClusterRole", "gitops-gpu-controller", {"rules": []}))
    refused(lambda: sa.delete(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME))
    refused(lambda: sa.get("v1", "ConfigMap", "kube-root-ca.crt", NS))
    refused(lambda: sa.list("v1", "Pod", namespace="default"))
    refused(lambda: sa.create(_report("any-node")))
    other_lease = {
        "apiVersion": LEASE_API[0],
        "kind": LEASE_API[1],
        "metadata": {"name": "someone-else", "namespace": NS, "resourceVersion": "1"},
    }
    refused(lambda: sa.replace(other_lease))
    # Allowed by name: the pause flag (absent here, so None rather than 403).
    assert sa.get("v1", "ConfigMap", "gitops-gpu-control", NS) is None


def test_the_charts_in_cluster_kubeconfig_authenticates(installed: Testbed, tmp_path: Path) -> None:
    """The Deployment runs `--kubeconfig` with the chart's kubeconfig (token and CA files of
    the pod's service account): load it as the controller does, pointed at the testbed."""
    cm = next(d for d in rendered() if d["kind"] == "ConfigMap")
    token = tmp_path / "token"
    token.write_text(token_for(installed.client, "gitops-gpu-controller"))
    text = (
        cm["data"]["kubeconfig"]
        .replace("https://kubernetes.default.svc", installed.state.server)
        .replace(
            "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", str(installed.state.ca_file)
        )
        .replace("/var/run/secrets/kubernetes.io/serviceaccount/token", str(token))
    )
    (tmp_path / "kubeconfig").write_text(text)
    client = kube.Client.from_kubeconfig(str(tmp_path / "kubeconfig"))
    eventually(lambda: _lists_nodes(client))
    refused(lambda: client.list("v1", "Secret", namespace=NS))


# -- the agent --------------------------------------------------------------------------------
def _report(node: str) -> Obj:
    api, kind = names.NODE_GPU_REPORT_API
    return {"apiVersion": api, "kind": kind, "metadata": {"name": node}, "spec": {"nodeName": node}}


@pytest.fixture
def agent_pod(installed: Testbed, clean_cluster: Testbed) -> Iterator[Obj]:
    """The DaemonSet's own pod template on KWOK node agent-a (kwok runs it)."""
    admin = installed.client
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    admin.apply(runtime_class, field_manager="gitops-gpu-test")
    for name in ("agent-a", "agent-b"):
        admin.create(nodes.node_manifest(name, {"test": "deploy-agent"}, "NVIDIA-H100-80GB-HBM3"))
    nodes.wait_ready(admin, ["agent-a", "agent-b"])
    ds = next(d for d in rendered() if d["kind"] == "DaemonSet")
    template = ds["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "agent-test",
            "namespace": NS,
            "labels": template["metadata"]["labels"],
        },
        "spec": {**template["spec"], "nodeName": "agent-a"},
    }
    _force_delete(admin, "agent-test")
    # Created in the chart's namespace: Pod Security "restricted" is enforced on it for real.
    created = admin.create(pod)
    yield created
    _force_delete(admin, "agent-test")


def _force_delete(admin: kube.Client, pod: str) -> None:
    # No kubelet confirms a graceful delete on a node that is gone: delete at once.
    path = kube.resource("v1", "Pod").path(pod, NS)
    try:
        admin.request("DELETE", path, body={"gracePeriodSeconds": 0})
    except kube.NotFoundError:
        return
    eventually(lambda: _absent(admin, pod), 30)


def _absent(admin: kube.Client, pod: str) -> None:
    assert admin.get("v1", "Pod", pod, NS) is None


def test_the_agent_writes_only_its_own_nodes_report(installed: Testbed, agent_pod: Obj) -> None:
    admin = installed.client
    eventually(lambda: _phase_is(admin, "Running"), 30)
    token = token_for(admin, "gitops-gpu-agent", agent_pod)
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["node"]["name"] == "agent-a"
    agent = client_for(installed, token)
    status = {"driverVersion": "580.126.20", "gpuCount": 0, "gpus": []}
    # The agent's own publishing code, with its own identity.
    eventually(lambda: _publishes(agent, "agent-a", status))
    report = admin.get(*names.NODE_GPU_REPORT_API, "agent-a")
    assert report is not None and report["status"]["driverVersion"] == "580.126.20"
    denied = refused(lambda: _publishes(agent, "agent-b", status))
    assert "gitops-gpu-agent-own-node" in denied and 'not "agent-b"' in denied
    assert admin.get(*names.NODE_GPU_REPORT_API, "agent-b") is None
    refused(lambda: agent.delete(*names.NODE_GPU_REPORT_API, "agent-a"))
    refused(lambda: agent.patch("v1", "Node", "agent-a", {"metadata": {"labels": {"x": "y"}}}))
    refused(lambda: agent.list("v1", "Secret", namespace=NS))
    refused(lambda: agent.list(*names.NODE_GPU_REPORT_API))
    # A token of the same account but bound to no pod carries no node: it may write nothing.
    unbound = client_for(installed, token_for(admin, "gitops-gpu-agent"))
    assert 'on node ""' in refused(lambda: _publishes(unbound, "agent-a", status))
    # And the controller may read reports but never write them.
    ctl = client_for(installed, token_for(admin, "gitops-gpu-controller"))
    refused(lambda: ctl.apply(_report("agent-b"), field_manager="x"))


def _phase_is(admin: kube.Client, phase: str) -> None:
    pod = admin.get("v1", "Pod", "agent-test", NS)
    assert pod is not None and (pod.get("status") or {}).get("phase") == phase


def _publishes(client: kube.Client, node: str, status: Obj) -> None:
    assert publish.KubePublisher(client, node, heartbeat_seconds=60).publish(status)
