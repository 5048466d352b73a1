"""--verify-signatures on `check`, `plan`, `apply` and `controller`, with real signatures: an
untrusted commit is refused before anything reads it; a bad KEYS refuses to start."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from signers import Signers, git, write_keys

from gitops_gpu import cli
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu_dev import paths


@pytest.fixture(scope="module")
def signers() -> Iterator[Signers]:
    s = Signers()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def alice(signers: Signers) -> str:
    return signers.gpg_key("alice")


@pytest.fixture(scope="module")
def mallory(signers: Signers) -> str:
    return signers.gpg_key("mallory")


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    bare, work = tmp_path / "fleet.git", tmp_path / "fleet"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    shutil.copytree(paths.fleet_example(), work)
    git(work, "init", "-q", "-b", "main")
    git(work, "remote", "add", "origin", str(bare))
    return work


@pytest.fixture
def keys(tmp_path: Path, signers: Signers, alice: str) -> Path:
    return write_keys(tmp_path / "KEYS", signers, openpgp={"alice": alice})


def main(*argv: str) -> int:
    return cli.main(list(argv))


def test_check_runs_preflight_only_on_a_trusted_commit(
    fleet: Path, keys: Path, signers: Signers, alice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    signers.commit(fleet, "signed by alice", alice)
    assert main("check", str(fleet), "--verify-signatures", str(keys)) == 0
    out = capsys.readouterr()
    assert f"signed by alice <alice@example.com> (OpenPGP {alice})" in out.err
    assert out.out.startswith("0 error(s)")  # preflight ran


def test_check_refuses_untrusted_commits(
    fleet: Path,
    keys: Path,
    signers: Signers,
    alice: str,
    mallory: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cases = {
        "unsigned": signers.commit(fleet, "unsigned", None),
        f"signed by an unknown key {mallory}": signers.commit(fleet, "mallory", mallory),
    }
    good = signers.commit(fleet, "alice", alice)
    cases["signature check failed: bad signature"] = signers.tamper(fleet, good)
    for reason, sha in cases.items():
        git(fleet, "checkout", "-q", sha)
        assert main("check", str(fleet), "--verify-signatures", str(keys)) == 1, reason
        out = capsys.readouterr().out
        assert out.startswith(f"{sha[:12]}: error: untrusted commit: {reason}"), out
        assert "error(s)" not in out  # preflight never ran


def test_check_json_and_post_status(
    fleet: Path, keys: Path, signers: Signers, capsys: pytest.CaptureFixture[str]
) -> None:
    sha = signers.commit(fleet, "unsigned", None)
    rc = main(
        "check", str(fleet), "--verify-signatures", str(keys), "--format", "json", "--post-status"
    )
    assert rc == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"commit": sha, "trusted": False, "reason": "unsigned", "kind": "unsigned"}
    status = GitNotesBackend(str(fleet), remote=None).latest(sha, "gitops-gpu/preflight")
    assert status is not None
    assert (status.state, status.description) == ("failure", "untrusted commit: unsigned")


def test_check_tag_mode(
    fleet: Path, keys: Path, signers: Signers, alice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sha = signers.commit(fleet, "unsigned, to be tagged", None)
    argv = ("check", str(fleet), "--verify-signatures", str(keys), "--verify-mode", "tag")
    assert main(*argv) == 1
    assert "no annotated tag points at it" in capsys.readouterr().out
    signers.tag(fleet, "release-1", sha, alice)
    assert main(*argv) == 0
    assert "tag release-1 signed by alice" in capsys.readouterr().err
    assert main(*argv[:-1], "tag-and-head") == 1  # the commit itself is unsigned


def test_check_refuses_a_tree_that_is_not_the_commit(
    fleet: Path, keys: Path, signers: Signers, alice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    signers.commit(fleet, "signed", alice)
    (fleet / "fleet.yaml").write_text((fleet / "fleet.yaml").read_text() + "# local edit\n")
    assert main("check", str(fleet), "--verify-signatures", str(keys)) == 2
    assert "uncommitted changes" in capsys.readouterr().err


def test_plan_and_apply_refuse_an_untrusted_commit_before_the_cluster(
    fleet: Path,
    keys: Path,
    signers: Signers,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sha = signers.commit(fleet, "unsigned", None)
    common = ("--repo", str(tmp_path / "fleet.git"), "--cache-dir", str(tmp_path / "cache"))
    # No cluster behind this kubeconfig: refusing must not need one.
    nowhere = ("--kubeconfig", str(tmp_path / "no-kubeconfig"), "--verify-signatures", str(keys))
    for command in ("plan", "apply"):
        assert main(command, *common, *nowhere) == 1
        err = capsys.readouterr().err
        assert f"refused: commit {sha[:12]} is untrusted (unsigned); nothing was done" in err


@pytest.mark.parametrize("command", ["controller", "check", "plan", "apply"])
def test_bad_keys_refuse_to_start(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], fleet: Path
) -> None:
    (tmp_path / "KEYS").mkdir()
    (tmp_path / "KEYS" / "team.asc").write_text("not a key\n")
    args = {
        "controller": ["--repo", "x", "--kubeconfig", str(tmp_path / "none")],
        "check": [str(fleet)],
        "plan": ["--repo", "x", "--kubeconfig", str(tmp_path / "none")],
        "apply": ["--repo", "x", "--kubeconfig", str(tmp_path / "none")],
    }[command]
    if command in ("check",):
        git(fleet, "add", "-A")
        git(fleet, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x")
    if command in ("plan", "apply"):
        args[1] = str(tmp_path / "fleet.git")
        git(fleet, "add", "-A")
        git(fleet, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x")
        git(fleet, "push", "-q", "origin", "main")
        args += ["--cache-dir", str(tmp_path / "cache")]
    assert main(command, *args, "--verify-signatures", str(tmp_path / "KEYS")) == 2
    err = capsys.readouterr().err
    assert "team.asc: not a valid OpenPGP public key" in err
    assert main(command, *args, "--verify-mode", "tag") == 2
    assert "--verify-mode without --verify-signatures" in capsys.readouterr().err
