"""Rung 8, the MIG manager: the pool's MIG profile is labelled, applied, and visible in NVML.

Signals: ``nvidia.com/mig.config`` equals the pool's profile; ``nvidia.com/mig.config.state``
(success / pending / rebooting / failed) from mig-manager; NVML's MIG mode per GPU, current and
pending. The profile ``all-disabled`` means MIG off, any other means MIG on for every GPU (true
of the mig-parted default profiles; a custom profile that mixes modes per GPU would need the
profile catalogue, which the ladder does not read). mig-manager runs only on MIG-capable nodes,
so on others ``all-disabled`` holds trivially and anything else can never hold. A node still
``pending`` or ``rebooting`` :data:`MIG_STUCK_SECONDS` after its stage adopted the commit (or
after it joined) is Degraded: mig-manager wedges there (NVIDIA/gpu-operator#2833,
NVIDIA/mig-parted#485) and waiting longer only holds the stage until its timeout.
"""

from __future__ import annotations

from gitops_gpu import names
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "mig-manager"
DEPLOY = "mig-manager"
MIG_DISABLED_PROFILE = "all-disabled"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
NOT_SUPPORTED = "not supported"
# A reconfiguration (drain GPU clients, reset or reboot, re-create instances) takes minutes.
MIG_STUCK_SECONDS = 1800.0


def desired_mig_mode(profile: str) -> str:
    return "disabled" if profile == MIG_DISABLED_PROFILE else "enabled"


def pool_mig_mode(pool: PoolTarget, profile: str) -> str | None:
    """The MIG mode the pool's layout sets: from its fleet-repo layout when it has one (None
    when that mixes modes per device: not checked per GPU), else from the profile name."""
    if pool.mig_layout_file is not None and pool.mig_config == profile:
        if pool.mig_enabled is None:
            return None
        return "enabled" if pool.mig_enabled else "disabled"
    return desired_mig_mode(profile)


def _mig_capable(ev: NodeEvidence) -> bool:
    if ev.labels.get(MIG_CAPABLE_LABEL) == "false":
        return False
    modes = [g.mig_current for g in ev.gpus if g.ok]
    return not modes or any(m != NOT_SUPPORTED for m in modes)


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    profile = pool.mig_config
    if not profile:
        return result(
            COMPONENT, Health.HEALTHY, "skipped: the pool sets no MIG profile", skipped=True
        )
    want = pool_mig_mode(pool, profile)
    if not _mig_capable(ev):
        if want == "disabled":
            return result(
                COMPONENT, Health.HEALTHY, "skipped: GPUs are not MIG-capable", skipped=True
            )
        return result(
            COMPONENT, Health.DEGRADED, f"profile {profile} needs MIG, the GPUs are not MIG-capable"
        )
    verdict = signals.operand_verdict(COMPONENT, ev, pool, DEPLOY, signals.APP_MIG_MANAGER)
    if verdict is not None:
        return verdict
    label = ev.labels.get(names.MIG_CONFIG_LABEL)
    if label != profile:
        return result(
            COMPONENT,
            Health.PROGRESSING,
            f"{names.MIG_CONFIG_LABEL}={label or '<unset>'}, desired {profile}",
        )
    state = ev.labels.get(names.MIG_CONFIG_STATE_LABEL, "")
    if state == "failed":
        return result(COMPONENT, Health.DEGRADED, f"mig.config.state=failed applying {profile}")
    if state != "success":
        waited = ev.waited(opts.since)
        if state in ("pending", "rebooting") and waited is not None and waited >= MIG_STUCK_SECONDS:
            return result(
                COMPONENT,
                Health.DEGRADED,
                f"mig.config.state={state} applying {profile} for {int(waited // 60)}m "
                f"(bound {int(MIG_STUCK_SECONDS // 60)}m): mig-manager is stuck, see its "
                "log on the node",
            )
        return result(
            COMPONENT,
            Health.PROGRESSING,
            f"mig.config.state={state or '<unset>'} applying {profile}",
        )
    if ev.status is None or not ev.nvml_ready():
        return result(COMPONENT, Health.UNKNOWN, "no NVML facts to confirm the MIG mode")
    for gpu in ev.gpus:
        if not gpu.ok:
            continue
        mig = gpu.mig_mode or {}
        current, pending = mig.get("current"), mig.get("pending")
        if current == NOT_SUPPORTED:
            if want == "enabled":
                return result(COMPONENT, Health.DEGRADED, f"GPU {gpu.index} does not support MIG")
            continue
        if pending != current:
            return result(
                COMPONENT,
                Health.PROGRESSING,
                f"GPU {gpu.index} MIG {current}, pending {pending} (needs a GPU reset)",
            )
        if want is not None and current != want:
            return result(
                COMPONENT,
                Health.PROGRESSING,
                f"mig.config.state=success but NVML shows MIG {current} on GPU "
                f"{gpu.index}, {profile} needs {want}",
            )
    return result(COMPONENT, Health.HEALTHY, f"{profile} applied, MIG {want or 'per device'}")
