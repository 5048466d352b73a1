"""Pull requests against the tracked branch, checked by the controller itself (opt-in,
``--pull-requests``): no CI job needed to see a PR's verdict and what it will do.

At most every ``POLL_SECONDS`` the leader lists the open pull requests on the forge of its status
backend; each head it has not checked yet is fetched into the fleet repo's mirror, judged by the
same preflight as a branch commit (signature checks included), and gets:

- the ``gitops-gpu/preflight`` status on its head (sealed, as every status the controller writes),
  which branch protection can require;
- ONE comment (rollout/pr_comment.py): the verdict and the disruption plan's summary first, the
  object plan and the disruption plan against the PR's merge base folded below, edited in place
  when the head moves; once merged, the same comment says how far the merge commit has come
  ("merged as 1a2b3c4: canary success 14:02, training pending (awaiting approval ...)") until
  every stage has its verdict.

The disruption plan names each pool's nodes from the controller's node informer; GPU workloads
and PDBs are left to ``gitops-gpu plan --base`` (the controller watches pods of the operator's
namespace only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.preflight.disruption import Inventory, inventory, make_disruption
from gitops_gpu.preflight.disruption_text import disruption_text, summary
from gitops_gpu.preflight.plan import make_plan, plan_text
from gitops_gpu.rollout import pr_comment
from gitops_gpu.rollout.forge import ForgeBackend, PullRequest
from gitops_gpu.rollout.phases import format_time
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    PREFLIGHT_CONTEXT,
    SUCCESS,
    CommitStatus,
    stage_context,
)
from gitops_gpu.sealed import SealedRecord
from gitops_gpu.sync.source import GitSource
from gitops_gpu.verdicts import CommitVerdict

log = logging.getLogger(__name__)
POLL_SECONDS = 30.0
MAX_FOLLOWED = 20  # merged pull requests whose rollout the comments follow at once
Checked = Callable[[str], CommitVerdict | None]


def rollout_line(merged: str, stages: Sequence[str], statuses: Iterable[CommitStatus]) -> str:
    """ "merged as 1a2b3c4: canary success 14:02, training pending (awaiting approval ...)"."""
    latest: dict[str, CommitStatus] = {}
    for status in statuses:
        if status.sha == merged:
            latest[status.context] = status
    parts = []
    for stage in stages:
        found = latest.get(stage_context(stage))
        if found is None:
            parts.append(f"{stage} -")
        elif found.state == PENDING:
            why = found.description.removeprefix(f"{stage}: ").split(";")[0]
            parts.append(f"{stage} pending ({why})")
        else:
            parts.append(f"{stage} {found.state} {format_time(found.created_at)[11:16]}")
    return f"merged as `{merged[:12]}`: " + ", ".join(parts)


def finished(merged: str, stages: Sequence[str], statuses: Iterable[CommitStatus]) -> bool:
    said = {s.context: s.state for s in statuses if s.sha == merged}
    return all(said.get(stage_context(s)) in (SUCCESS, FAILURE, ERROR) for s in stages)


def comment(
    pr: PullRequest,
    head: CommitVerdict,
    base: CommitVerdict | None,
    inv: Inventory | None,
    limit: int,
    rollout: str = "",
) -> str:
    """The PR's comment: verdict, what it does to nodes, then the plans folded; once merged,
    how far the merge commit has come, first."""
    verdict = ("preflight passed" if head.ok else "preflight FAILED") + f": {head.summary}"
    lines: list[str] = [f"**{rollout}**"] if rollout else []
    details: list[tuple[str, str]] = []
    if head.compiled is not None and base is not None and base.compiled is not None:
        plan = make_plan(base.compiled, head.compiled)
        impact = make_disruption(plan, base.compiled, head.compiled, inv)
        lines.append(f"**{summary(impact)}**")
        lines.append(f"compared with {pr.base[:12]}, the merge base on the tracked branch")
        details.append((pr_comment.PLAN_TITLE, plan_text(plan)))
        details.append((pr_comment.DISRUPTION_TITLE, disruption_text(impact)))
    elif head.compiled is not None:
        lines.append(f"no plan: the merge base {pr.base[:12]} could not be compiled")
    return pr_comment.render(pr.head, verdict, lines, details, limit)


@dataclass(frozen=True)
class _Made:
    """What a pull request's comment was made of (to say its rollout after the merge)."""

    pr: PullRequest
    head: CommitVerdict
    base: CommitVerdict | None
    inv: Inventory | None


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
        self.made: dict[int, _Made] = {}
        self.merged: dict[int, tuple[str, str]] = {}  # PR -> (merge commit, rollout line said)
        self.poll_seconds = POLL_SECONDS
        self._last = float("-inf")

    @property
    def limit(self) -> int:
        return pr_comment.LIMITS.get(self.backend.name, pr_comment.LIMITS["github"])

    def step(self, statuses: Sequence[CommitStatus] = ()) -> int:
        """Check the pull requests whose head moved, and say on each merged one how far its
        commit has come (``statuses``: the pass's trusted record); the number checked. Errors
        are logged and retried on the next step: a forge hiccup must not fail the pass."""
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
            self._closed(gone)
        self._follow(statuses)
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
        body = comment(pr, head, base, inv, self.limit)
        done = self.backend.upsert_comment(pr.number, body)
        self.made[pr.number] = _Made(pr, head, base, inv)
        log.info(
            "pull request %d: preflight %s on %s, comment %s", pr.number, state, pr.head[:12], done
        )
        return True

    def _closed(self, number: int) -> None:
        """A pull request left the open list: follow its merge commit, if it was merged."""
        try:
            sha = self.backend.merged_as(number)
        except GitopsGpuError as exc:
            log.warning("pull request %d: its merge not read: %s", number, exc)
            sha = None
        if sha is None or number not in self.made:
            self.made.pop(number, None)
            return
        self.merged[number] = (sha, "")
        while len(self.merged) > MAX_FOLLOWED:  # the oldest merge is followed no more
            oldest = next(iter(self.merged))
            del self.merged[oldest]
            self.made.pop(oldest, None)

    def _follow(self, statuses: Sequence[CommitStatus]) -> None:
        for number, (sha, said) in list(self.merged.items()):
            made = self.made[number]
            compiled = made.head.compiled
            stages = [s.name for s in compiled.stages] if compiled is not None else []
            line = rollout_line(sha, stages, statuses)
            if line == said:
                continue
            try:
                body = comment(made.pr, made.head, made.base, made.inv, self.limit, line)
                self.backend.upsert_comment(number, body)
            except GitopsGpuError as exc:
                log.warning("pull request %d: comment not updated: %s", number, exc)
                continue
            self.merged[number] = (sha, line)
            if finished(sha, stages, statuses):
                del self.merged[number], self.made[number]

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
