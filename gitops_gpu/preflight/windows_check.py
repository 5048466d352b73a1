"""Stage windows and fleet freezes at preflight: a stage whose window can never open is an error
(GG070: its commits would wait forever); for every stage with windows, when it next opens
(GG071, info), so a pull request says "training: waiting for window: opens Tue 02:00 ...".

Malformed schedules, durations and time zones are refused by the models (GG002).
"""

from __future__ import annotations

from collections.abc import Iterator

from gitops_gpu.fleet import windows
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight.findings import Finding


def stage_windows(repo: FleetRepo, compiled: CompiledFleet, now: float) -> Iterator[Finding]:
    doc = repo.fleet_doc
    for i, stage in enumerate(compiled.stages):
        spec = stage.windows
        if spec.always_open:
            continue
        own = bool(spec.allow or spec.deny)
        line, _ = doc.where(("spec", "stages", i, "windows") if own else ("spec", "freezes"))
        field = f"spec.stages[{stage.name}].windows" if own else "spec.freezes"
        if windows.never_opens(spec, now):
            covered = " (deny entries or freezes cover every allowed time)" if own else ""
            yield Finding.make(
                "GG070",
                f"stage {stage.name}: its window never opens in the next 4 years{covered}",
                file=doc.file,
                line=line,
                field=field,
                fix="widen an allow entry, narrow a deny entry or end the freeze; a stage "
                "that never opens holds every later stage too",
            )
            continue
        state = windows.state(spec, now)
        text = state.reason if not state.open else f"open now ({state.reason or 'no limit'})"
        yield Finding.make(
            "GG071",
            f"stage {stage.name}: {text}",
            file=doc.file,
            line=line,
            field=field,
            fix="nothing to do: its commits wait for the window (edit windows or freezes to "
            "move it)",
        )
