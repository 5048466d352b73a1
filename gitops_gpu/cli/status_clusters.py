"""`gitops-gpu status` for a fleet of several clusters, as text: the cluster in every line and
the per-cluster parts of a stage that spans clusters (rollout/span.py) under the stage's verdict.
The report itself comes from ``operations.status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def render(stages: Sequence[dict[str, Any]]) -> None:
    for e in stages:
        where = f"clusters {','.join(e['clusters'])}"
        commit = (e["commit"] or "-")[:12]
        print(
            f"stage {e['stage']:12} {where:18} {commit:12} {e['state'] or '-':8} {e['description']}"
        )
        if e["hold"]:
            print(f"  hold: {e['hold']}")
        for part in e["parts"]:
            pc = (part["commit"] or "-")[:12]
            state = part["state"] or "-"
            print(f"  part  cluster {part['cluster']:10} {pc:12} {state:8} {part['description']}")
        for p in e["pools"]:
            line = (
                f"  pool {p['pool']:14} cluster {p['cluster']:10} {p['healthy']}/{p['total']} "
                f"nodes healthy ({p['health']})"
            )
            if p.get("unavailable"):
                line += f", {p['unavailable']} unavailable (skipped)"
            if p["firstFailure"]:
                line += f"; first failing: {p['firstFailure']}"
            print(line)
