"""Compile a loaded fleet repo into what the GPU Operator honours (see fleet/compiled.py).

Per cluster: ONE ClusterPolicy named ``cluster-policy`` with ``driver.useNvidiaDriverCRD: true``,
one NVIDIADriver per pool (named after the pool, ``nodeSelector`` = the pool's selector) and
per pool the node labels for MIG, device-plugin config, workload type and switched-off
components. Pure: a FleetRepo and a commit in, frozen values out; the same repo compiles to
equal values (and, through fleet/render.py, to byte-identical YAML).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gitops_gpu import names
from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import (
    lowering,
    mig_layouts,
    plain,
    policy,
    sharing,
    sharing_promise,
    windows,
)
from gitops_gpu.fleet.compiled import (
    ClusterTarget,
    CompiledFleet,
    GateSpec,
    MetricSpec,
    PoolTarget,
    SmokeTestSpec,
    StageSpec,
)
from gitops_gpu.fleet.loader import FleetRepo, PoolSource
from gitops_gpu.fleet.merge import origin
from gitops_gpu.fleet.models import SmokeTest, StageWindows
from gitops_gpu.fleet.yamlio import PathKey, dotted


@dataclass(frozen=True)
class Conflict:
    """Pools of one cluster that disagree on a cluster-scoped ClusterPolicy field."""

    cluster: str
    path: PathKey  # in the ClusterPolicy document, e.g. ("spec", "toolkit", "version")
    values: dict[str, Any]  # pool -> its value (policy.MISSING when the pool does not set it)


def compile_fleet(repo: FleetRepo, commit: str) -> CompiledFleet:
    """Compile ``repo`` at ``commit``; raise FleetError if pools disagree on a cluster field."""
    compiled, conflicts = compile_checked(repo, commit)
    if conflicts:
        c = conflicts[0]
        first, *rest = sorted(c.values)
        pool = next((p for p in rest if c.values[p] != c.values[first]), first)
        file, line = locate(repo, pool, c.path)
        raise FleetError(
            f"pools of cluster '{c.cluster}' disagree on cluster-scoped field "
            f"{dotted(c.path)}: " + ", ".join(f"{p}={v!r}" for p, v in sorted(c.values.items())),
            file=file,
            line=line,
            field=dotted(c.path),
            fix="make the value the same in every pool of the cluster (or move it to the base)",
        )
    return compiled


def compile_checked(repo: FleetRepo, commit: str) -> tuple[CompiledFleet, list[Conflict]]:
    """Compile and report disagreements instead of raising; with conflicts the ClusterPolicy
    takes the first pool's (by name) value, so the rest of preflight can still run."""
    freezes = tuple(
        windows.Freeze(f.start.timestamp(), f.to.timestamp(), f.reason)
        for f in repo.fleet.spec.freezes
    )
    stages = tuple(
        StageSpec(
            name=s.name,
            pools=tuple(s.pools),
            gate=GateSpec(
                soak_seconds=s.gate.soak,
                max_unhealthy_nodes=s.gate.max_unhealthy_nodes,
                approval_required=s.gate.approval == "required",
                approvers=tuple(s.gate.approvers.users) if s.gate.approvers else (),
                approver_keys=tuple(s.gate.approvers.keys) if s.gate.approvers else (),
                approver_teams=tuple(s.gate.approvers.teams) if s.gate.approvers else (),
                timeout_seconds=s.gate.timeout,
                smoke_test=_smoke_spec(s.gate.smoke_test),
                metrics=tuple(
                    MetricSpec(
                        m.name, m.query, m.max, m.min, m.for_, m.compare_to, m.tolerance, m.better
                    )
                    for m in s.gate.metrics
                ),
                on_no_data=s.gate.on_no_data,
            ),
            on_failure=s.on_failure,
            windows=stage_windows(s.windows, freezes),
        )
        for s in repo.fleet.spec.stages
    )
    refs = {c.name: c for c in repo.fleet.cluster_refs()}
    clusters: dict[str, ClusterTarget] = {}
    conflicts: list[Conflict] = []
    for cname, pool_names in repo.cluster_pools().items():
        if not pool_names:
            continue  # nothing to manage there
        ref = refs.get(cname)
        target, found = _compile_cluster(
            repo,
            cname,
            ref.context if ref else None,
            ref.operator_namespace if ref else sharing.DEFAULT_NAMESPACE,
            pool_names,
            commit,
        )
        clusters[cname] = target
        conflicts.extend(found)
    return CompiledFleet(
        commit=commit,
        name=repo.fleet.metadata.name,
        stages=stages,
        clusters=clusters,
        allow_mass_pool_removal=repo.fleet.spec.allow_mass_pool_removal,
    ), conflicts


