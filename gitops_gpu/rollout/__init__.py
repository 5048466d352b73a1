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

Import the modules themselves (``from gitops_gpu.rollout import machine``): this package
imports none of them, so a command that needs the pure parts does not load the four HTTP
backends and requests with them (0.1 s of a `check` run).
"""
