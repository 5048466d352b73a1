"""Staged rollout: the pure promotion state machine and the commit-status record it reads.

    step(RolloutInput) -> list[Action]        machine.py (pure; no IO, no clock)
    RolloutInput, Commit, PoolObservation     inputs.py
    AdoptCommit, Rollback, SetStatus, Wait    actions.py
    CommitStatus, StatusBackend, contexts     status.py (+ MemoryBackend)
    make_backend(spec, repo_path, ...)        backends.py: gitnotes | github | gitea | gitlab

A controller pass: ``record = read_record(backend, shas)``, build a ``RolloutInput`` with
``now``, ``approvals_from_record(record)`` and the pools' observations, run ``step``, then carry
out the actions in order, writing each ``SetStatus`` with ``backend.set_status(a.to_status(now))``
and stopping at the first failure.
"""

from gitops_gpu.rollout.actions import Action, AdoptCommit, Rollback, SetStatus, Wait
from gitops_gpu.rollout.backends import TOKEN_ENV, load_token, make_backend
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.record import approvals_from_record
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    PREFLIGHT_CONTEXT,
    SUCCESS,
    CommitStatus,
    MemoryBackend,
    StatusBackend,
    approval_context,
    read_record,
    stage_context,
)

__all__ = [
    "ERROR",
    "FAILURE",
    "PENDING",
    "PREFLIGHT_CONTEXT",
    "SUCCESS",
    "TOKEN_ENV",
    "Action",
    "AdoptCommit",
    "Commit",
    "CommitStatus",
    "MemoryBackend",
    "PoolObservation",
    "Rollback",
    "RolloutInput",
    "SetStatus",
    "StatusBackend",
    "Wait",
    "approval_context",
    "approvals_from_record",
    "load_token",
    "make_backend",
    "read_record",
    "stage_context",
    "step",
]
