"""Least privilege for the controller, proven on the real apiserver with a real token.

The chart's RBAC is installed (test_deploy_grants); the controller then runs a staged rollout and
a prune with a TokenRequest token of its ServiceAccount: every pass must be "ok", every granted
verb must have been used, and requests outside the grant are refused (403).
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.config import incluster_config
from ruamel.yaml import YAML
from test_deploy_grants import (
    NS,
    RBAC_API,
    Grant,
    client_for,
    eventually,
    granted,
    installed,
    lists_nodes,
    refused,
    rendered,
    report_obj,
    token_for,
)

from gitops_gpu import kube, names, waits
from gitops_gpu.controller import Controller
from gitops_gpu.fleet.compiled import SmokeTestSpec
from gitops_gpu.leader import LEASE_API, LeaseLock
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.sync import operands, smoke, verify_nodes
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.reports import SnapshotReports
from gitops_gpu_dev.testbed.session import Testbed
from gitops_gpu_dev.testbed.simulator import Simulator

pytestmark = pytest.mark.integration
__all__ = ["installed"]  # a fixture, used by name
STAGES = ("canary", "inference", "training")


_PATH = re.compile(
    r"^(?P<verb>\w+) /apis?(?:/[^/]+)?/v[^/]+(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?"
)
_VERBS = {"PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete", "WATCH": "watch"}


def used(requests: dict[str, int]) -> set[Grant]:
    """What RBAC saw, from the client's request counter ("VERB /path")."""
    out = set()
    for key in requests:
        m = _PATH.match(key)
        assert m, key
        verb = _VERBS.get(m["verb"]) or ("get" if m["name"] else "list")
        res = f"{m['res']}/{m['sub']}" if m["sub"] else m["res"]
        out.add((verb, res, m["ns"]))
    return out


def covered(request: Grant, grants: set[Grant]) -> bool:
    verb, res, _ = request
    return request in grants or (verb, res, None) in grants


SMOKE_IMAGE = "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04"
SMOKE_SPEC = SmokeTestSpec(SMOKE_IMAGE, ("nvidia-smi",))


