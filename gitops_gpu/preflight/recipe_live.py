"""A recipe's cluster constraints against the live cluster (``check --kubeconfig``).

AICR constraint names are measurement paths: ``K8s.server.version`` (the apiserver's
version), ``OS.release.ID`` / ``OS.release.VERSION_ID`` (os-release on the nodes; NFD
publishes them as ``feature.node.kubernetes.io/system-os_release.*``) and
``OS.sysctl./proc/sys/kernel/osrelease`` (the kernel; NFD's ``kernel-version.full``). Values
are ``>= 1.32.4``-style comparisons (``>=``, ``<=``, ``>``, ``<``, ``==``, ``!=``) or an exact
value. Other constraints (GPU, deployment, performance measurements) need AICR's own
snapshot agent and are left to ``aicr validate``: they are not reported here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gitops_gpu.preflight.findings import Finding
from gitops_gpu.preflight.recipe_resolve import Resolved

if TYPE_CHECKING:
    from gitops_gpu.preflight.recipe_check import Context

NFD = "feature.node.kubernetes.io/"
NODE_LABELS = {
    "OS.release.ID": NFD + "system-os_release.ID",
    "OS.release.VERSION_ID": NFD + "system-os_release.VERSION_ID",
    "OS.sysctl./proc/sys/kernel/osrelease": NFD + "kernel-version.full",
}
_OP = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*(.*?)\s*$")
_NUM = re.compile(r"\d+")


def server_version(client: Any) -> str | None:
    """gitVersion of the apiserver ("v1.36.3"), or None when the client cannot ask."""
    request = getattr(client, "request", None)
    if request is None:
        return None
    info = request("GET", "/version")
    return str(info.get("gitVersion")) if isinstance(info, dict) else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in _NUM.findall(re.split(r"[-+]", text, maxsplit=1)[0])[:3])


def satisfied(expr: str, actual: str) -> bool:
    """Does ``actual`` meet constraint value ``expr`` (">= 1.32.4", "ubuntu", "24.04")?"""
    m = _OP.match(expr)
    op, want = (m.group(1), m.group(2)) if m else (None, expr)
    if op is None or op in ("==", "!="):
        same = actual.strip().lower() == want.strip().lower()
        return same if op != "!=" else not same
    a, w = _version(actual), _version(want)
    n = len(w)
    a = a[:n] + (0,) * (n - len(a[:n]))  # compare as many parts as the constraint names
    return {">=": a >= w, "<=": a <= w, ">": a > w, "<": a < w}[op]


class MakeFinding(Protocol):
    """A finding on one pool's ``spec.recipe``; ``message`` follows "pool 'NAME': "."""

    def __call__(self, code: str, message: str, *, fix: str, source: str = "") -> Finding: ...


def constraints(
    ctx: Context, pool: str, label: str, rec: Resolved, make: MakeFinding
) -> list[Finding]:
    from gitops_gpu.preflight.recipe_check import matched_nodes  # noqa: PLC0415

    target = ctx.compiled.pool(pool)
    live = target.cluster in ctx.nodes
    out: list[Finding] = []
    for name, c in sorted(rec.constraints.items()):
        if name == "K8s.server.version":
            actual = ctx.server_versions.get(target.cluster)
            if actual is None:
                continue
            if not satisfied(c.value, actual):
                out.append(
                    make(
                        "GG055",
                        f"cluster '{target.cluster}' runs Kubernetes {actual}, {label} needs "
                        f"{c.value} ({c.origin})",
                        fix=f"upgrade the cluster to Kubernetes {c.value.lstrip('<>=! ')} or "
                        "newer, or follow a recipe for this version",
                        source=c.origin,
                    )
                )
        elif name in NODE_LABELS and live:
            out += _node_constraint(label, name, c.value, c.origin, make, matched_nodes(ctx, pool))
    return out


def _node_constraint(
    label: str,
    name: str,
    expr: str,
    origin: str,
    make: MakeFinding,
    nodes: list[Mapping[str, Any]],
) -> list[Finding]:
    key = NODE_LABELS[name]
    failing: list[str] = []
    unlabelled: list[str] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        value = (meta.get("labels") or {}).get(key)
        if value is None:
            unlabelled.append(str(meta.get("name", "?")))
        elif not satisfied(expr, str(value)):
            failing.append(f"{meta.get('name', '?')} ({value})")
    out: list[Finding] = []
    if failing:
        out.append(
            make(
                "GG055",
                f"{len(failing)} node(s) fail "
                f"{label}'s {name} {expr} ({origin}): {', '.join(sorted(failing)[:5])}",
                fix="move the pool to nodes that meet the recipe, or follow a recipe for this OS",
                source=origin,
            )
        )
    if unlabelled:
        out.append(
            make(
                "GG056",
                f"{len(unlabelled)} node(s) have no "
                f"NFD label {key}, so {name} {expr} ({origin}) is not checked there: "
                f"{', '.join(sorted(unlabelled)[:5])}",
                fix="run Node Feature Discovery (the GPU Operator deploys it) on the pool's nodes",
                source=origin,
            )
        )
    return out
