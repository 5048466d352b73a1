"""The rollout state machine: one pure ``step`` from what a pass observed to what it should do.

It keeps no state of its own. Which commit each stage is on comes from the pools' commit
annotations; what each stage concluded comes from the commit statuses (the record); phase start
times come from the pending statuses' descriptions (see ``phases``). So a fresh process fed the
same record and cluster makes the same decision, and nothing finished is redone.

Per stage, in order:

1. Eligible commits: stage 1 takes commits that passed preflight; stage N takes those of stage
   N-1's eligible commits that have ``success`` for stage N-1. The target is the newest one.
2. If the target has ``failure`` for this stage: ``onFailure: hold`` leaves the stage alone;
   ``rollback`` re-applies the newest commit with ``success`` for the stage (its last good one).
3. Any other commit still ``pending`` for the stage was superseded by the target: it gets a final
   ``error`` "superseded by <sha7>" (so pull requests do not show it pending forever; ``error``,
   not ``failure``, because nothing was found wrong with it).
4. With ``approval: required`` and no ``gitops-gpu/approval/<stage>`` success for the target:
   pending "awaiting approval to roll out" and nothing of the target is applied (an approval is
   for one commit). Otherwise, if the pools do not all carry the target yet: ``AdoptCommit``.
   Apart from that pending, a status for the target is written only once its pools report it
   (argo-cd#16601: never judge a commit by nodes running another).
   With the stage's window closed (``windows``, the fleet's ``freezes``: fleet/windows.py), a
   commit its pools do not carry yet gets pending "waiting for window: opens ..." and nothing is
   applied; mid-rollout, no ``AdoptCommit`` is issued (no new node label batch or operand
   eviction starts; what the operator already started finishes), nor a drift heal. A rollback is
   never held by a window: it undoes a failure.
5. The gate: too many degraded nodes -> ``failure``; not converged -> pending "rolling out"
   (``failure`` once the stretch exceeds the timeout, counting only time the window was open);
   converged -> pending "soaking" until the
   soak has passed; then ``success`` (pending "awaiting approval" only if the approval was
   revoked after adoption). With ``gate.smokeTest``, converged is followed by pending "smoke
   testing" while one pod per node runs (one failed pod fails the stage; rollout/checks.py);
   with ``gate.metrics``, the queries are judged throughout the soak (a broken bound fails the
   stage; no data holds the soak's end, bounded by the timeout, or fails with onNoData: fail).

Statuses are only emitted on phase changes, so a rollout writes a handful per commit and context.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

from gitops_gpu.fleet import windows
from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.rollout import line, span
from gitops_gpu.rollout.actions import (
    Action,
    AdoptCommit,
    HoldUpgrades,
    Rollback,
    RunSmokeTest,
    SetStatus,
    Wait,
)
from gitops_gpu.rollout.checks import AnalysisResult, AnalysisState, SmokeResult, SmokeState
from gitops_gpu.rollout.gate import StageView, applied_commit, observe
from gitops_gpu.rollout.inputs import Commit, RolloutInput
from gitops_gpu.rollout.phases import (
    Phase,
    format_duration,
    pending_description,
    read_mark,
    whole_seconds,
)
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    MAX_DESCRIPTION,
    PENDING,
    PREFLIGHT_CONTEXT,
    SUCCESS,
    CommitStatus,
    fit_description,
    stage_context,
)

MAX_STATUSES = 10  # per commit and context, a verdict included
MAX_RELAPSES = 3  # converged, then not: a stage that keeps falling back fails
_ALWAYS_OPEN = windows.WindowState(True, "", None, None)


def short(sha: str) -> str:
    return sha[:7]


def step(inp: RolloutInput) -> list[Action]:
    """Decide one pass. Actions come in the order the controller must carry them out."""
    record = Record(inp.statuses)
    shas = [c.sha for c in inp.commits]
    if inp.paused:  # the line's own status says so; nothing of the record is written
        stop = inp.stop or line.LineStop()
        waiting = Wait("line stopped: nothing is adopted, promoted, rolled back or recorded")
        return [*line.statuses(stop, shas, record), *_hold_all(inp, stop.describe()), waiting]
    if inp.held:  # preflight verdicts still reach pull requests; nothing else moves
        held = f"rollout held: {inp.held}"
        return [*_preflight_statuses(inp.commits, record), *_hold_all(inp, held), Wait(held)]
    return _capped([*line.statuses(None, shas, record), *_step(inp, record)], record)


def _step(inp: RolloutInput, record: Record) -> list[Action]:
    actions: list[Action] = _preflight_statuses(inp.commits, record)
    eligible = [c.sha for c in inp.commits if _passed_preflight(c, record)]
    previous: StageSpec | None = None
    for stage in inp.stages:
        if previous is not None:
            gate_context = stage_context(previous.name)
            eligible = [sha for sha in eligible if record.state(sha, gate_context) == SUCCESS]
        if inp.cluster is None:
            actions.extend(_stage_step(stage, previous, eligible, inp, record))
        else:
            # One controller per cluster: run this cluster's part, derive the stage verdict.
            part = span.local_part(stage, inp.cluster, inp.pool_clusters)
            if part is not None:
                actions.extend(_stage_step(part, previous, eligible, inp, record))
            clusters = span.stage_clusters(stage, inp.pool_clusters)
            if len(clusters) > 1:
                shas = [c.sha for c in inp.commits]
                actions.extend(span.derive(stage, clusters, shas, record, inp.now))
        previous = stage
    return actions


def _passed_preflight(commit: Commit, record: Record) -> bool:
    if commit.preflight is not None:
        return commit.preflight
    return record.state(commit.sha, PREFLIGHT_CONTEXT) == SUCCESS


def _preflight_statuses(commits: Sequence[Commit], record: Record) -> list[Action]:
    out: list[Action] = []
    for commit in commits:
        if commit.preflight is None:
            continue
        state = SUCCESS if commit.preflight else FAILURE
        if record.state(commit.sha, PREFLIGHT_CONTEXT) == state:
            continue  # same verdict already recorded; its wording may differ, that is fine
        default = "preflight passed" if commit.preflight else "preflight failed"
        text = fit_description(commit.preflight_summary or default)
        out.append(SetStatus(commit.sha, PREFLIGHT_CONTEXT, state, text))
    return out


def _stage_step(
    stage: StageSpec,
    previous: StageSpec | None,
    eligible: list[str],
    inp: RolloutInput,
    record: Record,
) -> list[Action]:
    name, context = stage.name, span.part_context(stage)
    window = _window(stage, inp.now)
    # Outside its window the operator starts no node of the stage either (but a rollback).
    hold: list[Action] = [] if window.open else [HoldUpgrades(name, window.reason)]
    if not eligible:
        waiting_for = f"{previous.name} to pass" if previous else "preflight to pass"
        return [*hold, Wait(f"{name}: no commit to adopt yet (waiting for {waiting_for} one)")]
    target = eligible[0]
    # Older commits still pending here will never finish: close them (after the adoption, so
    # "superseded" is only said once the newer commit is on its way).
    superseded: list[Action] = [
        SetStatus(c.sha, context, ERROR, f"{name}: superseded by {short(target)}")
        for c in inp.commits
        if c.sha != target and record.state(c.sha, context) == PENDING
    ]
    state = record.state(target, context)
    if state == FAILURE:
        return superseded + _after_failure(stage, target, inp, record)
    if stage.cluster is not None and record.state(target, stage_context(name)) == FAILURE:
        return superseded + _failed_elsewhere(stage, target, record)
    view = observe(stage, inp.pools, target)
    # Only an approval approves: a stage's own success is not one (a revoked approval stops
    # even the drift heal of a finished stage).
    approved = not stage.gate.approval_required or (target, name) in inp.approvals
    if not approved and not view.on_commit:
        # Approval comes before adoption: nothing of the commit reaches these pools yet.
        return hold + superseded + _await_rollout_approval(stage, target, inp, record)
    actions: list[Action] = list(hold)
    if approved and not (view.on_commit and view.in_sync):
        if window.open:
            actions.append(AdoptCommit(name, target))  # also heals drift on a finished stage
        elif not view.on_commit:
            return hold + superseded + _await_window(stage, target, inp, record, window)
        else:  # closed mid-rollout: what the operator started finishes, no new batch starts
            actions.append(Wait(f"{name}: no new node batch, {window.reason}"))
    actions.extend(superseded)
    if not view.on_commit:
        actions.append(Wait(f"{name}: applying {short(target)}"))
    elif state != SUCCESS:
        actions.extend(_gate(stage, target, view, inp, record))
    return actions


def _hold_all(inp: RolloutInput, reason: str) -> list[Action]:
    return [HoldUpgrades(stage.name, reason) for stage in inp.stages]


def _window(stage: StageSpec, now: float) -> windows.WindowState:
    if stage.windows.always_open:
        return _ALWAYS_OPEN
    return windows.state(stage.windows, now)


def _open_time(stage: StageSpec, start: float, now: float) -> float:
    """Time a gate timeout counts: only while the stage's window is open (a closed night never
    fails a stage). Soaks count wall time: health must hold overnight too."""
    if stage.windows.always_open:
        return now - start
    return windows.open_seconds(stage.windows, start, now)


def _await_window(
    stage: StageSpec,
    target: str,
    inp: RolloutInput,
    record: Record,
    window: windows.WindowState,
) -> list[Action]:
    """Pending "waiting for window", written once; nothing of the commit is applied yet."""
    name, context = stage.name, span.part_context(stage)
    latest = record.latest(target, context)
    mark = read_mark(latest) if latest is not None else None
    out: list[Action] = []
    if mark is None or mark.phase is not Phase.AWAITING_WINDOW:
        detail = window.reason.removeprefix("waiting for window: ")
        text = pending_description(name, Phase.AWAITING_WINDOW, whole_seconds(inp.now), detail)
        out.append(SetStatus(target, context, PENDING, text))
    out.append(Wait(f"{name}: {short(target)} {window.reason}"))
    return out


def _await_rollout_approval(
    stage: StageSpec, target: str, inp: RolloutInput, record: Record
) -> list[Action]:
    """Pending "awaiting approval to roll out", written once; the stage keeps what it runs."""
    name, context = stage.name, span.part_context(stage)
    latest = record.latest(target, context)
    mark = read_mark(latest) if latest is not None else None
    out: list[Action] = []
    if mark is None or mark.phase is not Phase.AWAITING_ROLLOUT_APPROVAL:
        running = applied_commit(stage, inp.pools)
        detail = f"runs {short(running)}" if running else "nothing applied yet"
        text = pending_description(
            name, Phase.AWAITING_ROLLOUT_APPROVAL, whole_seconds(inp.now), detail
        )
        out.append(SetStatus(target, context, PENDING, text))
    out.append(Wait(f"{name}: {short(target)} awaiting approval before anything is applied"))
    return out


def _gate(
    stage: StageSpec, target: str, view: StageView, inp: RolloutInput, record: Record
) -> list[Action]:
    name, context, gate, now = stage.name, span.part_context(stage), stage.gate, inp.now
    latest = record.latest(target, context)
    mark = read_mark(latest) if latest is not None else None
    if mark is not None and mark.phase in (Phase.AWAITING_ROLLOUT_APPROVAL, Phase.AWAITING_WINDOW):
        mark = None  # approved or opened, and adopted since: the gate starts afresh
    phase = mark.phase if mark is not None else None
    cause = f": {view.first_failure}" if view.first_failure else ""

    if view.too_many_unhealthy:
        allowed = gate.max_unhealthy_nodes
        nodes = "node" if view.nodes_unhealthy == 1 else "nodes"
        text = f"{name}: {view.nodes_unhealthy} {nodes} unhealthy (max {allowed}){cause}"
        return _fail(stage, target, text, inp, record)

    if not view.converged:
        since = (
            mark.since if mark is not None and phase is Phase.ROLLING_OUT else whole_seconds(now)
        )
        # The timeout bounds the whole time since adoption, relapses included; the record's
        # own history says when that was and how often the stage fell back.
        adopted, relapses = _adoption(record.history(target, context), now)
        if phase is not None and phase is not Phase.ROLLING_OUT:
            relapses += 1  # converged before, not any more: this pass is a relapse
        timeout = gate.timeout_seconds
        if timeout is not None and _open_time(stage, adopted, now) >= timeout:
            again = f" ({relapses} relapses)" if relapses else ""
            text = (
                f"{name}: not converged after {format_duration(timeout)}{again}: "
                f"{view.summary}{cause}"
            )
            return _fail(stage, target, text, inp, record)
        if relapses >= MAX_RELAPSES:
            text = f"{name}: relapsed {relapses} times since adoption: {view.summary}{cause}"
            return _fail(stage, target, text, inp, record)
        out: list[Action] = []
        held = view.waiting_on
        if phase is not Phase.ROLLING_OUT or (held and not _says(latest, name, since, held)):
            detail = view.summary if phase is None else f"soak interrupted, {view.summary}"
            if held:  # first: who holds the node is what a person acts on
                detail = f"{held}; {detail}"
            text = pending_description(name, Phase.ROLLING_OUT, since, detail)
            out.append(SetStatus(target, context, PENDING, text))
        out.append(Wait(f"{name}: rolling out {short(target)}: {view.summary}"))
        return out

    if gate.smoke_test is not None:
        smoke = _smoke_gate(stage, target, view, inp, record, phase)
        if smoke is not None:
            return smoke
        view = replace(view, summary=f"{view.summary}, smoke test passed")

    soak = gate.soak_seconds
    if phase is Phase.AWAITING_APPROVAL:
        soak_since = None  # soaked already
    else:
        soak_since = (
            mark.since if mark is not None and phase is Phase.SOAKING else whole_seconds(now)
        )
    soaking = soak > 0 and soak_since is not None and now - soak_since < soak
    if gate.metrics and phase is not Phase.AWAITING_APPROVAL:
        analysed = _analysis_gate(stage, target, view, inp, record, soaking=soaking)
        if analysed is not None:
            return analysed
    if soaking and soak_since is not None:
        out = []
        if phase is not Phase.SOAKING:
            text = pending_description(name, Phase.SOAKING, soak_since, view.summary, soak)
            out.append(SetStatus(target, context, PENDING, text))
        left = format_duration(soak - (now - soak_since))
        seen = _metric_values(stage, target, inp)
        out.append(Wait(f"{name}: soaking {short(target)}, {left} left{seen}"))
        return out

    soaked = f", soaked {format_duration(soak)}" if soak > 0 else ""
    if gate.approval_required and (target, name) not in inp.approvals:
        out = []
        if phase is not Phase.AWAITING_APPROVAL:
            detail = f"{view.summary}{soaked}"
            text = pending_description(name, Phase.AWAITING_APPROVAL, whole_seconds(now), detail)
            out.append(SetStatus(target, context, PENDING, text))
        out.append(Wait(f"{name}: {short(target)} awaiting approval"))
        return out

    approved = ", approved" if gate.approval_required else ""
    seen = _metric_values(stage, target, inp)
    text = fit_description(f"{name}: {view.summary}{soaked}{approved}{seen}")
    return [SetStatus(target, context, SUCCESS, text)]


def _metric_values(stage: StageSpec, target: str, inp: RolloutInput) -> str:
    """ "; metrics xid 0 (max 0)": the latest value of each metric check, when all were read
    within their bounds."""
    result = inp.analysis.get((stage.name, target))
    if not stage.gate.metrics or result is None or result.state is not AnalysisState.OK:
        return ""
    return f"; metrics {result.detail}" if result.detail else ""


def _smoke_gate(
    stage: StageSpec,
    target: str,
    view: StageView,
    inp: RolloutInput,
    record: Record,
    phase: Phase | None,
) -> list[Action] | None:
    """gate.smokeTest once converged: None when it passed (now or on an earlier pass)."""
    name, context = stage.name, span.part_context(stage)
    done = (Phase.SOAKING, Phase.AWAITING_APPROVAL)
    if any(
        m is not None and m.phase in done for m in map(read_mark, record.history(target, context))
    ):
        return None  # passed before (the record says so): never rerun for this commit
    result = inp.smoke.get((name, target), SmokeResult())
    if result.state is SmokeState.PASSED:
        return None
    if result.state is SmokeState.FAILED:
        failed = len(result.failures)
        first = result.failures[0] if result.failures else "no detail"
        text = f"{name}: smoke test failed on {failed}/{result.nodes_total} nodes: {first}"
        return _fail(stage, target, text, inp, record)
    out: list[Action] = []
    latest = record.latest(target, context)
    mark = read_mark(latest) if latest is not None else None
    since = mark.since if mark is not None and phase is Phase.SMOKE_TESTING else inp.now
    detail = f"{view.summary}, smoke test on {_nodes_text(stage)}"
    if result.waiting:  # a pod that cannot start says why, once, not at its timeout
        detail += f"; {result.waiting[0]}"
    text = pending_description(name, Phase.SMOKE_TESTING, whole_seconds(since), detail)
    if phase is not Phase.SMOKE_TESTING or (
        result.waiting and latest is not None and latest.description != text
    ):
        out.append(SetStatus(target, context, PENDING, text))
    out.append(RunSmokeTest(name, target))
    progress = f"{result.nodes_passed}/{result.nodes_total} nodes passed"
    out.append(Wait(f"{name}: smoke testing {short(target)}: {progress}"))
    return out


def _nodes_text(stage: StageSpec) -> str:
    smoke = stage.gate.smoke_test
    count = smoke.nodes if smoke is not None else None
    return "every node" if count is None else f"{count} node{'s' if count != 1 else ''}"


def _analysis_gate(
    stage: StageSpec,
    target: str,
    view: StageView,
    inp: RolloutInput,
    record: Record,
    *,
    soaking: bool,
) -> list[Action] | None:
    """gate.metrics during and at the end of the soak: None lets the soak logic go on."""
    name, gate = stage.name, stage.gate
    result = inp.analysis.get(
        (name, target), AnalysisResult(AnalysisState.NO_DATA, "not evaluated")
    )
    if result.state in (AnalysisState.VIOLATED, AnalysisState.ERROR):
        return _fail(stage, target, f"{name}: metric {result.detail}", inp, record)
    if result.state is AnalysisState.OK or soaking:
        return None  # no data during the soak: the soak goes on, its end waits for data
    if gate.on_no_data == "fail":
        return _fail(stage, target, f"{name}: metric {result.detail}", inp, record)
    adopted, _ = _adoption(record.history(target, span.part_context(stage)), inp.now)
    timeout = gate.timeout_seconds
    if timeout is not None and _open_time(stage, adopted, inp.now) >= timeout:
        text = f"{name}: no metric data after {format_duration(timeout)}: {result.detail}"
        return _fail(stage, target, text, inp, record)
    return [Wait(f"{name}: {short(target)} soaked, waiting for metric data: {result.detail}")]


def _adoption(history: Sequence[CommitStatus], now: float) -> tuple[float, int]:
    """(when the stage adopted the commit, how often it fell back from converged since)."""
    marks = [m for m in (read_mark(s) for s in history) if m is not None]
    started = [
        m.since for m in marks if m.phase in (Phase.ROLLING_OUT, Phase.SMOKE_TESTING, Phase.SOAKING)
    ]
    relapses = sum(
        1
        for before, after in itertools.pairwise(marks)
        if before.phase in (Phase.SMOKE_TESTING, Phase.SOAKING, Phase.AWAITING_APPROVAL)
        and after.phase is Phase.ROLLING_OUT
    )
    return (min(started) if started else whole_seconds(now)), relapses


def _says(latest: CommitStatus | None, name: str, since: float, held: str) -> bool:
    """The pending status already names this holder (written at most once per holder, not per
    pass: the status's own time says since when)."""
    said = pending_description(name, Phase.ROLLING_OUT, since, held).removesuffix("...")
    return latest is not None and latest.description.startswith(said)


def _capped(actions: list[Action], record: Record) -> list[Action]:
    """At most MAX_STATUSES per (sha, context), whatever the observations: the last slot is
    kept for a verdict (GitHub refuses the 1,001st status of a context)."""
    written: dict[tuple[str, str], int] = {}
    out: list[Action] = []
    for action in actions:
        if isinstance(action, SetStatus):
            key = (action.commit, action.context)
            count = written.get(key, len(record.history(*key)))
            room = MAX_STATUSES - count - (0 if action.state != PENDING else 1)
            if room <= 0:
                continue
            written[key] = count + 1
        out.append(action)
    return out


def _last_good(stage: StageSpec, inp: RolloutInput, record: Record) -> str | None:
    # The stage's own verdict, also for a part in one cluster: a commit that passed here but
    # failed in another cluster is no good to go back to.
    context = stage_context(stage.name)
    for commit in inp.commits:
        if record.state(commit.sha, context) == SUCCESS and _passed_preflight(commit, record):
            return commit.sha
    return None


def _fail(
    stage: StageSpec, target: str, text: str, inp: RolloutInput, record: Record
) -> list[Action]:
    context = span.part_context(stage)
    good = _last_good(stage, inp, record) if stage.on_failure == "rollback" else None
    suffix = f"; rolling back to {short(good)}" if good is not None else ""
    # Cut a long cause, never the verdict's end.
    text = fit_description(text, MAX_DESCRIPTION - len(suffix)) + suffix
    return [SetStatus(target, context, FAILURE, text), *_after_failure(stage, target, inp, record)]


def _failed_elsewhere(stage: StageSpec, target: str, record: Record) -> list[Action]:
    """The stage failed in another cluster: this part stops (its record closed with ``error``)
    and its pools keep what they run; onFailure acts in the cluster that failed."""
    name, out = stage.name, list[Action]()
    if record.state(target, span.part_context(stage)) not in (SUCCESS, ERROR):
        verdict = record.latest(target, stage_context(name))
        cause = verdict.description.removeprefix(f"{name}: ") if verdict else "failed"
        text = fit_description(f"{name}: stopped, {cause}")
        out.append(SetStatus(target, span.part_context(stage), ERROR, text))
    out.append(Wait(f"{name}: {short(target)} failed in another cluster; holding"))
    return out


def _after_failure(
    stage: StageSpec, target: str, inp: RolloutInput, record: Record
) -> list[Action]:
    name = stage.name
    if stage.on_failure != "rollback":
        return [Wait(f"{name}: holding, {short(target)} failed; push a fix")]
    good = _last_good(stage, inp, record)
    if good is None:
        return [Wait(f"{name}: {short(target)} failed and no earlier commit passed; holding")]
    at_good = observe(stage, inp.pools, good)
    if at_good.on_commit and at_good.in_sync:
        return [Wait(f"{name}: rolled back to {short(good)} after {short(target)} failed")]
    return [
        Rollback(name, good),
        Wait(f"{name}: rolling back to {short(good)} after {short(target)} failed"),
    ]
