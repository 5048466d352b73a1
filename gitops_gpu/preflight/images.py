"""GG043/GG044: every operand image resolvable under the GPU Operator's own rules.

The operator v26.7.0 takes a component's image from the ClusterPolicy (``repository/image:
version``; ``image`` alone when neither of the others is set), else from an environment variable
of its own Deployment (api/nvidia/v1/clusterpolicy_types.go ``ImagePath``); with neither it
refuses the ClusterPolicy ("empty image path provided through both ClusterPolicy CR and ENV
VALIDATOR_IMAGE"). Two of one's three parts is always an error. An NVIDIADriver's driver image
has no environment fallback (nvidiadriver_types.go ``GetImagePath``); its ``manager`` does
(DRIVER_MANAGER_IMAGE). The Helm chart sets only DRIVER_MANAGER_IMAGE and VALIDATOR_IMAGE
(templates/operator.yaml) and writes every other image into the ClusterPolicy it renders.

With a cluster the running operator's Deployment env is read: a component that needs a variable
it lacks is an error. Without one, such a component is a warning naming the variable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.fleet.lowering import OPERANDS
from gitops_gpu.preflight.findings import Finding

OPERATOR_NAMESPACE = "gpu-operator"
OPERATOR_CONTAINER = "gpu-operator"
# ClusterPolicy component -> the operator's environment variable for its image.
ENV: dict[str, str] = {
    "toolkit": "CONTAINER_TOOLKIT_IMAGE",
    "devicePlugin": "DEVICE_PLUGIN_IMAGE",
    "dcgm": "DCGM_IMAGE",
    "dcgmExporter": "DCGM_EXPORTER_IMAGE",
    "gfd": "GFD_IMAGE",
    "migManager": "MIG_MANAGER_IMAGE",
    "nodeStatusExporter": "VALIDATOR_IMAGE",
    "validator": "VALIDATOR_IMAGE",
    "sandboxDevicePlugin": "SANDBOX_DEVICE_PLUGIN_IMAGE",
    "vgpuManager": "VGPU_MANAGER_IMAGE",
}
DRIVER_IMAGE_DEFAULT = "nvcr.io/nvidia/driver"  # the NVIDIADriver CRD's default for spec.image
HELM_ENV = frozenset({"DRIVER_MANAGER_IMAGE", "VALIDATOR_IMAGE"})
ALWAYS = frozenset({"validator"})  # every operand's validation init containers run it
SANDBOX = frozenset({"sandboxDevicePlugin", "vgpuManager"})  # only with sandboxWorkloads on


def _parts(spec: Mapping[str, Any]) -> tuple[str, str, str]:
    return tuple(str(spec.get(k) or "") for k in ("repository", "image", "version"))  # type: ignore[return-value]


def resolves(spec: Mapping[str, Any]) -> str:
    """ "cr" (the spec names the image), "env" (left to the operator's env) or "partial"."""
    repository, image, version = _parts(spec)
    if not repository and not version:
        return "cr" if image else "env"
    return "cr" if repository and image and version else "partial"


def _enabled(spec: Mapping[str, Any], key: str) -> bool:
    if key in ALWAYS:
        return True
    if key in SANDBOX:
        sandbox = spec.get("sandboxWorkloads")
        if not (isinstance(sandbox, Mapping) and sandbox.get("enabled")):
            return False
    component = spec.get(key)
    default = OPERANDS.get(key, ("", False))[1]
    if not isinstance(component, Mapping):
        return default
    enabled = component.get("enabled")
    return default if enabled is None else bool(enabled)


def read_operator_env(client: Any, namespace: str = OPERATOR_NAMESPACE) -> frozenset[str] | None:
    """The variables (with a value) of the operator container of its Deployment, or None when
    no operator Deployment is found."""
    items = client.list("apps/v1", "Deployment", namespace=namespace).get("items") or []
    for dep in items:
        containers = ((dep.get("spec") or {}).get("template") or {}).get("spec", {}).get(
            "containers"
        ) or []
        for ctr in containers:
            if ctr.get("name") == OPERATOR_CONTAINER:
                return frozenset(str(e.get("name")) for e in ctr.get("env") or [] if e.get("value"))
    return None


def _finding(
    repo: FleetRepo,
    pool: str,
    path: tuple[str, ...],
    cluster: str,
    what: str,
    var: str | None,
    env: frozenset[str] | None,
) -> Finding | None:
    file, line = fleet_compile.locate(repo, pool, path)
    field = ".".join(path)
    where = f"cluster '{cluster}': {what} names no image"
    fix = f"set {field}.repository, .image and .version"
    if var is None:
        return Finding.make(
            "GG043",
            f"{where} and the operator has no fallback for it",
            file=file,
            line=line,
            cluster=cluster,
            field=field,
            fix=fix,
        )
    if env is not None and var in env:
        return None
    if env is not None:
        return Finding.make(
            "GG043",
            f"{where} and the running operator's Deployment does not set {var}: the operator "
            "refuses the ClusterPolicy",
            file=file,
            line=line,
            cluster=cluster,
            field=field,
            fix=f"{fix}, or set {var} on the gpu-operator Deployment",
        )
    helm = " (the Helm chart sets it; another install may not)" if var in HELM_ENV else ""
    return Finding.make(
        "GG044",
        f"{where}: it is left to the operator's {var} environment variable{helm}",
        file=file,
        line=line,
        cluster=cluster,
        field=field,
        fix=f"{fix}, or check with --kubeconfig that the operator sets {var}",
    )


def _partial(repo: FleetRepo, pool: str, path: tuple[str, ...], cluster: str) -> Finding:
    file, line = fleet_compile.locate(repo, pool, path)
    field = ".".join(path)
    return Finding.make(
        "GG043",
        f"cluster '{cluster}': {field} sets only some of repository, image and version: the "
        "operator refuses it (invalid image specification)",
        file=file,
        line=line,
        cluster=cluster,
        field=field,
        fix=f"set all three of {field}.repository, .image and .version, or only .image",
    )


def operand_images(
    repo: FleetRepo,
    compiled: CompiledFleet,
    env: Mapping[str, frozenset[str] | None] | None = None,
) -> Iterator[Finding]:
    """``env``: per cluster, the operator's environment variables (None: not read)."""
    for cname, cluster in sorted(compiled.clusters.items()):
        spec = cluster.cluster_policy.get("spec") or {}
        known = (env or {}).get(cname)
        first = sorted(cluster.pools)[0]
        for key, var in ENV.items():
            if not _enabled(spec, key):
                continue
            component = spec.get(key)
            state = resolves(component if isinstance(component, Mapping) else {})
            path = ("spec", key)
            if state == "partial":
                yield _partial(repo, first, path, cname)
            elif state == "env":
                found = _finding(repo, first, path, cname, key, var, known)
                if found is not None:
                    yield found
        for pool in sorted(cluster.pools):
            dspec = cluster.pools[pool].driver.get("spec") or {}
            manager = dspec.get("manager")
            driver = {"image": DRIVER_IMAGE_DEFAULT, **{k: v for k, v in dspec.items() if v}}
            parts: tuple[tuple[tuple[str, ...], str, Mapping[str, Any], str | None], ...] = (
                (("spec", "driver"), "the driver", driver, None),
                (
                    ("spec", "driver", "manager"),
                    "the driver manager",
                    manager if isinstance(manager, Mapping) else {},
                    "DRIVER_MANAGER_IMAGE",
                ),
            )
            for where, what, sub, needs in parts:
                state = resolves(sub)
                if state == "partial":
                    yield _partial(repo, pool, where, cname)
                elif state == "env":
                    text = f"pool '{pool}': {what}"
                    found = _finding(repo, pool, where, cname, text, needs, known)
                    if found is not None:
                        yield found
