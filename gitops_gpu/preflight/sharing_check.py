"""Preflight of GPU sharing configs: the device plugin's config files in the fleet repo, the key
each pool's nodes select, and whether the sharing fits the pool's GPUs.

- GG080/GG081: a config file the plugin would reject, or a setting it ignores
  (preflight/device_plugin_schema.py);
- GG082: a key a pool selects (``nvidia.com/device-plugin.config``) that exists nowhere: not in
  the fleet repo, no ConfigMap named, or (with ``--kubeconfig``) not in the live ConfigMap the
  ClusterPolicy names. The plugin then runs on its built-in config: sharing never takes
  effect, and nothing else says so;
- GG083: sharing that cannot work on the pool's GPUs: MPS on a MIG layout (the plugin refuses
  MIG devices for MPS), MIG resource names the MIG strategy never advertises;
- GG084: a pool with its own device-plugin.yaml that also names another config.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gitops_gpu import names
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import sharing
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet, PoolTarget
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.fleet.yamlio import Document, dotted
from gitops_gpu.preflight import device_plugin_schema as schema
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.preflight.live import LiveClient

DP = names.DEVICE_PLUGIN_CONFIG_LABEL
MIG_OFF = (None, "all-disabled")


def _docs(repo: FleetRepo) -> dict[str, Document]:
    """file -> document, for every device-plugin config in the repo."""
    out = {d.file: d for d in repo.device_plugin_configs.values()}
    for src in repo.pools.values():
        if src.device_plugin_doc is not None:
            out[src.device_plugin_doc.file] = src.device_plugin_doc
    return out


def config_files(repo: FleetRepo) -> Iterator[Finding]:
    """GG080/GG081 for every device-plugin config file, used or not."""
    for file, doc in sorted(_docs(repo).items()):
        for issue in schema.check(doc.data):
            yield Finding.make(
                "GG081" if issue.warning else "GG080",
                issue.message,
                file=file,
                line=doc.where(issue.path)[0],
                field=dotted(issue.path),
                fix=issue.fix,
            )


def _anchor(repo: FleetRepo, pool: str) -> tuple[str, int, str]:
    """Where a pool's key choice is written: pool.yaml, or its ClusterPolicy's default."""
    src = repo.pools[pool]
    if src.model.spec.device_plugin_config is not None:
        return (
            src.pool_doc.file,
            src.pool_doc.where(("spec", "devicePluginConfig"))[0],
            ("spec.devicePluginConfig"),
        )
    path = ("spec", "devicePlugin", "config", "default")
    file, line = fleet_compile.locate(repo, pool, path)
    return file, line, dotted(path)


def _config(cluster: ClusterTarget) -> Mapping[str, Any]:
    plugin = cluster.cluster_policy["spec"].get("devicePlugin")
    config = plugin.get("config") if isinstance(plugin, dict) else None
    return config if isinstance(config, dict) else {}


def _live_configmap(
    client: LiveClient, namespace: str, name: str
) -> tuple[Mapping[str, str] | None, str]:
    """The live ConfigMap's data (None: not there) and what went wrong reading it."""
    try:
        items = client.list("v1", "ConfigMap", namespace=namespace)["items"]
    except KubeError as exc:
        return None, f"could not be read ({exc.args[0] if exc.args else exc})"
    for cm in items:
        if cm["metadata"]["name"] == name:
            return cm.get("data") or {}, ""
    return None, f"does not exist in namespace {namespace}"


