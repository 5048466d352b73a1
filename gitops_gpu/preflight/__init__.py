"""Preflight: every check a fleet repo commit must pass before it rolls out (docs/fleet-repo.md).

Public surface: :func:`run_preflight` -> :class:`PreflightResult` (findings, compiled fleet,
plan against ``--base``); :class:`Finding` and :class:`Severity` from ``findings``.
"""

from __future__ import annotations

from gitops_gpu.preflight.findings import CODES, Finding, Severity
from gitops_gpu.preflight.run import PreflightResult, run_preflight

__all__ = ["CODES", "Finding", "PreflightResult", "Severity", "run_preflight"]
