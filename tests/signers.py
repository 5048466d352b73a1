"""Real signing keys for the signature-verification tests: gpg and ssh-keygen keys generated
here, commits and tags signed by git, an expired key, a revoked key, a tampered commit.

gpg and ssh-keygen are required: without them these tests fail (they never skip)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

YEAR = 365 * 86400


def require_tools() -> None:
    missing = [t for t in ("git", "gpg", "gpgconf", "ssh-keygen") if shutil.which(t) is None]
    if missing:
        pytest.fail(
            f"signature tests need {', '.join(missing)} (apt-get install gnupg openssh-client)",
            pytrace=False,
        )


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    )
    return out.stdout.strip()


class Signers:
    """A signer's GNUPGHOME and SSH keys (short path: gpg-agent's socket lives there)."""

    def __init__(self) -> None:
        require_tools()
        self.root = Path(tempfile.mkdtemp(prefix="gg-sign-"))
        self.gnupghome = self.root / "g"
        self.gnupghome.mkdir(mode=0o700)
        self.env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "GNUPGHOME": str(self.gnupghome),
            "HOME": str(self.root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_AUTHOR_NAME": "platform",
            "GIT_AUTHOR_EMAIL": "platform@example.com",
            "GIT_COMMITTER_NAME": "platform",
            "GIT_COMMITTER_EMAIL": "platform@example.com",
        }
        self.old_time = int(time.time()) - 2 * YEAR
        # Signs "a year and a half ago": with a key valid one year from two years ago, the
        # signature was good when made and the key has expired since.
        self.old_gpg = self.root / "old-gpg"
        self.old_gpg.write_text(
            f'#!/bin/sh\nexec gpg --faked-system-time {self.old_time + YEAR // 2} "$@"\n'
        )
        self.old_gpg.chmod(0o755)
        self.expired_fprs: set[str] = set()

    def close(self) -> None:
        subprocess.run(["gpgconf", "--kill", "all"], env=self.env, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _gpg(self, *args: str) -> str:
        out = subprocess.run(
            ["gpg", "--batch", "--no-tty", "--passphrase", "", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout

    # -- keys -------------------------------------------------------------------------------------
    def gpg_key(self, name: str, *, expired: bool = False) -> str:
        """A new ed25519 OpenPGP key; ``expired``: made two years ago, valid for one."""
        uid = f"{name} <{name}@example.com>"
        if expired:
            self._gpg(
                "--faked-system-time", str(self.old_time), "--quick-gen-key", uid, "ed25519",
                "sign", "1y",
            )  # fmt: skip
        else:
            self._gpg("--quick-gen-key", uid, "ed25519", "sign", "never")
        listing = self._gpg("--with-colons", "--list-keys", f"<{name}@example.com>")
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        if expired:
            self.expired_fprs.add(fpr)
        return fpr

    def export(self, fpr: str) -> str:
        return self._gpg("--armor", "--export", fpr)

    def revoke(self, fpr: str) -> str:
        """Revoke the key (its stored revocation certificate); returns the revoked public key."""
        cert = (self.gnupghome / "openpgp-revocs.d" / f"{fpr}.rev").read_text()
        # gpg stores it with a ':' before the armor so it cannot be imported by accident.
        cert = cert.replace(
            ":-----BEGIN PGP PUBLIC KEY BLOCK-----", "-----BEGIN PGP PUBLIC KEY BLOCK-----"
        )
        subprocess.run(
            ["gpg", "--batch", "--import"], input=cert, env=self.env, text=True,
            capture_output=True, check=True,
        )  # fmt: skip
        return self.export(fpr)

    def ssh_key(self, name: str) -> tuple[Path, str]:
        """(private key path, public key line)."""
        key = self.root / f"ssh-{name}"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
            check=True,
        )
        return key, Path(f"{key}.pub").read_text().strip()

    # -- signing ----------------------------------------------------------------------------------
    def _sign_config(self, key: str | Path | None) -> list[str]:
        if key is None:
            return []
        if isinstance(key, Path):
            return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"]
        program = str(self.old_gpg) if key in self.expired_fprs else "gpg"
        return ["-c", "gpg.format=openpgp", "-c", f"gpg.program={program}",
                "-c", f"user.signingkey={key}"]  # fmt: skip

    def commit(
        self,
        work: Path,
        message: str,
        key: str | Path | None,
        edit: Callable[[Path], None] | None = None,
        *,
        push: bool = True,
        date: str | None = None,
    ) -> str:
        """Commit (signed by ``key``: an OpenPGP fingerprint or an SSH private key path; None:
        unsigned) and force-push main to origin. ``date``: the author and committer date the
        signer writes (git's date formats, e.g. "2019-06-01T12:00:00Z")."""
        if edit is not None:
            edit(work)
        git(work, "add", "-A", env=self.env)
        sign = ["-S"] if key is not None else []
        git(work, *self._sign_config(key), "commit", "-q", "--allow-empty", *sign, "-m",
            message, env=self._dated(date))  # fmt: skip
        if push:
            git(work, "push", "-q", "--force", "origin", "main", env=self.env)
        return git(work, "rev-parse", "HEAD")

    def tag(
        self, work: Path, name: str, sha: str, key: str | Path | None, *, date: str | None = None
    ) -> None:
        """An annotated tag at ``sha``, signed by ``key`` (None: unsigned), pushed. ``date``:
        the tagger date, as for ``commit``."""
        sign = ["-s"] if key is not None else ["-a"]
        git(work, *self._sign_config(key), "tag", *sign, "-m", name, name, sha,
            env=self._dated(date))  # fmt: skip
        git(work, "push", "-q", "origin", f"refs/tags/{name}", env=self.env)

    def _dated(self, date: str | None) -> dict[str, str]:
        if date is None:
            return self.env
        return {**self.env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}

    def tamper(self, work: Path, sha: str, *, push: bool = True) -> str:
        """A copy of commit ``sha`` with its message changed and its signature kept, made the
        branch head: what an attacker who rewrote a signed commit would push."""
        raw = git(work, "cat-file", "commit", sha) + "\n"
        header, _, message = raw.partition("\n\n")
        forged = f"{header}\n\n{message.rstrip()} (tampered)\n"
        out = subprocess.run(
            ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
            cwd=work, input=forged, capture_output=True, text=True, check=True,
        )  # fmt: skip
        new = out.stdout.strip()
        git(work, "update-ref", "refs/heads/main", new)
        git(work, "reset", "-q", "--hard", new)
        if push:
            git(work, "push", "-q", "--force", "origin", "main", env=self.env)
        return new


def write_keys(
    directory: Path,
    signers: Signers,
    openpgp: dict[str, str] | None = None,
    ssh: dict[str, str] | None = None,
) -> Path:
    """KEYS as the chart mounts it: ``<name>.asc`` per OpenPGP key, one ``allowed_signers``.
    ``openpgp``: file name -> fingerprint; ``ssh``: principal -> public key line."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    for name, fpr in (openpgp or {}).items():
        (directory / f"{name}.asc").write_text(signers.export(fpr))
    if ssh:
        (directory / "allowed_signers").write_text(
            "".join(f'{who} namespaces="git" {line}\n' for who, line in ssh.items())
        )
    return directory