def stage_windows(
    spec: StageWindows | None, freezes: tuple[windows.Freeze, ...]
) -> windows.Windows:
    if spec is None:
        return windows.Windows(freezes=freezes)
    return windows.Windows(
        timezone=spec.timezone,
        allow=tuple(windows.Recurrence(w.schedule, w.duration) for w in spec.allow),
        deny=tuple(windows.Recurrence(w.schedule, w.duration) for w in spec.deny),
        freezes=freezes,
    )


def _smoke_spec(smoke: SmokeTest | None) -> SmokeTestSpec | None:
    if smoke is None:
        return None
    return SmokeTestSpec(
        image=smoke.image,
        command=tuple(smoke.command),
        gpus=smoke.gpus,
        timeout_seconds=smoke.timeout,
        nodes=None if smoke.nodes == "all" else int(smoke.nodes),
    )


def locate(repo: FleetRepo, pool: str, path: PathKey) -> tuple[str, int]:
    """file and line of a merged ClusterPolicy field of ``pool``."""
    return origin(path, repo.pools[pool].policy_doc, repo.base_doc)


def _annotations(commit: str, pool: str, stage: str) -> dict[str, str]:
    return {
        names.COMMIT_ANNOTATION: commit,
        names.POOL_ANNOTATION: pool,
        names.STAGE_ANNOTATION: stage,
    }


# Tolerates the taint new nodes carry until verified (pools with verifyNewNodes).
UNVERIFIED_TOLERATION = {
    "key": names.UNVERIFIED_TAINT,
    "operator": "Exists",
    "effect": "NoSchedule",
}


