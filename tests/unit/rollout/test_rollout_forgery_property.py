"""Property: whatever anyone writes into the record, no pool runs a commit that its previous
stage's pools did not converge on (and soak) first.

Each pass an attacker with write access to the record may append unsigned or foreign-sealed
verdicts and approvals, replay genuine seals onto other commits, contexts and states, shuffle a
commit's lines and delete lines. The controller reads the record through the authenticator and
its ledger (as controller.py does), runs the machine, seals what it writes and keeps its own
verdicts in the ledger. The ground truth is kept by the simulation, not read from the record.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollout_sim import T0, sha

from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout.actions import AdoptCommit, Rollback, SetStatus
from gitops_gpu.rollout.authentic import Authenticator, with_ledger
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.seal import Keyring, generate, parse_public_keys
from gitops_gpu.rollout.status import (
    PREFLIGHT_CONTEXT,
    SUCCESS,
    VERDICTS,
    CommitStatus,
    MemoryBackend,
    approval_context,
    stage_context,
)

STAGES = (
    StageSpec("canary", ("c1",), GateSpec(soak_seconds=300), "rollback"),
    StageSpec("staging", ("s1",), GateSpec(soak_seconds=60)),
    StageSpec("fleet", ("f1", "f2"), GateSpec(approval_required=True)),
)
CTL = generate("controller")
AUTH = Authenticator(Keyring(parse_public_keys(CTL.public_line(), "ctl")))
INTRUDER = generate("intruder")
CONTEXTS = [stage_context(s.name) for s in STAGES] + [
    approval_context("fleet"),
    PREFLIGHT_CONTEXT,
]
OWN = set(CONTEXTS[:3]).__contains__


def attack(data: st.DataObject, backend: MemoryBackend, shas: list[str]) -> None:
    for _ in range(data.draw(st.integers(0, 3), label="forgeries")):
        kind = data.draw(st.sampled_from(["unsigned", "foreign", "replay", "shuffle", "delete"]))
        target = data.draw(st.sampled_from(shas))
        lines = backend._by_sha.setdefault(target, [])
        if kind in ("unsigned", "foreign"):
            forged = CommitStatus(
                target,
                data.draw(st.sampled_from(CONTEXTS)),
                data.draw(st.sampled_from(["success", "failure", "pending"])),
                "forged",
                created_at=T0,
            )
            lines.append(INTRUDER.seal(forged) if kind == "foreign" else forged)
        elif kind == "replay":
            genuine = [s for ss in backend._by_sha.values() for s in ss if s.seal]
            if genuine:
                copy = data.draw(st.sampled_from(genuine))
                lines.append(
                    replace(
                        copy,
                        sha=target,
                        context=data.draw(st.sampled_from(CONTEXTS)),
                        state=data.draw(st.sampled_from(["success", "failure"])),
                    )
                )
        elif kind == "shuffle" and lines:
            lines[:] = data.draw(st.permutations(lines))
        elif kind == "delete" and lines:
            del lines[data.draw(st.integers(0, len(lines) - 1))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_forged_unsigned_or_reordered_lines_never_skip_a_stage(data: st.DataObject) -> None:
    backend = MemoryBackend()
    backend.trust = AUTH.trusted  # as the controller wires it
    ledger: list[CommitStatus] = []
    commits: list[Commit] = []
    desired: dict[str, str] = {}
    converged: dict[str, set[str]] = {s.name: set() for s in STAGES}  # the ground truth
    approvals: set[tuple[str, str]] = set()
    now = T0
    for n in range(data.draw(st.integers(4, 30), label="passes")):
        if not commits or data.draw(st.integers(0, 3)) == 0:
            commits.insert(0, Commit(sha(f"{n + 1:x}"), data.draw(st.booleans() | st.just(True))))
        shas = [c.sha for c in commits]
        attack(data, backend, shas)
        pools: dict[str, PoolObservation] = {}
        for stage in STAGES:
            for pool in stage.pools:
                if pool in desired:
                    pools[pool] = PoolObservation(pool, desired[pool], True, 2, 2)
        judged = AUTH.judge(s for c in shas for s in backend.list_statuses(c))
        judged, _ = with_ledger(judged, ledger, OWN)
        if data.draw(st.integers(0, 4), label="approve") == 0:
            approvals.add((data.draw(st.sampled_from(shas)), "fleet"))
        inp = RolloutInput(
            commits=tuple(commits),
            statuses=judged.trusted,
            pools=pools,
            stages=STAGES,
            now=now,
            approvals=frozenset(approvals) | judged.approvals(),
        )
        for action in step(inp):
            if isinstance(action, AdoptCommit | Rollback):
                target = action.commit if isinstance(action, AdoptCommit) else action.to_commit
                index = next(i for i, s in enumerate(STAGES) if s.name == action.stage)
                if index > 0:
                    before = STAGES[index - 1].name
                    assert target in converged[before], (
                        f"{action}: {before} never converged on and soaked {target[:7]}"
                    )
                for pool in STAGES[index].pools:
                    desired[pool] = target
            elif isinstance(action, SetStatus):
                sealed = CTL.seal(action.to_status(now))
                if action.context in CONTEXTS[:3] and action.state == SUCCESS:
                    stage = next(s for s in STAGES if stage_context(s.name) == action.context)
                    assert all(desired.get(p) == action.commit for p in stage.pools)
                    converged[stage.name].add(action.commit)
                if OWN(sealed.context) and sealed.state in VERDICTS:
                    ledger.append(sealed)
                backend.set_status(sealed)
        now += data.draw(st.sampled_from([30.0, 120.0, 400.0]), label="dt")
