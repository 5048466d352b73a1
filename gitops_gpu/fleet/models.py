"""The fleet repo's own objects (Fleet, NodePool) and typed views of GPU Operator objects.

Fleet and NodePool are ours: ``extra="forbid"`` so a misspelt field is an error with its
position, never silently ignored. ClusterPolicy files belong to the GPU Operator's API: the
document header is checked here, the spec stays plain data (the CRD schema check in preflight
judges it), and :class:`DriverSettings` is the typed view of the few driver fields the compiler
and the version matrix read, with every other field kept (``extra="allow"``).
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gitops_gpu.fleet import windows
from gitops_gpu.fleet.compiled import UnavailableNodes

API_VERSION = "gitops-gpu.io/v1alpha1"
DEFAULT_CLUSTER = "default"

# gpu.deploy.<component> labels the GPU Operator honours (controllers/state_manager.go).
Component = Literal[
    "driver",
    "gpu-feature-discovery",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "operator-validator",
    "mig-manager",
    "sandbox-device-plugin",
    "sandbox-validator",
    "vfio-manager",
    "kata-manager",
    "cc-manager",
    "vgpu-manager",
    "vgpu-device-manager",
    "kata-sandbox-device-plugin",
]
COMPONENTS: tuple[str, ...] = get_args(Component)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PERCENT = re.compile(r"(\d{1,3})%")
MAX_DURATION = 30 * 86400.0


def parse_duration(value: Any) -> float:
    """'10m', '1h30m', '45s', '500ms' or a number of seconds -> seconds.

    Finite, non-negative and at most MAX_DURATION: '.nan' would skip a soak and '.inf' would
    make a timeout that never fires, so both are refused here rather than misread later.
    """
    if isinstance(value, bool):
        raise ValueError("a duration like 10m, 30s or 1h is expected")
    if isinstance(value, int | float):
        total = float(value)
    elif isinstance(value, str) and value:
        rest, total = value.strip(), 0.0
        while rest:
            m = _DURATION.match(rest)
            if not m or len(m.group(1)) > 12:
                raise ValueError(f"'{value}' is not a duration like 10m, 30s, 1h or 1h30m")
            total += float(m.group(1)) * _UNITS[m.group(2)]
            rest = rest[m.end() :]
    else:
        raise ValueError("a duration like 10m, 30s or 1h is expected")
    if not math.isfinite(total):
        raise ValueError("a duration must be a finite number (.nan and .inf are not durations)")
    if total < 0:
        raise ValueError("a duration cannot be negative")
    if total > MAX_DURATION:
        raise ValueError(
            f"{value!r} is longer than {MAX_DURATION // 86400:.0f} days; gates that long never "
            "conclude in practice"
        )
    return total


Duration = Annotated[float, BeforeValidator(parse_duration)]


def check_dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} must be a DNS label: lower-case letters, digits and '-', "
            "at most 63 characters, starting and ending with a letter or digit"
        )
    return value


def check_label_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"label key {key!r}: prefix must be a DNS subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise ValueError(
            f"label key {key!r}: name must be 1-63 characters [A-Za-z0-9-_.], "
            "starting and ending with a letter or digit"
        )


def check_label_value(key: str, value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(
            f"label '{key}': value {value!r} must be at most 63 characters "
            "[A-Za-z0-9-_.], starting and ending with a letter or digit"
        )


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class Metadata(_Model):
    name: StrictStr
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    annotations: dict[StrictStr, StrictStr] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_dns_label(v)


_RELEASE = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
REMOTE_CHART = ("oci://", "https://")


class OperatorRelease(_Model):
    """clusters[].gpuOperator: the GPU Operator release gitops-gpu installs and upgrades
    (docs/operator-upgrades.md). The chart is rendered by Helm itself; what it renders is
    reviewed in ``compile --out`` and checked by preflight before anything is applied."""

    version: StrictStr
    # a chart directory or .tgz in the fleet repo, or an oci:// or https:// chart reference
    chart: StrictStr
    values: StrictStr | None = None  # a values file in the fleet repo
    # The operand DaemonSets are not OnDelete: the new operator's operands would move on
    # every node at once. Refused (GG090) unless this says it is meant.
    allow_unstaged_upgrade: StrictBool = False

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not _RELEASE.fullmatch(v):
            raise ValueError(f"version {v!r} is not a release like v26.7.0")
        return v

    @field_validator("chart", "values")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is None or v.startswith(REMOTE_CHART):
            return v
        parts = PurePosixPath(v).parts
        if not v or v.startswith("/") or ".." in parts or "\\" in v:
            raise ValueError(
                f"{v!r} must be a path inside the fleet repo (no leading '/', no '..')"
                + ("" if v is None else ", or an oci:// or https:// chart")
            )
        return PurePosixPath(v).as_posix()

    @property
    def local_chart(self) -> str | None:
        return None if self.chart.startswith(REMOTE_CHART) else self.chart


class ClusterRef(_Model):
    name: StrictStr
    context: StrictStr | None = None
    # The GPU Operator release (its Helm chart version, e.g. v25.10.1) this cluster runs:
    # preflight checks the pools' drivers against it and compares it with AICR recipes.
    # Declaration only; gpuOperator (below) also installs and upgrades it.
    gpu_operator_version: StrictStr | None = None
    gpu_operator: OperatorRelease | None = None
    # Where the GPU Operator runs: the device-plugin ConfigMap built from the fleet repo goes
    # there (the operator reads devicePlugin.config.name in its own namespace).
    operator_namespace: StrictStr = "gpu-operator"

    @field_validator("name", "operator_namespace")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_dns_label(v)

    @model_validator(mode="after")
    def _one_release(self) -> ClusterRef:
        op, declared = self.gpu_operator, self.gpu_operator_version
        if op is not None and declared is not None and declared != op.version:
            raise ValueError(
                f"gpuOperatorVersion {declared} and gpuOperator.version {op.version} disagree: "
                "keep gpuOperator.version only"
            )
        return self

    @property
    def operator_release(self) -> str | None:
        """The release this cluster runs or is to run: gpuOperator.version, else the
        declared gpuOperatorVersion."""
        return self.gpu_operator.version if self.gpu_operator else self.gpu_operator_version


# registry/path:tag or @digest: a registry host (has a '.' or ':', or is localhost) comes first.
_QUALIFIED_IMAGE = re.compile(
    r"^(localhost|[a-z0-9-]+(\.[a-z0-9-]+)+|[a-z0-9.-]+:\d+)(/[a-z0-9._-]+)+"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$"
)


class SmokeTest(_Model):
    """gate.smokeTest: one pod per selected node once the stage converged (docs/rollout.md)."""

    image: StrictStr
    command: list[StrictStr] = Field(min_length=1)
    gpus: int = Field(default=1, ge=1, le=64, strict=True)
    timeout: Duration = 300.0
    nodes: Literal["all"] | int = "all"

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not _QUALIFIED_IMAGE.fullmatch(v):
            raise ValueError(
                f"image {v!r} must be fully qualified: registry/repository:tag or @sha256:..., "
                "e.g. nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04"
            )
        return v

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("a smoke test timeout must be longer than 0s")
        return v

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: str | int) -> str | int:
        if isinstance(v, bool) or (isinstance(v, int) and v < 1):
            raise ValueError("nodes is 'all' or a number of nodes >= 1")
        return v


class MetricCheck(_Model):
    """gate.metrics[]: a PromQL query that must stay within a bound during the soak."""

    name: StrictStr
    query: StrictStr
    max: float | None = None
    min: float | None = None
    # How long the value must have been within bounds; evaluated as max/min over that window.
    for_: Duration = Field(default=0.0, alias="for")
    # Kayenta-style: the same query on the nodes still running the previous commit (the later
    # stages'); the stage fails when its value is worse than that by more than `tolerance`.
    compare_to: Literal["baseline"] | None = None
    tolerance: float = Field(default=0.1, ge=0, le=100)
    better: Literal["lower", "higher"] = "lower"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_dns_label(v)

    @field_validator("max", "min")
    @classmethod
    def _bound(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("a bound must be a finite number")
        return v

    def model_post_init(self, _: Any) -> None:
        if self.max is None and self.min is None and self.compare_to is None:
            raise ValueError(f"metric {self.name!r}: give max, min or both, or compareTo")


_ED25519 = re.compile(r"AAAAC3NzaC1lZDI1NTE5AAAAI[A-Za-z0-9+/]{43}=?")


class Approvers(_Model):
    """Who may approve a stage: forge logins (the status's creator as the forge reports it) and,
    for a record with no logins (git notes), approvers' keys: 'ssh-ed25519 AAAA... name'."""

    users: list[StrictStr] = Field(default_factory=list)
    # "org/team" on GitHub and Gitea; a group's full path on GitLab (Developer or above).
    teams: list[StrictStr] = Field(default_factory=list)
    keys: list[StrictStr] = Field(default_factory=list)

    @field_validator("teams")
    @classmethod
    def _teams(cls, v: list[str]) -> list[str]:
        for team in v:
            if "/" not in team.strip("/"):
                raise ValueError(f"team {team!r}: write it as 'org/team' (GitLab: group/subgroup)")
        return v

    @field_validator("keys")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        for i, line in enumerate(v, 1):
            parts = line.split()
            # ssh-ed25519 public keys are 51 bytes: base64 "AAAAC3NzaC1lZDI1NTE5AAAA" + 44 chars
            if len(parts) < 2 or parts[0] != "ssh-ed25519" or not _ED25519.fullmatch(parts[1]):
                raise ValueError(
                    f"key {i}: expected 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5... name' "
                    "(an OpenSSH ed25519 public key line)"
                )
        return v


class Gate(_Model):
    soak: Duration = 0.0
    max_unhealthy_nodes: int = Field(default=0, ge=0, strict=True)
    approval: Literal["none", "required"] = "none"
    approvers: Approvers | None = None
    timeout: Duration | None = None
    smoke_test: SmokeTest | None = None
    metrics: list[MetricCheck] = Field(default_factory=list)
    # Prometheus unreachable or a query without data: keep waiting (the timeout bounds it) or fail.
    on_no_data: Literal["wait", "fail"] = "wait"

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: float | None) -> float | None:
        if v is not None and v <= 0:
            raise ValueError("a timeout must be longer than 0s (omit it for no timeout)")
        return v

    def model_post_init(self, _: Any) -> None:
        if self.approvers is not None and self.approval != "required":
            raise ValueError("approvers are named but approval is not 'required': set both")


