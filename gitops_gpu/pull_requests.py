"""Pull requests against the tracked branch, checked by the controller itself (opt-in,
``--pull-requests``): no CI job needed to see a PR's verdict and what it will do.

At most every ``POLL_SECONDS`` the leader lists the open pull requests on the forge of its status
backend; each head it has not checked yet is fetched into the fleet repo's mirror, judged by the
same preflight as a branch commit (signature checks included), and gets:

- the ``gitops-gpu/preflight`` status on its head (sealed, as every status the controller writes),
  which branch protection can require;
- ONE comment (rollout/pr_comment.py): the verdict and the disruption plan's summary first, the
  object plan and the disruption plan against the PR's merge base folded below, edited in place
  when the head moves.

The disruption plan names each pool's nodes from the controller's node informer; GPU workloads
and PDBs are left to ``gitops-gpu plan --base`` (the controller watches pods of the operator's
namespace only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.preflight.disruption import Inventory, inventory, make_disruption
from gitops_gpu.preflight.disruption_text import disruption_text, summary
from gitops_gpu.preflight.plan import make_plan, plan_text
from gitops_gpu.rollout import pr_comment
from gitops_gpu.rollout.forge import ForgeBackend, PullRequest
from gitops_gpu.rollout.status import FAILURE, PREFLIGHT_CONTEXT, SUCCESS, CommitStatus
from gitops_gpu.sealed import SealedRecord
from gitops_gpu.sync.source import GitSource
from gitops_gpu.verdicts import CommitVerdict

log = logging.getLogger(__name__)
POLL_SECONDS = 30.0
Checked = Callable[[str], CommitVerdict | None]


def comment(
    pr: PullRequest,
    head: CommitVerdict,
    base: CommitVerdict | None,
    inv: Inventory | None,
    limit: int,
) -> str:
    """The PR's comment: verdict, what it does to nodes, then the plans folded."""
    verdict = ("preflight passed" if head.ok else "preflight FAILED") + f": {head.summary}"
    lines: list[str] = []
    details: list[tuple[str, str]] = []
    if head.compiled is not None and base is not None and base.compiled is not None:
        plan = make_plan(base.compiled, head.compiled)
        impact = make_disruption(plan, base.compiled, head.compiled, inv)
        lines.append(f"**{summary(impact)}**")
        lines.append(f"compared with {pr.base[:12]}, the merge base on the tracked branch")
        details.append(("Plan: objects and fields", plan_text(plan)))
        details.append(("Disruption: nodes and workloads", disruption_text(impact)))
    elif head.compiled is not None:
        lines.append(f"no plan: the merge base {pr.base[:12]} could not be compiled")
    return pr_comment.render(pr.head, verdict, lines, details, limit)


class PullRequestChecker:
    def __init__(
        self,
        backend: ForgeBackend,
        source: GitSource,
        checked: Checked,
        record: SealedRecord,
        branch: str,
        nodes: Callable[[], Iterable[Mapping[str, Any]]],
        clock: Callable[[], float],
    ) -> None:
        self.backend, self.source, self.checked, self.record = backend, source, checked, record
        self.branch, self.nodes, self.clock = branch, nodes, clock
        self.done: dict[int, str] = {}  # PR -> the head checked last
        self.poll_seconds = POLL_SECONDS
        self._last = float("-inf")

    def step(self) -> int:
        """Check the pull requests whose head moved; the number checked. Errors are logged
        and retried on the next step: a forge hiccup must not fail the rollout's pass."""
        now = self.clock()
        if now - self._last < self.poll_seconds:
            return 0
        self._last = now
        try:
            pulls = self.backend.open_pulls(self.branch)
        except GitopsGpuError as exc:
            log.warning("pull requests not listed: %s", exc)
            return 0
        checked = 0
        for pr in pulls:
            if self.done.get(pr.number) == pr.head:
                continue
            try:
                if self._check(pr):
                    self.done[pr.number] = pr.head
                    checked += 1
            except GitopsGpuError as exc:
                log.warning(
                    "pull request %d (%s) not checked yet: %s", pr.number, pr.head[:12], exc
                )
        for gone in set(self.done) - {p.number for p in pulls}:
            del self.done[gone]
        return checked

    def _check(self, pr: PullRequest) -> bool:
        self.source.fetch_ref(pr.ref, pr.head)
        head = self.checked(pr.head)
        if head is None:
            return False  # unjudged (infrastructure): the next step tries again
        base = self.checked(pr.base)
        inv = self._inventory(head.compiled, base.compiled if base else None)
        state = SUCCESS if head.ok else FAILURE
        self.record.write(
            CommitStatus(pr.head, PREFLIGHT_CONTEXT, state, head.summary, created_at=self.clock())
        )
        limit = pr_comment.LIMITS.get(self.backend.name, pr_comment.LIMITS["github"])
        done = self.backend.upsert_comment(pr.number, comment(pr, head, base, inv, limit))
        log.info(
            "pull request %d: preflight %s on %s, comment %s", pr.number, state, pr.head[:12], done
        )
        return True

    def _inventory(
        self, head: CompiledFleet | None, base: CompiledFleet | None
    ) -> Inventory | None:
        if head is None:
            return None
        pools = {
            p: t
            for f in (base, head)
            if f is not None
            for c in f.clusters.values()
            for p, t in c.pools.items()
        }
        return inventory(pools, self.nodes(), (), ())
