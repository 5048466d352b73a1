"""Which record statuses count: sealed verdicts, approvals by approvers, the ledger's own."""

from __future__ import annotations

from gitops_gpu.rollout.authentic import Approvers, Authenticator, with_ledger
from gitops_gpu.rollout.seal import Keyring, generate, parse_public_keys
from gitops_gpu.rollout.status import CommitStatus, approval_context, stage_context

SHA = "c" * 40
CTL = generate("controller")
ALICE = generate("alice")
CONTROLLERS = Keyring(parse_public_keys(CTL.public_line(), "ctl"))
ALICE_RING = Keyring(parse_public_keys(ALICE.public_line(), "alice"))


def st(context: str, state: str, at: float, text: str = "", creator: str = "") -> CommitStatus:
    return CommitStatus(SHA, context, state, text, "", at, creator=creator)


def test_forged_and_foreign_sealed_verdicts_are_ignored_with_the_reason() -> None:
    canary = stage_context("canary")
    genuine = CTL.seal(st(canary, "pending", 10, "canary: rolling out"))
    forged = st(canary, "success", 20, "canary: passed")
    foreign = generate("x").seal(st(canary, "success", 30))
    ci = st("ci/build", "success", 5)
    judged = Authenticator(CONTROLLERS).judge([genuine, forged, foreign, ci])
    assert [s.state for s in judged.trusted if s.context == canary] == ["pending"]
    assert ci in judged.trusted  # not ours: passed through
    reasons = [i.reason for i in judged.ignored]
    assert reasons[0] == "unsigned (not written by a trusted controller)"
    assert reasons[1].startswith("sealed by an unknown key")


def test_reordered_lines_are_put_back_in_sealed_time_order() -> None:
    canary = stage_context("canary")
    failed = CTL.seal(st(canary, "failure", 200, "canary: 1 node unhealthy"))
    passed = CTL.seal(st(canary, "success", 100, "canary: passed"))
    judged = Authenticator(CONTROLLERS).judge([failed, passed])  # an attacker swapped them
    assert [s.state for s in judged.trusted] == ["success", "failure"]


def test_an_approval_counts_only_from_an_approver() -> None:
    ctx = approval_context("fleet")
    auth = Authenticator(CONTROLLERS, {"fleet": Approvers(frozenset({"alice"}), ALICE_RING)})
    by_forge = st(ctx, "success", 1, "approved by alice", creator="alice")
    by_ci = st(ctx, "success", 2, "approved", creator="ci-bot")
    by_key = ALICE.seal(st(ctx, "success", 3, "approved by alice"))
    by_controller_key = CTL.seal(st(ctx, "success", 4, "approved"))
    for status, counts in ((by_forge, True), (by_ci, False), (by_key, True)):
        assert bool(auth.judge([status]).approvals()) is counts, status
    judged = auth.judge([by_controller_key, by_ci])
    assert not judged.approvals()  # named approvers: the controller's key is not one of them
    assert "posted by ci-bot: not an approver of stage fleet" in judged.ignored[1].reason


def test_without_approvers_only_the_controller_key_approves() -> None:
    ctx = approval_context("fleet")
    auth = Authenticator(CONTROLLERS)
    judged = auth.judge([st(ctx, "success", 1, creator="someone")])
    assert not judged.approvals()
    assert judged.ignored[0].reason == (
        "approval unsigned: stage fleet names no approvers, so only the controller's key can "
        "approve (gitops-gpu approve)"
    )
    assert auth.judge([CTL.seal(st(ctx, "success", 1))]).approvals() == {(SHA, "fleet")}


def test_revocation_counts_from_an_approver_and_not_from_anyone_else() -> None:
    ctx = approval_context("fleet")
    auth = Authenticator(CONTROLLERS, {"fleet": Approvers(frozenset({"alice", "bob"}))})
    approved = st(ctx, "success", 1, creator="alice")
    revoked = st(ctx, "failure", 2, "revoked", creator="bob")
    stranger = st(ctx, "failure", 3, "revoked", creator="mallory")
    assert not auth.judge([approved, revoked]).approvals()
    assert auth.judge([approved, stranger]).approvals() == {(SHA, "fleet")}
    # A stage success is not an approval of that stage.
    success = CTL.seal(st(stage_context("fleet"), "success", 1))
    assert not auth.judge([success]).approvals()


def test_own_verdicts_count_only_from_the_ledger_and_deleted_ones_come_back() -> None:
    canary, fleet = stage_context("canary"), stage_context("fleet")
    in_ledger = CTL.seal(st(canary, "success", 100, "canary: passed"))
    replayed = CTL.seal(st(fleet, "success", 90, "fleet: passed"))  # sealed, never in the ledger
    deleted = CTL.seal(st(canary, "failure", 300, "canary: rolled back"))
    judged = Authenticator(CONTROLLERS).judge([in_ledger, replayed])
    own = {canary, fleet}.__contains__
    merged, restore = with_ledger(judged, [in_ledger, deleted], own)
    assert [(s.context, s.state) for s in merged.trusted] == [
        (canary, "success"),
        (canary, "failure"),
    ]
    assert restore == [deleted]
    assert merged.ignored[0].status == replayed
    assert "ledger does not hold" in merged.ignored[0].reason
    # Another cluster's verdicts are not this ledger's to vouch for: the seal is enough.
    merged, _ = with_ledger(judged, [in_ledger], {canary}.__contains__)
    assert replayed in merged.trusted


def test_team_approvers_count_when_the_forge_says_the_poster_is_a_member() -> None:
    ctx = approval_context("fleet")
    asked: list[tuple[str, str]] = []

    def member(team: str, user: str) -> bool:
        asked.append((team, user))
        return (team, user) == ("gpu-org/platform", "alice")

    allowed = {"fleet": Approvers(teams=frozenset({"gpu-org/platform"}))}
    auth = Authenticator(CONTROLLERS, allowed, member)
    assert auth.judge([st(ctx, "success", 1, creator="alice")]).approvals() == {(SHA, "fleet")}
    judged = auth.judge([st(ctx, "success", 1, creator="bob")])
    assert not judged.approvals() and "not an approver of stage fleet" in judged.ignored[0].reason
    assert not auth.judge([st(ctx, "success", 1)]).approvals()  # no creator: nobody to ask
    assert asked == [("gpu-org/platform", "alice"), ("gpu-org/platform", "bob")]
    # Without a forge to ask (git notes), a team approves nothing.
    assert (
        not Authenticator(CONTROLLERS, allowed).judge([st(ctx, "success", 1, "alice")]).approvals()
    )
