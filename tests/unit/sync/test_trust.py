"""Signature verification with real keys: gpg and ssh-keygen keys made here, commits and tags
signed by git, judged by gitops_gpu.sync.trust through git verify-commit / verify-tag."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from signers import YEAR, Signers, git, write_keys

from gitops_gpu.errors import SourceError
from gitops_gpu.sync.keys import TrustConfigError
from gitops_gpu.sync.trust import Mode, Verifier, split_commit, split_tag

SEEN_2019 = datetime(2019, 6, 2, tzinfo=UTC)  # "first seen" for commits dated 2019


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
    seen = datetime.now(UTC)
    before = Verifier(write_keys(tmp_path / "K1", signers, openpgp={"gone": keys["gone"]}))
    assert before.verify(repo, sha).trusted
    (tmp_path / "K2").mkdir()
    (tmp_path / "K2" / "gone.asc").write_text(signers.revoke(keys["gone"]))
    after = Verifier(tmp_path / "K2")
    for verdict in (after.verify(repo, sha), after.verify(repo, sha, at=seen)):
        assert (verdict.trusted, verdict.kind) == (False, "revoked_key")  # whenever first seen
        assert verdict.reason == f"signature by a revoked key {keys['gone']}"


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
    seen = datetime.now(UTC)
    assert v.verify(repo, sha, at=seen).trusted
    (keys_dir / "alice.asc").unlink()  # alice leaves the team
    assert v.verify(repo, sha, at=seen).reason == f"signed by an unknown key {keys['alice']}"
    (keys_dir / "alice.asc").write_text(signers.export(keys["alice"]))  # and comes back
    assert v.verify(repo, sha, at=seen).trusted
    checks = v.checks
    assert v.verify(repo, sha, at=seen).trusted and v.checks == checks  # cached: KEYS unchanged
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


# -- key validity is judged when the commit was first seen, never at the signer's dates --------
def test_ssh_validity_is_judged_when_first_seen_not_at_the_commit_date(
    tmp_path: Path, repo: Path, signers: Signers, ssh: dict[str, tuple[Path, str]]
) -> None:
    key, line = ssh["eve"]
    (tmp_path / "SSH").mkdir()
    allowed = tmp_path / "SSH" / "allowed_signers"
    allowed.write_text(f'eve@example.com namespaces="git",valid-before="20200101" {line}\n')
    v = Verifier(tmp_path / "SSH")
    backdated = signers.commit(repo, "claims 2019", key, date="2019-06-01T12:00:00Z")
    ended = v.verify(repo, backdated)  # the entry ended in 2020, whatever the commit claims
    assert (ended.trusted, ended.kind) == (False, "expired_key")
    assert ended.reason.startswith("signature by an expired key SHA256:")
    assert v.verify(repo, backdated, at=SEEN_2019).trusted  # first seen while the entry held
    allowed.write_text(f'eve@example.com namespaces="git",valid-after="20990101" {line}\n')
    ahead = signers.commit(repo, "claims 2099", key, date="2099-06-01T12:00:00Z")
    early = v.verify(repo, ahead)
    assert (early.trusted, early.kind) == (False, "expired_key")
    assert early.reason.startswith("signature by a key not yet valid SHA256:")
    assert v.verify(repo, ahead, at=datetime(2099, 6, 2, tzinfo=UTC)).trusted


def test_openpgp_expiry_is_judged_when_first_seen_and_cached_per_time(
    repo: Path, keys_dir: Path, signers: Signers, keys: dict[str, str]
) -> None:
    """The "old" key was valid from two years ago for one year; it signed half a year in."""

    def years_in(years: float) -> datetime:
        return datetime.fromtimestamp(signers.old_time + years * YEAR, UTC)

    sha = signers.commit(repo, "signed while the key was valid", keys["old"])
    v = Verifier(keys_dir)
    ok = v.verify(repo, sha, at=years_in(0.75))  # expired since, not when first seen
    assert ok.trusted and ok.reason == f"signed by old <old@example.com> (OpenPGP {keys['old']})"
    checks = v.checks
    assert v.verify(repo, sha, at=years_in(0.75)).trusted and v.checks == checks  # every pass
    late = v.verify(repo, sha, at=years_in(1.25))  # first seen after it expired
    assert (late.trusted, late.kind) == (False, "expired_key")
    assert late.reason == f"signature by an expired key {keys['old']}"
    assert v.checks == checks + 1  # another time is judged anew, not the earlier verdict reused
    assert v.verify(repo, sha).kind == "expired_key"  # at=None: now
    assert v.verify(repo, sha).kind == "expired_key" and v.checks == checks + 3  # now moves on


@pytest.mark.parametrize("who", ["alice", "eve"])
def test_tag_validity_is_judged_when_first_seen(
    who: str,
    tmp_path: Path,
    repo: Path,
    signers: Signers,
    keys: dict[str, str],
    ssh: dict[str, tuple[Path, str]],
) -> None:
    keys_dir = write_keys(tmp_path / "K", signers, openpgp={"old": keys["old"]})
    (keys_dir / "allowed_signers").write_text(
        f'eve@example.com namespaces="git",valid-before="20200101" {ssh["eve"][1]}\n'
    )
    sha = signers.commit(repo, "release", None)
    seen = SEEN_2019
    if who == "alice":  # the expired OpenPGP key, first seen before it expired
        seen = datetime.fromtimestamp(signers.old_time + 0.75 * YEAR, UTC)
    signers.tag(repo, "v1", sha, keys["old"] if who == "alice" else ssh["eve"][0],
                date="2019-06-01T12:00:00Z")  # fmt: skip
    v = Verifier(keys_dir, "tag")
    assert v.verify(repo, sha).reason.startswith("tag v1: signature by an expired key ")
    assert v.verify(repo, sha, at=seen).trusted


@pytest.mark.parametrize("who", ["alice", "eve"])
def test_sha256_repository(
    who: str,
    tmp_path: Path,
    keys_dir: Path,
    signers: Signers,
    keys: dict[str, str],
    ssh: dict[str, tuple[Path, str]],
) -> None:
    work = tmp_path / "sha256"
    subprocess.run(["git", "init", "-q", "--object-format=sha256", str(work)], check=True)
    sha = signers.commit(work, "signed", keys["alice"] if who == "alice" else ssh["eve"][0],
                         push=False)  # fmt: skip
    assert "\ngpgsig-sha256 -----BEGIN" in git(work, "cat-file", "commit", sha)
    assert Verifier(keys_dir).verify(work, sha).trusted
    assert Verifier(keys_dir).verify(work, signers.tamper(work, sha, push=False)).kind == (
        "bad_signature"
    )


def test_split_commit_and_tag_as_git_does() -> None:
    head = b"parent 1\nauthor a 1 +0000\ncommitter c 1 +0000\n"
    sigs = b"gpgsig -----BEGIN SSH SIGNATURE-----\n one\n -----END SSH SIGNATURE-----\n"
    sigs += b"gpgsig-sha256 other\n two\n"
    tail = b"mergetag object 2\n kept\n\nmessage\n\n gpgsig in the body\n"
    sha1 = b"tree " + b"a" * 40 + b"\n"
    payload = sha1 + head + tail
    assert split_commit(sha1 + head + sigs + tail) == (
        payload,
        b"-----BEGIN SSH SIGNATURE-----\none\n-----END SSH SIGNATURE-----\n",
    )
    sha256 = b"tree " + b"b" * 64 + b"\n"
    assert split_commit(sha256 + head + sigs + tail) == (sha256 + head + tail, b"other\ntwo\n")
    assert split_commit(payload) == (payload, b"")
    tag = b"object 1\ntype commit\ntag v1\ntagger t 1 +0000\n\n"
    tag += b"quoting\n-----BEGIN PGP SIGNATURE-----\nin the message\n"
    sig = b"-----BEGIN SSH SIGNATURE-----\nthree\n-----END SSH SIGNATURE-----\n"
    assert split_tag(tag + sig) == (tag, sig)
    assert split_tag(tag.replace(b"-----BEGIN", b"BEGIN")) == (
        tag.replace(b"-----BEGIN", b"BEGIN"),
        b"",
    )


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