def keys(
    repo: FleetRepo, compiled: CompiledFleet, clients: Mapping[str, LiveClient]
) -> Iterator[Finding]:
    """GG082 for every selected key that exists nowhere; GG084 for a pool naming two configs."""
    refs = {c.name: c for c in repo.fleet.cluster_refs()}
    for cname, cluster in sorted(compiled.clusters.items()):
        ref = refs.get(cname)
        namespace = ref.operator_namespace if ref else sharing.DEFAULT_NAMESPACE
        built = {
            k
            for cm in cluster.config_maps
            if cm["metadata"]["name"] == sharing.CONFIGMAP_NAME
            for k in (cm.get("data") or {})
        }
        config = _config(cluster)
        cm_name = str(config.get("name") or "")
        live: tuple[Mapping[str, str] | None, str] | None = None
        default = str(config.get("default") or "")
        if built and default and default not in built:
            yield _default_nowhere(repo, cluster, default)
        for name, target in sorted(cluster.pools.items()):
            src = repo.pools[name]
            chosen = src.model.spec.device_plugin_config
            if src.device_plugin_doc is not None and chosen is not None:
                yield Finding.make(
                    "GG084",
                    f"pool '{name}' has its own {sharing.DEVICE_PLUGIN_FILE} and also names "
                    f"device-plugin config '{chosen}': its nodes get the file's key",
                    file=src.pool_doc.file,
                    line=src.pool_doc.where(("spec", "devicePluginConfig"))[0],
                    field="spec.devicePluginConfig",
                    fix="remove spec.devicePluginConfig from pool.yaml, or the pool's "
                    f"{sharing.DEVICE_PLUGIN_FILE}",
                    pool=name,
                    cluster=cname,
                )
            key = target.node_labels.get(DP)
            if not key or key in built:
                continue
            file, line, field = _anchor(repo, name)
            shared = f"{sharing.CONFIGS_DIR}/{key}.yaml"
            if built:
                why = (
                    f"it is in no fleet-repo config, and this cluster's device-plugin ConfigMap "
                    f"({sharing.CONFIGMAP_NAME}) is built from the fleet repo"
                )
            elif not cm_name:
                why = (
                    "no device-plugin ConfigMap is named (devicePlugin.config.name is empty) "
                    f"and {shared} does not exist"
                )
            elif cname in clients:
                if live is None:
                    live = _live_configmap(clients[cname], namespace, cm_name)
                data, problem = live
                if data is not None and key in data:
                    yield from _live_content(data[key], cname, cm_name, key, name, file, line)
                    continue
                why = (
                    f"ConfigMap {namespace}/{cm_name} {problem}"
                    if data is None
                    else f"ConfigMap {namespace}/{cm_name} has no key '{key}' (it has: "
                    f"{', '.join(sorted(data)) or 'none'})"
                )
            else:
                continue  # a key of the user's own ConfigMap: checked with --kubeconfig
            yield Finding.make(
                "GG082",
                f"pool '{name}' selects device-plugin config '{key}', which exists nowhere: "
                f"{why}. The plugin then runs its built-in config and the setting never "
                "takes effect",
                file=file,
                line=line,
                field=field,
                fix=f"add {shared} (the device plugin's config format), or select a key that "
                "exists",
                pool=name,
                cluster=cname,
            )


def _default_nowhere(repo: FleetRepo, cluster: ClusterTarget, default: str) -> Finding:
    """GG082 for a cluster-wide default key the repo-built ConfigMap does not hold: nodes of
    pools that select no key would run the plugin's built-in config."""
    pool = sorted(cluster.pools)[0]
    path = ("spec", "devicePlugin", "config", "default")
    file, line = fleet_compile.locate(repo, pool, path)
    return Finding.make(
        "GG082",
        f"devicePlugin.config.default '{default}' is in no fleet-repo config, and this "
        f"cluster's device-plugin ConfigMap ({sharing.CONFIGMAP_NAME}) is built from the fleet "
        "repo: nodes that select no key run the plugin's built-in config",
        file=file,
        line=line,
        field=dotted(path),
        fix=f"add {sharing.CONFIGS_DIR}/{default}.yaml, or remove the default",
        cluster=cluster.name,
    )