def _compile_cluster(
    repo: FleetRepo,
    cname: str,
    context: str | None,
    namespace: str,
    pool_names: list[str],
    commit: str,
) -> tuple[ClusterTarget, list[Conflict]]:
    # read-only views sharing the base's maps; what is changed below is copied first
    docs = {p: repo.policy_view(p) for p in pool_names}
    # Per-pool values the operator can realise per node become node labels (fleet/lowering.py).
    lowered = lowering.lower(docs)
    parts = {p: policy.cluster_part(d) for p, d in lowered.docs.items()}
    conflicts = [Conflict(cname, path, values) for path, values in policy.disagreements(parts)]
    first = parts[pool_names[0]]
    spec = plain.copy(first["spec"])
    lowering.apply_patch(spec, lowered.spec_patch)
    driver = spec.setdefault("driver", {})
    driver["useNvidiaDriverCRD"] = True
    daemonsets = spec.setdefault("daemonsets", {})
    if isinstance(daemonsets, dict):
        # Operand pods move to a new revision only when deleted, so each stage's nodes move when
        # that stage adopts (sync/operands.py); RollingUpdate, if a fleet insists, is GG042.
        daemonsets.setdefault("updateStrategy", "OnDelete")
        if any(repo.pools[p].model.spec.verify_new_nodes for p in pool_names):
            # Operands must reach an unverified node: the ladder verifies it by them.
            daemonsets["tolerations"] = _with_unverified(daemonsets.get("tolerations"))
    agreed = policy.common([policy.upgrade_policy(docs[p]) for p in pool_names])
    if agreed:
        driver["upgradePolicy"] = {**agreed, **driver.get("upgradePolicy", {})}
    stage_order = [s.name for s in repo.fleet.spec.stages]
    first_stage = min((repo.stage_of(p) for p in pool_names), key=stage_order.index)
    meta = first.get("metadata", {})
    cluster_policy = {
        "apiVersion": names.CLUSTER_POLICY_API[0],
        "kind": names.CLUSTER_POLICY_API[1],
        "metadata": {
            "name": names.CLUSTER_POLICY_NAME,
            "labels": {**meta.get("labels", {}), names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
            "annotations": {
                **meta.get("annotations", {}),
                **_annotations(commit, ",".join(sorted(pool_names)), first_stage),
            },
        },
        "spec": spec,
    }
    # pool.yaml's own settings win over a lowered ClusterPolicy value (GG027 says so).
    labels = {p: {**lowered.labels[p], **node_labels(repo.pools[p])} for p in pool_names}
    dp = device_plugin_configs(repo, pool_names, labels, spec, namespace)
    mig = mig_layout_configs(repo, pool_names, labels, spec, namespace)
    pools = {
        p: _pool_target(repo.pools[p], cname, repo.stage_of(p), docs[p], commit, labels[p])
        for p in pool_names
    }
    if mig:
        strategy = _mig_strategy(spec)
        for p, source in mig.sources.items():
            found = mig_layouts.layout(source.doc)
            devices = mig_layouts.per_gpu(found[1]) if found else None
            pools[p] = replace(
                pools[p],
                mig_layout_file=source.doc.file,
                mig_enabled=mig.enabled[p],
                mig_resources=mig_layouts.advertised(devices, strategy) if devices else None,
            )
    if dp:
        for p, source in dp.sources.items():
            pools[p] = replace(
                pools[p],
                device_plugin_file=source.doc.file,
                device_plugin_promise=sharing_promise.promise(source.doc.data),
            )
    return ClusterTarget(
        name=cname,
        context=context,
        cluster_policy=cluster_policy,
        pools=pools,
        config_maps=tuple(c.configmap for c in (dp, mig) if c is not None),
    ), conflicts


def device_plugin_configs(
    repo: FleetRepo,
    pool_names: list[str],
    labels: dict[str, dict[str, str]],
    spec: dict[str, Any],
    namespace: str,
) -> sharing.Compiled | None:
    """Pools whose device-plugin config is in the fleet repo get a versioned key of the
    cluster's one ConfigMap (fleet/sharing.py); the ClusterPolicy names that ConfigMap.
    ``labels`` (pool -> node labels) and ``spec`` are updated in place."""
    plugin = spec.get("devicePlugin")
    config = plugin.get("config") if isinstance(plugin, dict) else None
    default = config.get("default") if isinstance(config, dict) else None
    sources: dict[str, sharing.ConfigSource] = {}
    for p in pool_names:
        src = repo.pools[p]
        if src.device_plugin_doc is not None:
            sources[p] = sharing.ConfigSource(p, src.device_plugin_doc)
            continue
        name = labels[p].get(names.DEVICE_PLUGIN_CONFIG_LABEL) or default
        if isinstance(name, str) and name in repo.device_plugin_configs:
            sources[p] = sharing.ConfigSource(name, repo.device_plugin_configs[name])
    compiled = sharing.build(sources, namespace)
    if compiled is None or (plugin is not None and not isinstance(plugin, dict)):
        return None  # nothing in the repo, or an ill-typed devicePlugin: the schema says it
    for p, key in compiled.keys.items():
        labels[p][names.DEVICE_PLUGIN_CONFIG_LABEL] = key
    named: dict[str, Any] = {"name": sharing.CONFIGMAP_NAME}
    if isinstance(default, str) and default and default not in repo.device_plugin_configs:
        named["default"] = default  # a key of no fleet-repo config: preflight says so
    spec.setdefault("devicePlugin", {})["config"] = named
    return compiled


def mig_layout_configs(
    repo: FleetRepo,
    pool_names: list[str],
    labels: dict[str, dict[str, str]],
    spec: dict[str, Any],
    namespace: str,
) -> mig_layouts.Compiled | None:
    """Pools whose MIG layout is in the fleet repo get a versioned layout of the cluster's one
    mig-parted ConfigMap (fleet/mig_layouts.py); the ClusterPolicy names that ConfigMap.
    ``labels`` and ``spec`` are updated in place."""
    sources: dict[str, sharing.ConfigSource] = {}
    for p in pool_names:
        src = repo.pools[p]
        if src.mig_layout_doc is not None:
            sources[p] = sharing.ConfigSource(p, src.mig_layout_doc)
            continue
        name = labels[p].get(names.MIG_CONFIG_LABEL)
        if name and name in repo.mig_layouts:
            sources[p] = sharing.ConfigSource(name, repo.mig_layouts[name])
    manager = spec.get("migManager")
    compiled = mig_layouts.build(sources, namespace)
    if compiled is None or (manager is not None and not isinstance(manager, dict)):
        return None  # nothing in the repo, or an ill-typed migManager: the schema says it
    for p, key in compiled.keys.items():
        labels[p][names.MIG_CONFIG_LABEL] = key
    config = {"name": mig_layouts.CONFIGMAP_NAME, "default": mig_layouts.DISABLED}
    spec.setdefault("migManager", {})["config"] = config
    return compiled


def _mig_strategy(spec: Mapping[str, Any]) -> str:
    mig = spec.get("mig")
    value = mig.get("strategy") if isinstance(mig, dict) else None
    return value if isinstance(value, str) else "single"  # the CRD's default


def node_labels(src: PoolSource) -> dict[str, str]:
    spec = src.model.spec
    labels = {names.POOL_LABEL: src.name}
    if spec.mig_config:
        labels[names.MIG_CONFIG_LABEL] = spec.mig_config
    if spec.device_plugin_config:
        labels[names.DEVICE_PLUGIN_CONFIG_LABEL] = spec.device_plugin_config
    if spec.workload:
        labels[names.WORKLOAD_CONFIG_LABEL] = spec.workload
    for component in spec.disabled_components:
        labels[names.DEPLOY_LABEL_PREFIX + component] = "false"
    return labels


def driver_manifest(
    src: PoolSource, doc: dict[str, Any], commit: str, stage: str
) -> dict[str, Any]:
    spec = src.model.spec
    dspec = policy.driver_spec(doc)
    upgrade = dspec.get("upgradePolicy")
    if "max_unavailable" in spec.model_fields_set and (
        upgrade is None or isinstance(upgrade, dict)
    ):
        # pool.yaml's disruption budget is the pool's one source of truth: it also bounds the
        # operator's own driver upgrade of the pool (preflight warns if the policy says else)
        dspec["upgradePolicy"] = {**(upgrade or {}), "maxUnavailable": spec.max_unavailable}
    dspec["driverType"] = spec.driver_type
    dspec["default"] = False
    dspec["nodeSelector"] = dict(spec.node_selector)
    if spec.verify_new_nodes:  # the driver must reach the node it is to verify
        dspec["tolerations"] = _with_unverified(dspec.get("tolerations"))
    return {
        "apiVersion": names.NVIDIA_DRIVER_API[0],
        "kind": names.NVIDIA_DRIVER_API[1],
        "metadata": {
            "name": src.name,
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
            "annotations": _annotations(commit, src.name, stage),
        },
        "spec": dspec,
    }


def _pool_target(
    src: PoolSource,
    cname: str,
    stage: str,
    doc: dict[str, Any],
    commit: str,
    labels: Mapping[str, str],
) -> PoolTarget:
    spec = src.model.spec
    driver = driver_manifest(src, doc, commit, stage)
    version = driver["spec"].get("version")
    return PoolTarget(
        name=src.name,
        cluster=cname,
        stage=stage,
        node_selector=dict(spec.node_selector),
        max_unavailable=spec.max_unavailable,
        gpu_product=spec.gpu.product,
        mig_config=labels.get(names.MIG_CONFIG_LABEL),
        device_plugin_config=labels.get(names.DEVICE_PLUGIN_CONFIG_LABEL),
        node_labels=dict(labels),
        driver=driver,
        driver_version=version if isinstance(version, str) else None,
        unavailable_nodes=spec.unavailable_nodes,
        verify_new_nodes=spec.verify_new_nodes,
    )


def _with_unverified(tolerations: Any) -> Any:
    """``tolerations`` plus one of names.UNVERIFIED_TAINT (a non-list is left for the CRD
    schema to refuse)."""
    if tolerations is not None and not isinstance(tolerations, list):
        return tolerations
    have = list(tolerations or [])
    if any(isinstance(t, dict) and t.get("key") == names.UNVERIFIED_TAINT for t in have):
        return have
    return [*have, UNVERIFIED_TOLERATION]
