"""Seals on record statuses: only the key holder can make one, and it covers what decides."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from gitops_gpu.rollout.seal import (
    Keyring,
    SealKeyError,
    generate,
    load_private,
    load_private_file,
    parse_public_keys,
)
from gitops_gpu.rollout.status import CommitStatus

SHA = "a" * 40
KEY = generate("controller-a")
RING = Keyring(parse_public_keys(KEY.public_line(), "test"))


def status(**kw: object) -> CommitStatus:
    base = CommitStatus(SHA, "gitops-gpu/stage/canary", "success", "canary: 1/1 nodes", "", 1.5)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_sealed_status_verifies_and_carries_its_sealed_time() -> None:
    sealed = KEY.seal(status(created_at=1_700_000_000.123))
    check = RING.check(sealed)
    assert check.signer == "controller-a"
    assert check.at == pytest.approx(1_700_000_000.123)
    assert sealed.seal.startswith(f"gg1.{KEY.id}.1700000000123.")


@pytest.mark.parametrize(
    "change",
    [
        {"sha": "b" * 40},
        {"context": "gitops-gpu/stage/fleet"},
        {"state": "failure"},
        {"description": "canary: 0/1 nodes"},
    ],
)
def test_a_seal_moved_to_another_commit_context_state_or_text_fails(
    change: dict[str, str],
) -> None:
    sealed = KEY.seal(status())
    check = RING.check(replace(sealed, **change))  # type: ignore[arg-type]
    assert check.signer is None
    assert "altered after sealing" in check.reason


def test_a_seal_whose_time_was_edited_fails() -> None:
    sealed = KEY.seal(status(created_at=100.0))
    _, kid, _, sig = sealed.seal.split(".")
    assert RING.check(replace(sealed, seal=f"gg1.{kid}.999000.{sig}")).signer is None


def test_unsigned_unknown_key_and_malformed_seals_are_named() -> None:
    assert RING.check(status()).reason == "unsigned"
    other = generate("intruder").seal(status())
    assert RING.check(other).reason.startswith("sealed by an unknown key ")
    assert RING.check(status(seal="gg1.nonsense")).reason == "malformed seal"
    assert RING.check(status(seal="gg1.abc.12x.sig")).reason == "malformed seal"


def test_an_ssh_keygen_ed25519_key_seals(tmp_path: Path) -> None:
    path = tmp_path / "record-key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ctl", "-f", str(path)], check=True
    )
    key = load_private_file(path, "ctl")
    ring = Keyring(parse_public_keys(path.with_suffix(".pub").read_text(), "ctl.pub"))
    assert ring.check(key.seal(status())).signer == "ctl"


def test_a_non_ed25519_or_encrypted_key_is_refused_with_the_fix(tmp_path: Path) -> None:
    rsa = tmp_path / "rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-N", "", "-f", str(rsa)], check=True)
    with pytest.raises(SealKeyError, match="ed25519 only") as info:
        load_private_file(rsa, "x")
    assert "ssh-keygen -t ed25519" in (info.value.fix or "")
    locked = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "pw", "-f", str(locked)], check=True)
    with pytest.raises(SealKeyError, match="not an unencrypted ed25519 private key"):
        load_private_file(locked, "x")
    with pytest.raises(SealKeyError, match="cannot read"):
        load_private_file(tmp_path / "missing", "x")
    assert load_private(KEY.private_bytes(), "bytes", "n").id == KEY.id


def test_a_bad_trusted_key_line_names_the_file_and_line() -> None:
    text = f"# controllers\n{KEY.public_line()}\nssh-rsa AAAAB3Nza bob\n"
    with pytest.raises(SealKeyError, match=r"^trusted\.pub:3: expected 'ssh-ed25519"):
        parse_public_keys(text, "trusted.pub")
    with pytest.raises(SealKeyError, match=r"trusted\.pub:1: unreadable"):
        parse_public_keys("ssh-ed25519 AAAAnotbase64!! x", "trusted.pub")