class WindowEntry(_Model):
    """One recurring window: a 5-field cron or an ``RRULE:`` line, and how long it lasts."""

    schedule: StrictStr
    duration: Duration

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str) -> str:
        try:
            windows.check(windows.Windows(allow=(windows.Recurrence(v, 3600.0),)))
        except windows.WindowError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("duration")
    @classmethod
    def _duration(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("a window must last longer than 0s")
        return v


class StageWindows(_Model):
    """When a stage may adopt a commit and start node batches (docs/rollout.md, "Windows")."""

    timezone: StrictStr = "UTC"
    allow: list[WindowEntry] = Field(default_factory=list)
    deny: list[WindowEntry] = Field(default_factory=list)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            windows.check(windows.Windows(timezone=v))
        except windows.WindowError as exc:
            raise ValueError(str(exc)) from None
        return v


class FreezeEntry(_Model):
    """An absolute range in which no stage adopts anything (a launch, the year end)."""

    start: AwareDatetime = Field(alias="from")
    to: AwareDatetime
    reason: StrictStr = Field(min_length=1)

    def model_post_init(self, _: Any) -> None:
        if self.to <= self.start:
            raise ValueError("a freeze ends after it starts: 'to' must be later than 'from'")


class Stage(_Model):
    name: StrictStr
    pools: list[StrictStr] = Field(min_length=1)
    gate: Gate = Field(default_factory=Gate)
    on_failure: Literal["hold", "rollback"] = "hold"
    windows: StageWindows | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_dns_label(v)


class FleetSpec(_Model):
    base: StrictStr | None = None
    clusters: list[ClusterRef] | None = None
    stages: list[Stage] = Field(min_length=1)
    # How a pool's deviation from its AICR recipe (NodePool spec.recipe) is reported.
    recipe_policy: Literal["warn", "enforce"] = "warn"
    # A commit that removes more than half the pools of a cluster is refused (GG041) unless
    # this says it is meant (docs/rollout.md, "Removing pools").
    allow_mass_pool_removal: StrictBool = False
    # Fleet-wide holds: no stage adopts a commit or starts a node batch inside one.
    freezes: list[FreezeEntry] = Field(default_factory=list)


class Fleet(_Model):
    api_version: Literal["gitops-gpu.io/v1alpha1"]
    kind: Literal["Fleet"]
    metadata: Metadata
    spec: FleetSpec

    def cluster_refs(self) -> list[ClusterRef]:
        return (
            list(self.spec.clusters) if self.spec.clusters else [ClusterRef(name=DEFAULT_CLUSTER)]
        )


class GpuSpec(_Model):
    product: StrictStr | None = None
    # The CUDA version the pool's workloads are built for ("12.8"): the driver must run it.
    cuda: StrictStr | None = None

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d{1,2}\.\d{1,2}", v):
            raise ValueError(f"'{v}' is not a CUDA version like '12.8' or '13.0'")
        return v


class RecipeCriteria(_Model):
    """AICR query criteria; a field left out means "any", as in AICR."""

    service: StrictStr | None = None
    accelerator: StrictStr | None = None
    os: StrictStr | None = None
    intent: StrictStr | None = None
    platform: StrictStr | None = None


class RecipeRef(_Model):
    """spec.recipe: the AICR recipe a pool follows, by overlay name or by criteria."""

    name: StrictStr | None = None
    criteria: RecipeCriteria | None = None


class NodePoolSpec(_Model):
    cluster: StrictStr = DEFAULT_CLUSTER
    node_selector: dict[StrictStr, StrictStr]
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    mig_config: StrictStr | None = None
    device_plugin_config: StrictStr | None = None
    max_unavailable: int | StrictStr = "25%"
    # A node NotReady, or cordoned by someone other than the driver upgrade: skip it (within
    # maxUnavailable), wait for it, or fail the stage (docs/rollout.md).
    unavailable_nodes: UnavailableNodes = "skip"
    # Opt-in: a node that joins the pool is tainted NoSchedule (gitops-gpu.io/unverified) until
    # the ladder verifies it on the pool's commit (docs/rollout.md).
    verify_new_nodes: StrictBool = False
    workload: Literal["container", "vm-passthrough", "vm-vgpu"] | None = None
    disabled_components: list[Component] = Field(default_factory=list)
    # Not a ClusterPolicy field: NVIDIADriver.driverType (immutable) is chosen per pool here.
    driver_type: Literal["gpu", "vgpu", "vgpu-host-manager"] = "gpu"
    # The AICR recipe the pool follows: `recipe: <overlay name>` or `recipe: {criteria: {...}}`.
    recipe: RecipeRef | None = None

    @field_validator("recipe", mode="before")
    @classmethod
    def _recipe(cls, v: Any) -> Any:
        if isinstance(v, str):
            return {"name": v}
        if isinstance(v, dict) and ("name" in v) == ("criteria" in v):
            raise ValueError(
                "give the recipe either by name (recipe: h100-eks-ubuntu-training) or by "
                "criteria (recipe: {criteria: {service: eks, accelerator: h100}}), not both "
                "or neither"
            )
        return v

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            check_label_key(key)
            check_label_value(key, value)
        return v

    @field_validator("max_unavailable")
    @classmethod
    def _max_unavailable(cls, v: int | str) -> int | str:
        # 0 would stall every relabel for good; over 100% would claim more nodes than exist.
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise ValueError("must be a positive integer or a percentage like '25%'")
        if isinstance(v, int) and v < 1:
            raise ValueError(
                f"{v} would never let a node change: use a positive integer or a percentage "
                "like '25%'"
            )
        if isinstance(v, str):
            m = _PERCENT.fullmatch(v)
            if not m:
                raise ValueError(f"{v!r} must be a positive integer or a percentage like '25%'")
            if not 1 <= int(m.group(1)) <= 100:
                raise ValueError(f"'{v}' must be between 1% and 100% of the pool's nodes")
        return v

    @field_validator("mig_config", "device_plugin_config")
    @classmethod
    def _label_value(cls, v: str | None) -> str | None:
        if v is not None:
            check_label_value("value", v)
        return v

    @field_validator("disabled_components")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("a component is listed twice")
        return v


class NodePool(_Model):
    api_version: Literal["gitops-gpu.io/v1alpha1"]
    kind: Literal["NodePool"]
    metadata: Metadata
    spec: NodePoolSpec


class ObjectMeta(BaseModel):
    """metadata of a GPU Operator object as written by the user (name is replaced on compile)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: StrictStr | None = None
    namespace: StrictStr | None = None
    labels: dict[StrictStr, StrictStr] | None = None
    annotations: dict[StrictStr, StrictStr] | None = None


class ClusterPolicyDoc(BaseModel):
    """The header of a ClusterPolicy file; ``spec`` stays data for the CRD schema check."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )
    api_version: Literal["nvidia.com/v1"]
    kind: Literal["ClusterPolicy"]
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] | None = None


class DriverSettings(BaseModel):
    """Typed view of an NVIDIADriver spec: the fields compile and the matrix read.

    Lenient on purpose (``extra="allow"``, values may be absent): type errors are the CRD
    schema check's to report, with positions; this view only reads what is well-typed.
    """

    model_config = ConfigDict(
        extra="allow", alias_generator=to_camel, populate_by_name=True, frozen=True
    )
    version: str | None = None
    repository: str | None = None
    image: str | None = None
    driver_type: str = "gpu"
    kernel_module_type: str = "auto"  # CRD default
    use_precompiled: bool = False
    node_selector: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> DriverSettings:
        data = dict(spec)
        for key, typ in _DRIVER_TYPES:
            if key in data and not isinstance(data[key], typ):
                del data[key]  # ill-typed: the schema check reports it
        return cls.model_validate(data)


_DRIVER_TYPES: tuple[tuple[str, type], ...] = (
    ("version", str),
    ("repository", str),
    ("image", str),
    ("driverType", str),
    ("kernelModuleType", str),
    ("usePrecompiled", bool),
    ("nodeSelector", dict),
)