def fast_gates(work: Path) -> None:
    yaml = YAML()
    doc = yaml.load((work / "fleet.yaml").read_text())
    for stage in doc["spec"]["stages"]:
        stage.setdefault("gate", {}).update({"soak": "1s", "timeout": "60s"})
        stage["gate"].pop("approval", None)
        if stage["name"] == "canary":  # one smoke Job per canary node (KWOK completes it)
            stage["gate"]["smokeTest"] = {"image": SMOKE_IMAGE, "command": ["nvidia-smi"]}
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
    cfg = Config(
        repo=fleet_remote.url,
        cache_dir=tmp_path / "ctl",
        interval=0.3,
        namespace=NS,
    )
    # No --crds: preflight reads the GPU Operator CRDs from the cluster with this identity.
    ctl = Controller(cfg, sa)
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
        canary = admin.get(*names.NVIDIA_DRIVER_API, "canary")
        assert canary is not None
        assert canary["metadata"]["annotations"][names.COMMIT_ANNOTATION] == drop
        # An operand pod on an old revision is evicted (the simulator runs no operand
        # DaemonSets, so one is made here and evicted with the controller's identity).
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "stale-operand", "namespace": "gpu-operator"},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
        }
        admin.create(pod)
        assert operands.evict(sa, pod) is None
        # The smoke test ran as Jobs of this identity and they are gone; a failed one's pod
        # and log are read in the smoke namespace (KWOK serves no logs: any answer but 403).
        assert any(r.startswith("POST /apis/batch/v1/namespaces/") for r in sa.requests)
        assert admin.list("batch/v1", "Job", namespace=NS)["items"] == []
        job = smoke.job_manifest(SMOKE_SPEC, "canary", drop, created[0], NS)
        smoke_pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "smoke-failed", "namespace": NS},
            "spec": job["spec"]["template"]["spec"],
        }
        admin.create(smoke_pod)
        assert sa.list("v1", "Pod", namespace=NS)["items"]
        try:
            sa.pod_log("smoke-failed", NS)
        except kube.KubeError as exc:
            assert "forbidden" not in str(exc).lower(), exc
        # A node the driver upgrade drains: its pods and their namespaces' PDBs are listed, and
        # since when it waits is stamped on it, with this identity.
        held = admin.get("v1", "Node", created[0])
        held["metadata"].setdefault("labels", {})[names.UPGRADE_STATE_LABEL] = "drain-required"
        admin.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "held-workload", "namespace": NS},
                "spec": {**job["spec"]["template"]["spec"], "nodeName": created[0]},
            }
        )
        compiled = ctl.compiled_for(drop)
        assert compiled is not None
        pool = held["metadata"]["labels"][names.POOL_LABEL]
        found = waits.read(sa, {pool: [held]}, {pool: compiled.pool(pool)}, time.time())
        assert f"{NS}/held-workload" in [h.pod for w in found.waits for h in w.holders]
        waits.write(sa, found)
        stamped = admin.get("v1", "Node", created[0])["metadata"]["annotations"]
        assert stamped[waits.SINCE_ANNOTATION].startswith("drain-required@")
        # verifyNewNodes: the unverified taint set, then lifted as the node is verified.
        assert verify_nodes.apply(sa, [verify_nodes.Change(created[0], taint=True)]) == 1
        lifted = verify_nodes.Change(created[0], taint=False, verified=drop)
        assert verify_nodes.apply(sa, [lifted]) == 1
    finally:
        ctl.stop_informers()
        lease.release()
        # the pods made here, on the pool's first node: left behind, they hold the next test's
        # node of that name (its drain waits on them)
        for made in ("held-workload", "smoke-failed"):
            admin.delete("v1", "Pod", made, NS)
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
    # Every grant was needed. `create` of ClusterPolicy/NVIDIADriver and of the repo-built
    # ConfigMaps is exercised by the server-side applies that created them (the apiserver
    # checks `create` when an apply creates the object, dry runs included); the request
    # counter sees those as PATCH.
    grants, seen = granted(), used(dict(sa.requests))
    assert all(covered(r, grants) for r in seen), [r for r in seen if not covered(r, grants)]
    implied = {
        ("create", "clusterpolicies", None),
        ("create", "nvidiadrivers", None),
        ("create", "configmaps", "gpu-operator"),
    }
    unused = {g for g in grants - implied if not any(covered(r, {g}) for r in seen)}
    assert not unused, f"granted but never used: {unused}"
    cp = admin.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
    assert cp is not None
    assert names.FIELD_MANAGER in {m["manager"] for m in cp["metadata"]["managedFields"]}


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
    eventually(lambda: lists_nodes(sa))
    refused(lambda: sa.list("v1", "Secret", namespace=NS))
    refused(lambda: sa.get("v1", "Secret", "gitops-gpu", NS))
    refused(lambda: sa.delete("v1", "Node", "any-node"))
    refused(lambda: sa.patch(RBAC_API, "ClusterRole", "gitops-gpu-controller", {"rules": []}))
    refused(lambda: sa.delete(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME))
    refused(lambda: sa.get("v1", "ConfigMap", "kube-root-ca.crt", NS))
    # Pods anywhere may be listed (who holds a draining node), never read one by one or deleted.
    refused(lambda: sa.get("v1", "Pod", "any-pod", "default"))
    refused(lambda: sa.delete("v1", "Pod", "any-pod", "default"))
    refused(lambda: sa.create(report_obj("any-node")))
    other_lease = {
        "apiVersion": LEASE_API[0],
        "kind": LEASE_API[1],
        "metadata": {"name": "someone-else", "namespace": NS, "resourceVersion": "1"},
    }
    refused(lambda: sa.replace(other_lease))
    # Allowed by name: the pause flag (absent here, so None rather than 403), and its watch:
    # listed by the field selector its name limits the grant to, no other ConfigMap.
    assert sa.get("v1", "ConfigMap", "gitops-gpu-control", NS) is None
    control = "metadata.name=gitops-gpu-control"
    assert sa.list("v1", "ConfigMap", namespace=NS, field_selector=control)["items"] == []
    refused(lambda: sa.list("v1", "ConfigMap", namespace=NS))
    refused(lambda: sa.list("v1", "ConfigMap", namespace=NS, field_selector="metadata.name=x"))
    # ...and the ledger's watch, the same way (the ConfigMap may exist from an earlier test).
    ledger = "metadata.name=gitops-gpu-ledger"
    listed = sa.list("v1", "ConfigMap", namespace=NS, field_selector=ledger)["items"]
    assert {c["metadata"]["name"] for c in listed} <= {"gitops-gpu-ledger"}


def test_the_controller_pod_authenticates_in_cluster(
    installed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Deployment passes no --kubeconfig: in a pod the client loads the service account's
    token and CA from their mounted files, as client-go does. Same here, files redirected."""
    token = tmp_path / "token"
    token.write_text(token_for(installed.client, "gitops-gpu-controller"))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(installed.state.ca_file))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(installed.state.apiserver_port))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    deployment = next(d for d in rendered() if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--kubeconfig") for a in args)
    client = kube.Client.from_kubeconfig(None)
    eventually(lambda: lists_nodes(client))
    refused(lambda: client.list("v1", "Secret", namespace=NS))