def _live_content(
    text: str, cname: str, cm_name: str, key: str, pool: str, file: str, line: int
) -> Iterator[Finding]:
    from ruamel.yaml import YAML  # noqa: PLC0415
    from ruamel.yaml.error import YAMLError  # noqa: PLC0415

    try:
        data = YAML(typ="safe").load(text)
    except YAMLError as exc:
        yield Finding.make(
            "GG080",
            f"cluster '{cname}': key '{key}' of ConfigMap {cm_name} is not YAML: {exc}",
            file=file,
            line=line,
            fix="fix the ConfigMap, or move the config into the fleet repo",
            pool=pool,
            cluster=cname,
        )
        return
    for issue in schema.check(data):
        yield Finding.make(
            "GG081" if issue.warning else "GG080",
            f"cluster '{cname}': key '{key}' of ConfigMap {cm_name}: {issue.message}",
            file=file,
            line=line,
            field=dotted(issue.path),
            fix=issue.fix + f" (in ConfigMap {cm_name}, or move it to the fleet repo)",
            pool=pool,
            cluster=cname,
        )


def _strategy(doc: Any, cluster: ClusterTarget) -> str:
    """The MIG strategy the plugin runs with: its config's flag, else the ClusterPolicy's
    mig.strategy (the operator passes it as MIG_STRATEGY; default single)."""
    flags = doc.get("flags") if isinstance(doc, dict) else None
    if isinstance(flags, dict) and isinstance(flags.get("migStrategy"), str):
        return str(flags["migStrategy"])
    mig = cluster.cluster_policy["spec"].get("mig")
    value = mig.get("strategy") if isinstance(mig, dict) else None
    return value if isinstance(value, str) else "single"


def _fit(target: PoolTarget, doc: Document, cluster: ClusterTarget) -> Iterator[tuple[str, str]]:
    active = schema.shared(doc.data)
    if active is None:
        return
    strategy, resources = active
    mig_on = (
        target.mig_enabled is not False
        if target.mig_layout_file
        else target.mig_config not in MIG_OFF
    )
    mig_strategy = _strategy(doc.data, cluster)
    if strategy == "mps" and mig_on:
        yield (
            f"shares by MPS but its MIG layout '{target.mig_config}' enables MIG: the device "
            "plugin refuses MPS for MIG devices ('sharing using MPS is not supported for MIG "
            "devices') and advertises nothing",
            "share MIG devices by timeSlicing, or set migConfig: all-disabled for MPS",
        )
    for name, _ in resources:
        if name.startswith(schema.PREFIX + "mig-") and not (mig_on and mig_strategy == "mixed"):
            yield (
                f"time-slices '{name}', a resource only MIG strategy 'mixed' on a MIG layout "
                f"advertises (here: strategy '{mig_strategy}', migConfig "
                f"'{target.mig_config or 'none'}'): the replicas never appear",
                "share nvidia.com/gpu, or enable a MIG layout with mig.strategy mixed",
            )
        if name == schema.PREFIX + "gpu" and mig_on and mig_strategy == "mixed":
            yield (
                f"shares 'nvidia.com/gpu', but with MIG strategy 'mixed' and MIG layout "
                f"'{target.mig_config}' the GPUs are advertised as nvidia.com/mig-<profile>",
                "share the pool's nvidia.com/mig-<profile> resources instead",
            )


def fit(repo: FleetRepo, compiled: CompiledFleet) -> Iterator[Finding]:
    """GG083 for sharing the pool's GPUs cannot honour."""
    docs = _docs(repo)
    for cname, cluster in sorted(compiled.clusters.items()):
        for name, target in sorted(cluster.pools.items()):
            doc = docs.get(target.device_plugin_file or "")
            if doc is None:
                continue
            for message, fix in _fit(target, doc, cluster):
                yield Finding.make(
                    "GG083",
                    f"pool '{name}' {message}",
                    file=doc.file,
                    line=doc.where(("sharing",))[0],
                    field="sharing",
                    fix=fix,
                    pool=name,
                    cluster=cname,
                )
