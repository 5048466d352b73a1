"""What the GPU Operator v26.7.0 does to nodes when an object it reads changes: its own rules,
as tables. Pure: field paths in, consequences out.

Sources (../shared/thirdparty/gpu-operator-v26.7.0.tar.gz):
- Operand DaemonSets: each ``Transform<Operand>`` in controllers/object_controls.go writes the
  ClusterPolicy fields it reads into that DaemonSet's pod template. Every operand but the node
  status exporter carries the validator's init containers (``transformValidationInitContainer``),
  so a validator change reaches all of them; ``applyCommonDaemonsetConfig`` and
  ``applyCommonDaemonsetMetadata`` copy ``spec.daemonsets`` into every one. The device plugin's
  config manager runs the plugin's image in the plugin, GFD and MPS pods
  (``transformConfigManagerSidecarContainer``). With ``updateStrategy: OnDelete`` (compile sets
  it) a changed template restarts nothing by itself: gitops-gpu deletes the stale pods stage by
  stage (sync/operands.py).
- Driver: an NVIDIADriver's DaemonSet is always OnDelete; the upgrade controller replaces its
  pods. When the install-relevant config is unchanged (the ``DRIVER_CONFIG_DIGEST`` env of
  internal/state/driver.go ``buildDriverInstallConfig``) the node is only cordoned and the pod
  restarted in place (internal/predicates/restart_only.go, k8s-operator-libs
  upgrade_inplace.go ``nextStateForUpgradeRequiredNode``); otherwise the full flow: cordon,
  wait for jobs, GPU-pod deletion, drain if enabled, restart, validation, uncordon.
  ``upgradePolicy`` itself is read by the upgrade controller, not rendered into the pod.
- Node labels: the MIG manager repartitions a node when ``nvidia.com/mig.config`` changes and
  stops the node's GPU clients meanwhile (assets/state-mig-manager, ``default-gpu-clients``);
  the device plugin's config manager switches config when ``nvidia.com/device-plugin.config``
  changes, restarting the plugin inside its pod; ``nvidia.com/gpu.deploy.<operand>`` adds or
  removes that operand's pod on the node (controllers/state_manager.go).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet.yamlio import PathKey

TOOLKIT, PLUGIN, GFD = "container-toolkit", "device-plugin", "gpu-feature-discovery"
DCGM, EXPORTER, MIG = "dcgm", "dcgm-exporter", "mig-manager"
VALIDATOR, MPS, STATUS = "operator-validator", "mps-control-daemon", "node-status-exporter"
VALIDATED = (TOOLKIT, PLUGIN, GFD, DCGM, EXPORTER, MIG, MPS, VALIDATOR)
EVERY = (*VALIDATED, STATUS)
_PLUGIN_IMAGE = (PLUGIN, GFD, MPS)  # the config manager runs the plugin's image in these

# ClusterPolicy spec path -> the operand DaemonSets whose pod template it is written into. The
# longest matching prefix wins; () means no template reads it.
TEMPLATE_RULES: dict[PathKey, tuple[str, ...]] = {
    ("daemonsets",): EVERY,
    ("daemonsets", "updateStrategy"): (),  # how pods are replaced, not what they run
    ("daemonsets", "rollingUpdate"): (),
    ("toolkit",): (TOOLKIT,),
    ("toolkit", "installDir"): (TOOLKIT, PLUGIN, MIG),
    ("devicePlugin",): (PLUGIN, MPS),
    ("devicePlugin", "repository"): _PLUGIN_IMAGE,
    ("devicePlugin", "image"): _PLUGIN_IMAGE,
    ("devicePlugin", "version"): _PLUGIN_IMAGE,
    ("devicePlugin", "imagePullPolicy"): _PLUGIN_IMAGE,
    ("devicePlugin", "config"): _PLUGIN_IMAGE,
    ("gfd",): (GFD,),
    ("dcgm",): (DCGM,),
    ("dcgmExporter",): (EXPORTER,),
    ("migManager",): (MIG,),
    ("nodeStatusExporter",): (STATUS,),
    ("validator",): VALIDATED,
    ("cdi",): VALIDATED,
    ("mig", "strategy"): (PLUGIN, GFD, MPS, VALIDATOR),
    ("operator", "runtimeClass"): VALIDATED,
    ("operator", "defaultRuntime"): (),  # v26.7.0 detects the runtime from the nodes
    ("operator", "upgradeCRD"): (),
    ("operator", "initContainer"): (),  # the ClusterPolicy's own driver only
    ("hostPaths",): EVERY,
    # With NVIDIADriver CRs the ClusterPolicy's driver section renders no pod; its switches
    # are flagged below.
    ("driver",): (),
    ("psa",): (),
    ("psp",): (),
}
# Fields whose change is not staged: the operator acts on every node of the cluster at once.
CLUSTER_WIDE: dict[PathKey, str] = {
    ("daemonsets", "updateStrategy"): (
        "every operand pod of the cluster is replaced at once unless it stays OnDelete"
    ),
    ("mig", "strategy"): (
        "the GPU resource names every node advertises change (nvidia.com/gpu vs "
        "nvidia.com/mig-*): pods asking for the old names stop being scheduled"
    ),
    ("driver", "enabled"): "switches the driver state on or off for the whole cluster",
    ("driver", "useNvidiaDriverCRD"): "switches every pool between NVIDIADriver and ClusterPolicy",
    ("sandboxWorkloads", "enabled"): "changes which operands every node runs",
}
# Operands the operator creates or deletes as a whole DaemonSet (their ``enabled``).
ENABLED_OPERANDS: dict[str, str] = {
    "toolkit": TOOLKIT,
    "devicePlugin": PLUGIN,
    "gfd": GFD,
    "dcgm": DCGM,
    "dcgmExporter": EXPORTER,
    "migManager": MIG,
    "nodeStatusExporter": STATUS,
    "validator": VALIDATOR,
}
# Operands off unless ``enabled: true`` (api/nvidia/v1 clusterpolicy_types.go IsEnabled); the
# others default to on. The validator has no switch.
DEFAULT_OFF = frozenset({STATUS})
# Where an operand runs on some nodes only: MIG manager where the GPU is MIG-capable
# (controllers/state_manager.go hasMIGCapableGPU), the MPS daemon where the device plugin's
# config shares by MPS (its DaemonSet selects nvidia.com/mps.capable=true).
MPS_NOTE = "mps-control-daemon where the device-plugin config shares by MPS"


def cluster_disabled(spec: Mapping[str, Any]) -> frozenset[str]:
    """Operands the ClusterPolicy ``spec`` does not run at all (``<key>.enabled``)."""
    off = set()
    for key, name in ENABLED_OPERANDS.items():
        enabled = (spec.get(key) or {}).get("enabled")
        if enabled is False or (enabled is None and name in DEFAULT_OFF):
            off.add(name)
    if PLUGIN in off:
        off.add(MPS)
    return frozenset(off)


# NVIDIADriver spec keys in DRIVER_CONFIG_DIGEST (buildDriverInstallConfig), plus the image
# path's parts and usePrecompiled (which changes the image path): a change takes the full flow.
INSTALL_KEYS = frozenset(
    {
        "repository",
        "image",
        "version",
        "usePrecompiled",
        "manager",
        "driverType",
        "kernelModuleType",
        "args",
        "env",
        "secretEnv",
        "licensingConfig",
        "virtualTopologyConfig",
        "kernelModuleConfig",
        "repoConfig",
        "certConfig",
        "rdma",
        "gds",
        "gdrcopy",
    }
)
NOT_RENDERED = frozenset({"upgradePolicy", "default"})  # read by controllers, not the pod


@dataclass(frozen=True)
class OperandImpact:
    restarts: tuple[str, ...]  # operand DaemonSets whose pods are replaced, stage by stage
    unknown: tuple[str, ...]  # changed paths not in the tables (assumed to restart everything)
    cluster_wide: tuple[str, ...]  # "path: what happens" for unstaged changes


def _rule(path: PathKey) -> tuple[str, ...] | None:
    for cut in range(len(path), 0, -1):
        hit = TEMPLATE_RULES.get(tuple(path[:cut]))
        if hit is not None:
            return hit
    return None


def operand_impact(paths: Iterable[PathKey]) -> OperandImpact:
    """What changed ClusterPolicy ``spec`` paths (without the leading "spec") do to operands."""
    restarts: set[str] = set()
    unknown: list[str] = []
    wide: list[str] = []
    for path in paths:
        dotted = ".".join(str(p) for p in path)
        if len(path) == 2 and path[1] == "enabled" and path[0] in ENABLED_OPERANDS:
            wide.append(
                f"{dotted}: the {ENABLED_OPERANDS[str(path[0])]} DaemonSet is created or "
                "deleted on every node of the cluster at once"
            )
            continue
        for prefix, what in CLUSTER_WIDE.items():
            if tuple(path[: len(prefix)]) == prefix:
                wide.append(f"{dotted}: {what}")
        hit = _rule(path)
        if hit is None:
            unknown.append(dotted)
            restarts.update(EVERY)
        else:
            restarts.update(hit)
    ordered = tuple(o for o in EVERY if o in restarts)
    return OperandImpact(ordered, tuple(unknown), tuple(wide))


def driver_kind(paths: Iterable[PathKey]) -> str:
    """ "upgrade" (full flow), "restart" (in place), "policy" (nothing rendered) or "" for
    changed NVIDIADriver ``spec`` paths."""
    keys = {str(p[0]) for p in paths if p}
    if keys & INSTALL_KEYS:
        return "upgrade"
    if keys - NOT_RENDERED:
        return "restart"
    return "policy" if keys else ""


@dataclass(frozen=True)
class UpgradePolicy:
    """An NVIDIADriver's upgradePolicy with the operator's defaults
    (api/nvidia/v1alpha1/nvidiadriver_types.go ``GetUpgradePolicyWithDefaults``)."""

    auto: bool = True
    max_parallel: int = 1  # 0: no limit
    max_unavailable: int | str = "25%"
    wait_selector: str = ""
    wait_timeout: int = 0
    delete_force: bool = False
    delete_timeout: int = 300
    drain: bool = False
    drain_force: bool = False
    drain_timeout: int = 300

    @staticmethod
    def of(driver: Mapping[str, Any]) -> UpgradePolicy:
        spec = driver.get("spec") or {}
        raw = spec.get("upgradePolicy")
        if not isinstance(raw, Mapping):
            return UpgradePolicy()
        # Given at all, unset bools are false and unset counts 0 (Go's zero values).
        wait = raw.get("waitForCompletion") or {}
        delete = raw.get("podDeletion") or {}
        drain = raw.get("drain") or {}
        return UpgradePolicy(
            auto=bool(raw.get("autoUpgrade", False)),
            max_parallel=int(raw.get("maxParallelUpgrades") or 0),
            max_unavailable=raw.get("maxUnavailable", "25%"),
            wait_selector=str(wait.get("podSelector") or ""),
            wait_timeout=int(wait.get("timeoutSeconds") or 0),
            delete_force=bool(delete.get("force", False)),
            delete_timeout=int(delete.get("timeoutSeconds", 300) if delete else 300),
            drain=bool(drain.get("enable", False)),
            drain_force=bool(drain.get("force", False)),
            drain_timeout=int(drain.get("timeoutSeconds", 300) if drain else 300),
        )


@dataclass(frozen=True)
class LabelEffect:
    kind: str  # mig-reconfig | device-plugin-config | workload-switch | operand-added | ...
    text: str
    stops_gpu_pods: bool


def label_effects(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[LabelEffect, ...]:
    """What the operator's operands do when a pool's node labels go from ``old`` to ``new``."""
    out: list[LabelEffect] = []
    for key in sorted(set(old) | set(new)):
        was, now = old.get(key), new.get(key)
        if was == now:
            continue
        if key == names.MIG_CONFIG_LABEL:
            if now is None:
                out.append(LabelEffect("none", "mig.config label removed: the layout stays", False))
            else:
                out.append(
                    LabelEffect(
                        "mig-reconfig",
                        f"MIG reconfiguration {was or '(none)'} -> {now}: the MIG manager stops "
                        "the node's GPU clients (device plugin, GFD, DCGM, DCGM exporter) and "
                        "repartitions; GPUs must be idle, so GPU pods on it stop",
                        True,
                    )
                )
        elif key == names.DEVICE_PLUGIN_CONFIG_LABEL:
            out.append(
                LabelEffect(
                    "device-plugin-config",
                    f"device-plugin config {was or '(default)'} -> {now or '(default)'}: the "
                    "plugin restarts inside its pod and advertises the new resources; running "
                    "pods keep their GPUs",
                    False,
                )
            )
        elif key == names.WORKLOAD_CONFIG_LABEL:
            out.append(
                LabelEffect(
                    "workload-switch",
                    f"workload type {was or '(default)'} -> {now or '(default)'}: the operator "
                    "swaps the node's operands (container vs VM); GPU pods on it stop",
                    True,
                )
            )
        elif key.startswith(names.DEPLOY_LABEL_PREFIX):
            operand = key.removeprefix(names.DEPLOY_LABEL_PREFIX)
            gone = now == "false"
            out.append(
                LabelEffect(
                    "operand-removed" if gone else "operand-added",
                    f"{operand} {'removed from' if gone else 'deployed on'} the pool's nodes",
                    False,
                )
            )
    return tuple(out)


def disabled_operands(labels: Mapping[str, str]) -> frozenset[str]:
    """Operands a pool's nodes do not run (its ``nvidia.com/gpu.deploy.<operand>=false``)."""
    prefix = names.DEPLOY_LABEL_PREFIX
    return frozenset(
        k.removeprefix(prefix) for k, v in labels.items() if k.startswith(prefix) and v == "false"
    )
