"""--verify-signatures on the real testbed: only commits signed by a key in KEYS reach the
cluster. Real gpg and ssh-keygen keys, commits signed by git, controller passes driven here."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e_harness import Env, fast_gates, set_driver
from signers import Signers, git, write_keys

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.controller import Controller
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.status import PREFLIGHT_CONTEXT
from gitops_gpu.sync.trust import Verifier

pytestmark = pytest.mark.e2e
STAGES = ("canary", "inference", "training")


@pytest.fixture(scope="module")
def signers() -> Iterator[Signers]:
    s = Signers()
    try:
        yield s
    finally:
        s.close()


def run_until(ctl: Controller, what: str, done: Callable[[], bool], timeout: float = 300) -> int:
    """Controller passes until ``done``; every pass must succeed. Returns the passes run."""
    deadline, passes = time.monotonic() + timeout, 0
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        report = ctl.run_pass()
        passes += 1
        assert report.result in ("ok", "held"), report.error  # held: a force-push, on purpose
        time.sleep(0.2)
    return passes


def drivers(env: Env) -> dict[str, tuple[str, str]]:
    return {
        d["metadata"]["name"]: (
            d["metadata"]["resourceVersion"],
            d["metadata"]["annotations"][names.COMMIT_ANNOTATION],
        )
        for d in env.tb.client.list(*names.NVIDIA_DRIVER_API)["items"]
    }


def untrusted_events(env: Env, sha: str) -> list[str]:
    return [
        e["message"]
        for e in env.tb.client.list("v1", "Event", namespace="default")["items"]
        if e["reason"] == "UntrustedCommit" and sha[:12] in e["message"]
    ]


@pytest.mark.timeout(900)  # a loaded CI machine: its waits add up past the default
def test_only_trusted_commits_reach_the_cluster(
    env: Env, signers: Signers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, mallory = signers.gpg_key("alice"), signers.gpg_key("mallory")
    old = signers.gpg_key("old", expired=True)
    bob_key, bob_pub = signers.ssh_key("bob")
    keys = write_keys(
        tmp_path / "KEYS",
        signers,
        openpgp={"alice": alice, "old": old},
        ssh={"bob@example.com": bob_pub},
    )
    work = env.remote.work
    # The fixture's first commit is unsigned: the controller must skip it and roll out this one.
    first = signers.commit(work, "fast gates (signed by alice)", alice, fast_gates())
    env.start_nodes()
    cfg = Config(
        repo=env.remote.url, cache_dir=tmp_path / "ctl", interval=0.3, verifier=Verifier(keys)
    )
    ctl = Controller(cfg, env.tb.client)
    ctl.start_informers()
    try:
        run_until(ctl, "the signed commit rolls out", lambda: _all_success(env, first))
        initial = git(work, "rev-parse", "HEAD~1")  # the fixture's own commit, unsigned
        assert _description(env, initial) == "untrusted commit: unsigned"
        assert env.context_state(first, PREFLIGHT_CONTEXT) == "success"
        before = drivers(env)
        assert {commit for _rv, commit in before.values()} == {first}

        # Untrusted commits: each refused with its reason, nothing applied, the rollout holds.
        signed_bump = signers.commit(
            work, "bump (alice)", alice, set_driver("580.142.01"), push=False
        )
        tampered = signers.tamper(work, signed_bump, push=False)
        git(work, "reset", "-q", "--hard", first)
        cases: list[tuple[str, str]] = [
            (signers.commit(work, "bump, unsigned", None, set_driver("580.142.01")), "unsigned"),
            (
                signers.commit(work, "bump (mallory)", mallory, set_driver("580.142.01")),
                f"signed by an unknown key {mallory}",
            ),
            (
                signers.commit(work, "bump (expired key)", old, set_driver("580.142.01")),
                f"signature by an expired key {old}",
            ),
        ]
        cases.append((tampered, "signature check failed: bad signature"))
        for sha, reason in cases:
            git(work, "reset", "-q", "--hard", sha)
            git(work, "push", "-q", "--force", "origin", "main")
            run_until(ctl, f"{reason}: preflight failure", _refused(env, sha))
            status = env.record.latest(sha, PREFLIGHT_CONTEXT)
            assert status is not None and status.description.startswith(
                f"untrusted commit: {reason}"
            ), status
            assert all(env.state(sha, s) is None for s in STAGES)
            assert len(untrusted_events(env, sha)) == 1, untrusted_events(env, sha)
            # `check` on the same commit says the same.
            assert main(["check", str(work), "--verify-signatures", str(keys)]) == 1
            assert f"untrusted commit: {reason}" in capsys.readouterr().out
        ctl.run_pass()
        assert drivers(env) == before  # nothing was applied: the rollout held at `first`
        assert _count(ctl, "unsigned") == 2 and _count(ctl, "unknown_key") == 1  # + initial
        assert _count(ctl, "expired_key") == 1 and _count(ctl, "bad_signature") == 1

        # The next trusted commit (SSH-signed) rolls forward once a person accepts the
        # force-pushed history (every case above replaced the last).
        git(work, "reset", "-q", "--hard", first)
        bump = signers.commit(work, "bump (bob, ssh)", bob_key, set_driver("580.142.01"))
        assert main(["check", str(work), "--verify-signatures", str(keys)]) == 0
        report = ctl.run_pass()
        assert report.result == "held" and "not a descendant" in report.held, report
        accept = ["accept-history", bump, "--repo", env.remote.url]
        assert main([*accept, "--kubeconfig", env.tb.kubeconfig]) == 0
        capsys.readouterr()
        run_until(ctl, "the trusted bump rolls out", lambda: _all_success(env, bump))

        # Rotation: bob leaves. His next commit is refused; the one the cluster runs is not
        # re-judged (no rollback, its preflight status stays), even by a restarted controller.
        write_keys(keys, signers, openpgp={"alice": alice})
        late = signers.commit(work, "bob, after leaving", bob_key, set_driver("580.159.03"))
        run_until(ctl, "bob's commit refused", _refused(env, late))
        assert "untrusted commit: signed by an unknown key SHA256:" in _description(env, late)
        restarted = Controller(
            Config(
                repo=env.remote.url,
                cache_dir=tmp_path / "ctl2",
                interval=0.3,
                verifier=Verifier(keys),
            ),
            env.tb.client,
        )
        restarted.start_informers()
        try:
            for c in (ctl, restarted):
                assert c.run_pass().result == "ok"
            assert restarted.checked(bump).ok and not restarted.checked(late).ok
        finally:
            restarted.stop_informers()
        assert env.context_state(bump, PREFLIGHT_CONTEXT) == "success"
        assert {commit for _rv, commit in drivers(env).values()} == {bump}
        fixed = signers.commit(work, "alice re-signs the bump", alice, set_driver("580.159.03"))
        run_until(ctl, "alice's commit rolls forward", lambda: _all_success(env, fixed))
    finally:
        ctl.stop_informers()


def _all_success(env: Env, sha: str) -> bool:
    return all(env.state(sha, s) == "success" for s in STAGES)


def _refused(env: Env, sha: str) -> Callable[[], bool]:
    return lambda: env.context_state(sha, PREFLIGHT_CONTEXT) == "failure"


def _description(env: Env, sha: str) -> str:
    st = env.record.latest(sha, PREFLIGHT_CONTEXT)
    return st.description if st else ""


def _count(ctl: Controller, reason: str) -> float:
    value = ctl.metrics.registry.get_sample_value(
        "gitops_gpu_untrusted_commits_total", {"reason": reason}
    )
    return value or 0.0


def test_keys_broken_while_running_fail_the_pass_and_apply_nothing(
    env: Env, signers: Signers, tmp_path: Path
) -> None:
    carol = signers.gpg_key("carol")
    keys = write_keys(tmp_path / "KEYS", signers, openpgp={"carol": carol})
    sha = signers.commit(env.remote.work, "signed by carol", carol, fast_gates())
    cfg = Config(
        repo=env.remote.url, cache_dir=tmp_path / "ctl", interval=0.3, verifier=Verifier(keys)
    )
    ctl = Controller(cfg, env.tb.client)
    ctl.start_informers()
    try:
        (keys / "carol.asc").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\ngarbage\n")
        report = ctl.run_pass()
        assert report.result == "error"
        assert "carol.asc: not a valid OpenPGP public key" in report.error
        assert env.context_state(sha, PREFLIGHT_CONTEXT) is None  # nothing written
        assert drivers(env) == {}  # nothing applied
        # Fixed: the next pass judges the commit. A commit asked about before it was fetched
        # (another thread racing the poll) is left unjudged, never failed.
        (keys / "carol.asc").write_text(signers.export(carol))
        assert ctl.run_pass().result == "ok"
        assert env.context_state(sha, PREFLIGHT_CONTEXT) == "success"
        later = signers.commit(env.remote.work, "pushed, not fetched", carol, push=False)
        assert ctl.checked(later) is None
        assert env.context_state(later, PREFLIGHT_CONTEXT) is None
    finally:
        ctl.stop_informers()


def test_a_signed_tag_pushed_after_its_commit_releases_it(
    env: Env, signers: Signers, tmp_path: Path
) -> None:
    # (the module shares one GNUPGHOME: a fresh name, not another test's key)
    releaser = signers.gpg_key("releaser")
    keys = write_keys(tmp_path / "KEYS", signers, openpgp={"releaser": releaser})
    work = env.remote.work
    env.start_nodes()
    cfg = Config(
        repo=env.remote.url,
        cache_dir=tmp_path / "ctl",
        interval=0.3,
        verifier=Verifier(keys, mode="tag"),
    )
    ctl = Controller(cfg, env.tb.client)
    ctl.start_informers()
    try:
        release = signers.commit(work, "fast gates, to be tagged", None, fast_gates())
        run_until(ctl, "the untagged commit is held back", _refused(env, release))
        assert _description(env, release).startswith("untrusted commit: no annotated tag")
        assert drivers(env) == {}
        # the release flow: the branch does not move again, only the signed tag arrives
        signers.tag(work, "v1", release, releaser)
        run_until(ctl, "the tagged commit rolls out", lambda: _all_success(env, release))
        assert env.context_state(release, PREFLIGHT_CONTEXT) == "success"
    finally:
        ctl.stop_informers()


def test_a_commit_annotation_on_a_live_object_is_no_proof_of_trust(
    env: Env, signers: Signers, tmp_path: Path
) -> None:
    """Patch rights on one NVIDIADriver used to be enough: annotate it with an unsigned commit
    before pushing it, and the controller took the commit as already running (trusted when
    applied). Only the controller's ledger of what it adopted counts now."""
    dora = signers.gpg_key("dora")  # a name no other test of the session made
    keys = write_keys(tmp_path / "KEYS", signers, openpgp={"dora": dora})
    work = env.remote.work
    first = signers.commit(work, "fast gates (dora)", dora, fast_gates())
    env.start_nodes()
    cfg = Config(
        repo=env.remote.url, cache_dir=tmp_path / "ctl", interval=0.3, verifier=Verifier(keys)
    )
    ctl = Controller(cfg, env.tb.client)
    ctl.start_informers()
    try:
        run_until(ctl, "the signed commit rolls out", lambda: _all_success(env, first))
        unsigned = signers.commit(
            work, "bump, unsigned", None, set_driver("580.142.01"), push=False
        )
        env.tb.client.patch(
            *names.NVIDIA_DRIVER_API,
            "canary",
            {"metadata": {"annotations": {names.COMMIT_ANNOTATION: unsigned}}},
        )
        git(work, "push", "-q", "origin", "main")
        run_until(ctl, "the unsigned commit refused", _refused(env, unsigned))
        assert _description(env, unsigned) == "untrusted commit: unsigned"
        assert len(untrusted_events(env, unsigned)) == 1
        for _ in range(5):
            ctl.run_pass()
            assert all(env.state(unsigned, s) is None for s in STAGES)
            others = {p: c for p, (_rv, c) in drivers(env).items() if p != "canary"}
            assert set(others.values()) == {first}, others
    finally:
        ctl.stop_informers()
