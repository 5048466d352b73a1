"""Findings: what preflight reports, with a stable code, a severity, file:line and a fix.

Codes are stable API (CI rules and people grep for them); add new ones, never renumber.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


# code -> (severity, what it means)
CODES: dict[str, tuple[Severity, str]] = {
    "GG001": (
        Severity.ERROR,
        "a file cannot be read as YAML (syntax, duplicate key, tab, "
        "anchor/alias, size, encoding, symlink out of the repo)",
    ),
    "GG002": (Severity.ERROR, "a field does not fit the Fleet/NodePool/ClusterPolicy file shape"),
    "GG003": (
        Severity.ERROR,
        "stages: a pool is in no stage or in two, or a stage names an unknown pool",
    ),
    "GG004": (
        Severity.ERROR,
        "a reference is broken: missing file, unknown cluster, pool name "
        "differs from its folder, pool without ClusterPolicy",
    ),
    "GG005": (
        Severity.ERROR,
        "the tree holds an entry the controller cannot read where the fleet format reads "
        "(a submodule, symlink, fifo, socket or device; an unsafe or non-UTF-8 path)",
    ),
    "GG006": (
        Severity.INFO,
        "an entry is skipped, as the controller skips it: a submodule, symlink or special file "
        "outside what the fleet format reads, or an oversized file it never reads",
    ),
    "GG010": (Severity.ERROR, "the merged ClusterPolicy does not conform to the CRD schema"),
    "GG011": (Severity.ERROR, "a compiled NVIDIADriver does not conform to the CRD schema"),
    "GG012": (Severity.ERROR, "the apiserver refused a server-side dry-run apply"),
    "GG013": (Severity.INFO, "a CRD validation rule (CEL) was not evaluated offline"),
    "GG020": (Severity.ERROR, "pools of one cluster disagree on a cluster-scoped field"),
    "GG021": (Severity.ERROR, "two pools' node selectors can match the same node"),
    "GG022": (Severity.ERROR, "a live node is matched by two pools"),
    "GG023": (Severity.WARNING, "a pool's selector matches no live node"),
    "GG024": (
        Severity.ERROR,
        "an immutable NVIDIADriver field (driverType, usePrecompiled) "
        "changed since the base revision",
    ),
    "GG025": (
        Severity.WARNING,
        "cluster-wide blast radius: a cluster-scoped field changed since the base revision",
    ),
    "GG026": (
        Severity.ERROR,
        "a node selector uses a label that gitops-gpu or the GPU Operator sets itself",
    ),
    "GG027": (Severity.WARNING, "a pool setting has no effect with the cluster's ClusterPolicy"),
    "GG028": (
        Severity.WARNING,
        "driver.upgradePolicy.autoUpgrade is not set: ClusterPolicy and "
        "NVIDIADriver default it differently",
    ),
    "GG029": (
        Severity.WARNING,
        "a pool is removed since the base revision: pruned when the stage that held it adopts",
    ),
    "GG030": (Severity.ERROR, "the driver branch does not support the pool's GPU architecture"),
    "GG031": (Severity.ERROR, "the pool's GPUs need open kernel modules"),
    "GG032": (Severity.ERROR, "the pool's GPUs cannot run open kernel modules"),
    "GG033": (Severity.WARNING, "kernelModuleType auto needs a newer driver"),
    "GG034": (Severity.ERROR, "the MIG profile is not valid for the pool's GPU product"),
    "GG035": (Severity.WARNING, "the driver branch is end of life"),
    "GG036": (
        Severity.INFO,
        "the version matrix could not judge the pool (unknown product, branch or version)",
    ),
    "GG037": (Severity.ERROR, "the driver cannot run the CUDA version the pool states"),
    "GG039": (Severity.WARNING, "the driver version is in no known NVIDIA data center release"),
    "GG038": (
        Severity.WARNING,
        "the driver branch is newer than the cluster's GPU Operator release was published with",
    ),
    "GG050": (
        Severity.ERROR,
        "the pool's AICR recipe does not resolve (unknown name or criteria value, no overlay "
        "matches, a cycle in spec.base, a missing mixin or values file)",
    ),
    "GG051": (Severity.ERROR, "a file of the AICR recipes directory is malformed"),
    "GG052": (
        Severity.WARNING,
        "the pool's driver version differs from its recipe's (error with recipePolicy: enforce)",
    ),
    "GG053": (
        Severity.WARNING,
        "the cluster's GPU Operator version differs from the recipe's chart version "
        "(error with recipePolicy: enforce)",
    ),
    "GG054": (
        Severity.WARNING,
        "the pool's ClusterPolicy contradicts a GPU Operator value its recipe pins "
        "(error with recipePolicy: enforce)",
    ),
    "GG055": (
        Severity.WARNING,
        "the live cluster fails a recipe constraint: Kubernetes version or node OS "
        "(error with recipePolicy: enforce)",
    ),
    "GG056": (Severity.INFO, "a recipe comparison could not be made (what is missing is named)"),
    "GG041": (
        Severity.ERROR,
        "the commit removes more than half the pools of a cluster without allowMassPoolRemoval",
    ),
    "GG042": (
        Severity.WARNING,
        "daemonsets.updateStrategy RollingUpdate: cluster-wide operand changes reach every pool "
        "at once",
    ),
    "GG043": (
        Severity.ERROR,
        "an operand image the GPU Operator cannot resolve: partly set, or left to an "
        "environment variable the running operator does not have",
    ),
    "GG044": (
        Severity.WARNING,
        "an operand image left to the operator's environment variable (no cluster to check it)",
    ),
    "GG040": (Severity.INFO, "the base revision could not be compared"),
    "GG060": (Severity.ERROR, "a gate metric query does not parse as PromQL"),
    "GG070": (
        Severity.ERROR,
        "a stage's window never opens in the next 4 years (deny entries or freezes cover it)",
    ),
    "GG071": (Severity.INFO, "when a stage with windows or a freeze next opens"),
    "GG061": (Severity.WARNING, "promtool is not installed: gate metric queries were not parsed"),
    "GG080": (
        Severity.ERROR,
        "a device-plugin config the plugin would reject, or a setting it silently drops",
    ),
    "GG081": (Severity.WARNING, "a device-plugin config setting the plugin may not honour"),
    "GG082": (Severity.ERROR, "a pool selects a device-plugin config key that exists nowhere"),
    "GG083": (Severity.ERROR, "a pool's GPU sharing cannot work on its GPUs or MIG layout"),
    "GG084": (Severity.ERROR, "a pool has its own device-plugin.yaml and names another config"),
    "GG085": (Severity.ERROR, "a MIG layout file mig-parted would reject or misread"),
    "GG086": (
        Severity.WARNING,
        "a MIG layout places more of a profile on one GPU than any catalogue layout",
    ),
    "GG087": (
        Severity.ERROR,
        "a pool selects a MIG layout missing from the repo-built MIG ConfigMap",
    ),
    "GG088": (Severity.ERROR, "a gpuOperator chart or values file is missing or not a chart"),
    "GG089": (Severity.ERROR, "a gpuOperator values key the chart neither defaults nor reads"),
    "GG090": (
        Severity.ERROR,
        "an operator release whose operand DaemonSets are not OnDelete cannot be staged",
    ),
    "GG091": (Severity.ERROR, "Helm cannot render the gpuOperator chart with its values"),
    "GG092": (Severity.ERROR, "the gpuOperator chart runs another operator than the declared one"),
    "GG093": (
        Severity.ERROR,
        "the release's CRDs drop a version the cluster has stored objects in",
    ),
    "GG094": (
        Severity.ERROR,
        "the cluster's CRDs lack fields the compiled objects set (refused, or pruned silently)",
    ),
    "GG095": (Severity.WARNING, "the cluster's CRDs are older than the GPU Operator release"),
}


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    file: str = ""
    line: int = 0
    fix: str = ""
    field: str = ""
    pool: str = ""
    cluster: str = ""
    severity: Severity = Severity.ERROR
    source: str = ""  # where the rule comes from: a version-matrix row, an AICR recipe file

    @classmethod
    def make(cls, code: str, message: str, **kw: Any) -> Finding:
        """A finding with the severity registered for ``code``."""
        sev = kw.pop("severity", None) or CODES[code][0]
        return cls(code=code, message=message, severity=Severity(sev), **kw)

    @property
    def where(self) -> str:
        if not self.file:
            return "<fleet>"
        return f"{self.file}:{self.line}" if self.line else self.file

    def text(self) -> str:
        head = f"{self.where}: {self.severity.value} {self.code}: {self.message}"
        return head + (f"\n  fix: {self.fix}" if self.fix else "")

    render = text

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["severity"] = self.severity.value
        return out


_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Deduplicated, ordered by file, line, severity, code: stable output for CI diffs."""
    unique = {(f.code, f.file, f.line, f.message): f for f in findings}
    return sorted(
        unique.values(),
        key=lambda f: (f.file == "", f.file, f.line, _ORDER[f.severity], f.code, f.message),
    )


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)


def summary(findings: Sequence[Finding]) -> dict[str, int]:
    return {s.value: sum(1 for f in findings if f.severity is s) for s in Severity}


def render_text(findings: Sequence[Finding]) -> str:
    lines = [f.text() for f in findings]
    counts = summary(findings)
    lines.append(
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info"
    )
    return "\n".join(lines) + "\n"


def render_json(findings: Sequence[Finding], extra: dict[str, Any] | None = None) -> str:
    doc: dict[str, Any] = {
        "findings": [f.as_dict() for f in findings],
        "summary": summary(findings),
    }
    doc.update(extra or {})
    return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
