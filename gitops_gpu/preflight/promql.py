"""Gate metric queries parse as PromQL: checked with Prometheus's own parser (``promtool``).

``promtool check rules`` parses every rule's expression with the same parser the server uses, so
each query is wrapped in a one-rule file and checked. ``$nodes`` and ``$pools`` are replaced by a
sample regex first (that is what the controller substitutes at run time). Without ``promtool`` on
PATH the queries are left unchecked with a warning (GG061): a query that fails at run time fails
the stage with Prometheus's error text.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight.findings import Finding

SAMPLE = {"$nodes": "node-a|node-b", "$pools": "pool-a|pool-b"}
_MARK = "could not parse expression: "


def substitute(query: str, nodes: str, pools: str) -> str:
    return query.replace("$nodes", nodes).replace("$pools", pools)


def promtool() -> str | None:
    return shutil.which("promtool")


@functools.lru_cache(maxsize=256)
def parse_error(query: str, tool: str) -> str | None:
    """None when ``query`` parses; otherwise the parser's message (position and cause)."""
    expr = substitute(query, SAMPLE["$nodes"], SAMPLE["$pools"])
    rules = {"groups": [{"name": "gate", "rules": [{"record": "gate_check", "expr": expr}]}]}
    with tempfile.TemporaryDirectory(prefix="gitops-gpu-promql-") as tmp:
        path = Path(tmp) / "rules.json"  # JSON is YAML; no quoting trouble
        path.write_text(json.dumps(rules))
        proc = subprocess.run(
            [tool, "check", "rules", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    if proc.returncode == 0:
        return None
    text = (proc.stderr + proc.stdout).strip()
    at = text.find(_MARK)
    return text[at + len(_MARK) :].splitlines()[0] if at >= 0 else text.splitlines()[-1]


def metric_queries(repo: FleetRepo) -> Iterator[Finding]:
    stages = repo.fleet.spec.stages
    checks = [(s.name, m) for s in stages for m in s.gate.metrics]
    if not checks:
        return
    tool = promtool()
    file = repo.fleet_doc.file
    if tool is None:
        yield Finding.make(
            "GG061",
            f"promtool is not installed: {len(checks)} gate metric queries were not parsed",
            file=file,
            fix="install the prometheus package (apt-get install prometheus) for promtool",
        )
        return
    for stage, metric in checks:
        error = parse_error(metric.query, tool)
        if error is not None:
            yield Finding.make(
                "GG060",
                f"stage {stage}: metric {metric.name}: query does not parse: {error}",
                file=file,
                field=f"spec.stages[{stage}].gate.metrics[{metric.name}].query",
                fix="fix the PromQL (promtool check rules parses it the same way)",
            )
