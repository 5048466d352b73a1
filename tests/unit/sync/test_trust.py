"""Signature verification with real keys: gpg and ssh-keygen keys made here, commits and tags
signed by git, judged by gitops_gpu.sync.trust through git verify-commit / verify-tag."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from signers import Signers, git, write_keys

from gitops_gpu.errors import SourceError
from gitops_gpu.sync.keys import TrustConfigError
from gitops_gpu.sync.trust import Mode, Verifier


@pytest.fixture(scope="module")
def signers() -> Iterator[Signers]:
    s = Signers()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def keys(signers: Signers) -> dict[str, str]:
    return {
        "alice": signers.gpg_key("alice"),
        "mallory": signers.gpg_key("mallory"),  # never in KEYS
        "old": signers.gpg_key("old", expired=True),
        "gone": signers.gpg_key("gone"),  # revoked below
    }


@pytest.fixture(scope="module")
def ssh(signers: Signers) -> dict[str, tuple[Path, str]]:
    return {"eve": signers.ssh_key("eve"), "trudy": signers.ssh_key("trudy")}


@pytest.fixture
def repo(tmp_path: Path, signers: Signers) -> Path:
    bare, work = tmp_path / "fleet.git", tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    git(work, "remote", "add", "origin", str(bare))
    (work / "fleet.yaml").write_text("kind: Fleet\n")
    signers.commit(work, "first", None)
    return work


@pytest.fixture
def keys_dir(
    tmp_path: Path, signers: Signers, keys: dict[str, str], ssh: dict[str, tuple[Path, str]]
) -> Path:
    return write_keys(
        tmp_path / "KEYS",
        signers,
        openpgp={"alice": keys["alice"], "old": keys["old"], "gone": keys["gone"]},
        ssh={"eve@example.com": ssh["eve"][1]},
    )


def test_head_mode_verdicts(
    repo: Path,
    keys_dir: Path,
    signers: Signers,
    keys: dict[str, str],
    ssh: dict[str, tuple[Path, str]],
) -> None:
    v = Verifier(keys_dir, "head")
    alice = signers.commit(repo, "alice signs", keys["alice"])
    eve = signers.commit(repo, "eve signs (ssh)", ssh["eve"][0])
    unsigned = signers.commit(repo, "nobody signs", None)
    mallory = signers.commit(repo, "unknown gpg key", keys["mallory"])
    trudy = signers.commit(repo, "unknown ssh key", ssh["trudy"][0])
    old = signers.commit(repo, "expired key", keys["old"])

    ok = v.verify(repo, alice)
    assert ok.trusted and ok.kind == "trusted"
    assert ok.reason == f"signed by alice <alice@example.com> (OpenPGP {keys['alice']})"
    ok_ssh = v.verify(repo, eve)
    assert ok_ssh.trusted and ok_ssh.reason.startswith("signed by eve@example.com (SSH ED25519")

    assert (v.verify(repo, unsigned).trusted, v.verify(repo, unsigned).reason) == (
        False,
        "unsigned",
    )
    bad = v.verify(repo, mallory)
    assert not bad.trusted and bad.kind == "unknown_key"
    assert bad.reason == f"signed by an unknown key {keys['mallory']}"
    fp = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{ssh['trudy'][0]}.pub"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    assert v.verify(repo, trudy).reason == f"signed by an unknown key {fp}"
    # An SSH key whose allowed-signers entry ended (valid-before in the past).
    (keys_dir / "allowed_signers").write_text(
        f'eve@example.com namespaces="git",valid-before="20200101" {ssh["eve"][1]}\n'
    )
    ended = v.verify(repo, eve)
    assert (ended.trusted, ended.kind) == (False, "expired_key")
    assert ended.reason.startswith("signature by an expired key SHA256:")
    expired = v.verify(repo, old)
    assert not expired.trusted and expired.kind == "expired_key"
    assert expired.reason == f"signature by an expired key {keys['old']}"


def test_revoked_key(tmp_path: Path, repo: Path, signers: Signers, keys: dict[str, str]) -> None:
    sha = signers.commit(repo, "signed before the key was revoked", keys["gone"])
    before = Verifier(write_keys(tmp_path / "K1", signers, openpgp={"gone": keys["gone"]}))
    assert before.verify(repo, sha).trusted
    (tmp_path / "K2").mkdir()
    (tmp_path / "K2" / "gone.asc").write_text(signers.revoke(keys["gone"]))
    after = Verifier(tmp_path / "K2").verify(repo, sha)
    assert (after.trusted, after.kind) == (False, "revoked_key")
    assert after.reason == f"signature by a revoked key {keys['gone']}"


@pytest.mark.parametrize("who", ["alice", "eve"])
def test_tampered_commit_keeping_its_signature_fails(
    who: str,
    repo: Path,
    keys_dir: Path,
    signers: Signers,
    keys: dict[str, str],
    ssh: dict[str, tuple[Path, str]],
) -> None:
    key: str | Path = keys["alice"] if who == "alice" else ssh["eve"][0]
    good = signers.commit(repo, "driver 580.126.20", key)
    forged = signers.tamper(repo, good)
    raw = git(repo, "cat-file", "commit", forged)
    assert "gpgsig" in raw and "(tampered)" in raw
    v = Verifier(keys_dir)
    assert v.verify(repo, good).trusted
    verdict = v.verify(repo, forged)
    assert (verdict.trusted, verdict.kind) == (False, "bad_signature")
    assert verdict.reason.startswith("signature check failed")


def test_tag_modes(
    repo: Path,
    keys_dir: Path,
    signers: Signers,
    keys: dict[str, str],
    ssh: dict[str, tuple[Path, str]],
) -> None:
    signed = signers.commit(repo, "signed", keys["alice"])
    unsigned = signers.commit(repo, "unsigned", None)
    tag, both = Verifier(keys_dir, "tag"), Verifier(keys_dir, "tag-and-head")
    assert tag.verify(repo, unsigned).reason == "no annotated tag points at it"
    signers.tag(repo, "v1-unsigned", unsigned, None)
    assert tag.verify(repo, unsigned).reason == "tag v1-unsigned: unsigned"
    signers.tag(repo, "v1-mallory", unsigned, keys["mallory"])
    signers.tag(repo, "v1-eve", unsigned, ssh["eve"][0])  # a new tag: the cache sees it
    ok = tag.verify(repo, unsigned)
    assert ok.trusted and ok.reason.startswith("tag v1-eve signed by eve@example.com")
    # tag-and-head: the commit must be signed too.
    assert both.verify(repo, unsigned).reason == "unsigned"
    signers.tag(repo, "v2", signed, keys["alice"])
    assert both.verify(repo, signed).trusted
    assert not both.verify(repo, git(repo, "rev-parse", "HEAD~2")).trusted  # "first": unsigned


@pytest.mark.parametrize("mode", ["head", "tag", "tag-and-head"])
def test_a_commit_not_in_the_repo_is_no_verdict(mode: Mode, repo: Path, keys_dir: Path) -> None:
    """Asked about a commit before it was fetched (another thread, a race): no verdict, so none
    is cached or reported; the same commit is judged once it is there."""
    v = Verifier(keys_dir, mode)
    with pytest.raises(SourceError, match="is not in"):
        v.verify(repo, "0123456789abcdef0123456789abcdef01234567")
    assert v.verify(repo, git(repo, "rev-parse", "HEAD")).reason in (
        "unsigned",
        "no annotated tag points at it",
    )


def test_rotation_takes_effect_at_the_next_check(
    repo: Path,
    keys_dir: Path,
    signers: Signers,
    keys: dict[str, str],
    ssh: dict[str, tuple[Path, str]],
) -> None:
    v = Verifier(keys_dir)
    sha = signers.commit(repo, "alice signs", keys["alice"])
    assert v.verify(repo, sha).trusted
    (keys_dir / "alice.asc").unlink()  # alice leaves the team
    assert v.verify(repo, sha).reason == f"signed by an unknown key {keys['alice']}"
    (keys_dir / "alice.asc").write_text(signers.export(keys["alice"]))  # and comes back
    assert v.verify(repo, sha).trusted
    checks = v.checks
    assert v.verify(repo, sha).trusted and v.checks == checks  # cached while KEYS is unchanged
    # A KEYS that turns malformed while running stops verification loudly (fail closed).
    (keys_dir / "broken.asc").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\nnope\n")
    with pytest.raises(TrustConfigError, match=r"broken\.asc: not a valid OpenPGP public key"):
        v.verify(repo, sha)


def test_the_repos_own_gpg_settings_are_ignored(
    repo: Path, keys_dir: Path, signers: Signers, tmp_path: Path
) -> None:
    """A gpg.program in the checked repo's config (or the user's) cannot vouch for a commit."""
    liar = tmp_path / "liar"
    liar.write_text(
        "#!/bin/sh\necho '[GNUPG:] GOODSIG 0000000000000000 liar' >&2\n"
        "echo '[GNUPG:] VALIDSIG " + "A" * 40 + "' >&2\nexit 0\n"
    )
    liar.chmod(0o755)
    git(repo, "config", "gpg.program", str(liar))
    git(repo, "config", "gpg.ssh.allowedSignersFile", "/dev/null")
    mallory = signers.gpg_key("mallory2")
    sha = signers.commit(repo, "mallory", mallory)
    verdict = Verifier(keys_dir).verify(repo, sha)
    assert verdict.reason == f"signed by an unknown key {mallory}"


# -- KEYS that must stop the controller from starting -------------------------------------------
def test_bad_keys_refuse_to_load(tmp_path: Path, signers: Signers, keys: dict[str, str]) -> None:
    def refused(path: Path, match: str) -> None:
        with pytest.raises(TrustConfigError, match=match):
            Verifier(path)

    refused(tmp_path / "missing", "no such file or directory")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "no key files in it")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "alice.asc").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END\n")
    refused(bad, r"alice\.asc: not a valid OpenPGP public key")
    (bad / "alice.asc").unlink()
    (bad / "allowed_signers").write_text("eve@example.com ssh-ed25519 not-base64!\n")
    refused(bad, "allowed_signers line 1: the ssh-ed25519 key is not base64")
    (bad / "allowed_signers").write_text("# comment\n\njust some words\n")
    refused(bad, "allowed_signers line 3: not an allowed-signers entry")
    (bad / "allowed_signers").write_text("eve ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==\n")
    refused(bad, "allowed_signers line 1: ssh-keygen cannot read the ssh-ed25519 key")
    (bad / "allowed_signers").unlink()
    secret = subprocess.run(
        ["gpg", "--batch", "--armor", "--export-secret-keys", keys["alice"]],
        env=signers.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (bad / "alice.asc").write_text(secret)
    refused(bad, r"alice\.asc holds a PRIVATE key")
    (bad / "alice.asc").unlink()
    (bad / "dangling").symlink_to(tmp_path / "nowhere")
    refused(bad, "dangling is not a regular file")
    ok = write_keys(tmp_path / "ok", signers, openpgp={"alice": keys["alice"]})
    with pytest.raises(TrustConfigError, match="--verify-mode 'HEAD'"):
        Verifier(ok, "HEAD")  # type: ignore[arg-type]


def test_missing_tools_refuse_to_load(
    tmp_path: Path, signers: Signers, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = write_keys(tmp_path / "ok", signers, openpgp={"alice": keys["alice"]})
    only_git = tmp_path / "bin"
    only_git.mkdir()
    (only_git / "git").symlink_to("/usr/bin/git")
    monkeypatch.setenv("PATH", str(only_git))
    with pytest.raises(TrustConfigError, match="needs gpg, ssh-keygen on PATH"):
        Verifier(ok)
    assert os.environ["PATH"] == str(only_git)


def test_a_mounted_secret_and_its_atomic_update(
    tmp_path: Path, repo: Path, signers: Signers, keys: dict[str, str]
) -> None:
    """KEYS laid out as the kubelet writes a Secret volume (files are links into ..data, which
    is swapped atomically on update): loaded, and a rotation is seen at the next check."""
    mount = tmp_path / "trusted-keys"
    mount.mkdir()

    def publish(version: str, files: dict[str, str]) -> None:
        target = mount / f"..{version}"
        target.mkdir()
        for name, text in files.items():
            (target / name).write_text(text)
            link = mount / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        tmp_link = mount / "..data_tmp"
        tmp_link.symlink_to(target.name)
        tmp_link.rename(mount / "..data")

    publish("v1", {"team.asc": signers.export(keys["alice"])})
    v = Verifier(mount)
    alice = signers.commit(repo, "alice", keys["alice"])
    assert v.verify(repo, alice).trusted and v.keys.openpgp == (keys["alice"],)
    publish("v2", {"team.asc": signers.export(keys["gone"])})
    assert v.verify(repo, alice).reason == f"signed by an unknown key {keys['alice']}"
