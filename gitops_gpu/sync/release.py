"""A GPU Operator release applied the way NVIDIA's upgrade guide says: CRDs first.

1. every CRD of the release, server-side applied (taking the fields Helm's install owned),
   and waited on until the apiserver reports it Established;
2. then the operator: its namespace, ServiceAccounts, RBAC, ConfigMaps, then its Deployments
   and DaemonSets (NFD);
3. then the verification: the operator Deployment rolled out (observed its generation, every
   replica updated and available).

A step that fails stops the ones after it: no operator runs against CRDs that are not
Established. Results are values (one :class:`Step` per object, created/configured/unchanged).
What a rollback can undo: the operator objects, by applying the previous release's; not the
CRDs: an older CRD would make the apiserver prune the fields the newer one added from every
stored object, so CRDs only move forward (docs/operator-upgrades.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gitops_gpu import kube, names
from gitops_gpu.errors import GitopsGpuError

CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
OPERATOR_DEPLOYMENT = names.OPERATOR_DEPLOYMENT
# RBAC and the things pods mount before the workloads that use them.
_ORDER: tuple[str, ...] = ("Namespace", "ServiceAccount", "ClusterRole", "Role")
_ORDER += ("ClusterRoleBinding", "RoleBinding", "ConfigMap", "Service", "Deployment", "DaemonSet")
Action = Literal["created", "configured", "unchanged"]


class Client(Protocol):
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any: ...

    def apply(self, obj: Mapping[str, Any], *, field_manager: str, force: bool = False) -> Any: ...


@dataclass(frozen=True)
class Step:
    kind: str
    name: str
    action: Action

    def text(self) -> str:
        return f"{self.kind}/{self.name} {self.action}"


@dataclass(frozen=True)
class ReleaseResult:
    steps: tuple[Step, ...]
    ok: bool
    message: str


class ReleaseError(GitopsGpuError):
    pass


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def ordered(objects: Sequence[Mapping[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The operator's objects in apply order, namespaced ones in ``namespace`` when the chart
    left it out; an object kind the client cannot address is refused before anything moves."""
    out = []
    for obj in objects:
        try:
            res = kube.resource(str(obj["apiVersion"]), str(obj["kind"]))
        except GitopsGpuError as exc:
            raise ReleaseError(
                f"the release holds {obj['kind']}/{_meta(obj).get('name')}, a kind gitops-gpu "
                "does not apply",
                fix="leave it out of the chart's values, or apply it yourself",
            ) from exc
        copy = dict(obj)
        if res.namespaced and not _meta(obj).get("namespace"):
            copy["metadata"] = {**_meta(obj), "namespace": namespace}
        out.append(copy)
    rank = {k: i for i, k in enumerate(_ORDER)}
    return sorted(out, key=lambda o: rank.get(str(o["kind"]), len(_ORDER)))


def _apply(client: Client, obj: Mapping[str, Any]) -> Step:
    meta = _meta(obj)
    before = client.get(
        str(obj["apiVersion"]), str(obj["kind"]), meta["name"], meta.get("namespace")
    )
    after = client.apply(obj, field_manager=names.FIELD_MANAGER, force=True)
    if before is None:
        action: Action = "created"
    elif _meta(before).get("resourceVersion") == _meta(after).get("resourceVersion"):
        action = "unchanged"
    else:
        action = "configured"
    return Step(str(obj["kind"]), str(meta["name"]), action)


def _established(crd: Any) -> bool:
    conds = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)


def _rolled_out(dep: Any) -> bool:
    if not dep:
        return False
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    want = int(spec.get("replicas", 1))
    return (
        int(status.get("observedGeneration", 0)) >= int(_meta(dep).get("generation", 0))
        and int(status.get("updatedReplicas", 0)) >= want
        and int(status.get("availableReplicas", 0)) >= want
    )


def apply_release(
    client: Client,
    crds: Sequence[Mapping[str, Any]],
    objects: Sequence[Mapping[str, Any]],
    namespace: str,
    *,
    timeout: float = 300.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ReleaseResult:
    """CRDs, then the operator, then its verification (module docstring)."""
    operator = ordered(objects, namespace)  # refuses an unknown kind before anything moves
    steps: list[Step] = []

    def wait(what: str, done: Callable[[], bool]) -> bool:
        deadline = clock() + timeout
        while not done():
            if clock() >= deadline:
                return False
            sleep(0.5)
        return True

    for crd in crds:
        steps.append(_apply(client, crd))
    pending = [str(_meta(c)["name"]) for c in crds]
    if not wait("CRDs", lambda: all(_established(client.get(*CRD_API, n)) for n in pending)):
        late = [n for n in pending if not _established(client.get(*CRD_API, n))]
        return ReleaseResult(
            tuple(steps), False, f"CRDs not Established after {timeout:g}s: {', '.join(late)}"
        )
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    if client.get("v1", "Namespace", namespace) is None:
        steps.append(_apply(client, namespace_obj))
    for obj in operator:
        steps.append(_apply(client, obj))
    if not any(
        o["kind"] == "Deployment" and _meta(o)["name"] == OPERATOR_DEPLOYMENT for o in operator
    ):
        return ReleaseResult(tuple(steps), True, "applied (the release has no operator Deployment)")

    def ready() -> bool:
        return _rolled_out(client.get("apps/v1", "Deployment", OPERATOR_DEPLOYMENT, namespace))

    if not wait("operator", ready):
        return ReleaseResult(
            tuple(steps),
            False,
            f"the operator Deployment {namespace}/{OPERATOR_DEPLOYMENT} did not roll out within "
            f"{timeout:g}s: held (the CRDs stay; see `kubectl -n {namespace} describe deployment "
            f"{OPERATOR_DEPLOYMENT}`)",
        )
    return ReleaseResult(tuple(steps), True, "CRDs Established, the operator rolled out")
