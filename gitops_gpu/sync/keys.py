"""KEYS for ``--verify-signatures``: the public keys whose signatures the controller trusts.

KEYS is a directory (a mounted Secret or ConfigMap) or a single file. Each file in it is either
an armored OpenPGP public key block (``*.asc``, ``*.gpg``, ``*.pgp``, or any file whose text is
one) or an SSH allowed-signers file (``principals [options] keytype base64-key`` per line, as
``ssh-keygen -Y`` and git's ``gpg.ssh.allowedSignersFile`` read it). Dot-files are skipped (a
mounted volume's ``..data`` links live there).

Loading builds a keyring private to the process: a temporary GNUPGHOME holding only those
OpenPGP keys, and one allowed-signers file concatenating the SSH ones. It also records each
OpenPGP key's (and subkey's) expiry and revocation: validity is judged at a time the caller
chooses (when the commit was first seen), not at gpg's "now". Anything wrong (no gpg or
ssh-keygen, an unreadable KEYS, a malformed key, no key at all) raises ``TrustConfigError``:
verification is never quietly off.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gitops_gpu.errors import GitopsGpuError

TOOLS = ("git", "gpg", "ssh-keygen")
OPENPGP_SUFFIXES = (".asc", ".gpg", ".pgp")
PUBLIC_ARMOR = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
PRIVATE_ARMOR = "-----BEGIN PGP PRIVATE KEY BLOCK-----"
SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ssh-dss",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
FIX = "see docs/trust.md: KEYS holds armored OpenPGP public keys and/or an SSH allowed-signers file"
TIMEOUT = 30.0


class TrustConfigError(GitopsGpuError):
    """KEYS or the tools to check signatures are missing or malformed: refuse to start."""


@dataclass(frozen=True)
class KeySet:
    """One load of KEYS: the private keyring and what it trusts."""

    source: Path
    digest: str  # of the files' names and contents: a changed KEYS is a new KeySet
    home: Path  # temporary directory owning both of the below
    gnupghome: Path
    allowed_signers: Path
    openpgp: tuple[str, ...]  # primary key fingerprints, upper-case hex
    expires: dict[str, int]  # OpenPGP key and subkey fingerprint -> expiry (epoch s), 0: never
    revoked: frozenset[str]  # OpenPGP key and subkey fingerprints revoked
    ssh: tuple[str, ...]  # "principal SHA256:..." per allowed-signers entry
    tools: dict[str, str]  # name -> absolute path

    def describe(self) -> str:
        return (
            f"{len(self.openpgp)} OpenPGP and {len(self.ssh)} SSH keys from {self.source}"
            f" (digest {self.digest[:12]})"
        )

    def remove(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


def find_tools() -> dict[str, str]:
    found = {name: shutil.which(name) for name in TOOLS}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise TrustConfigError(
            f"--verify-signatures needs {', '.join(missing)} on PATH; not found",
            fix="install git, gnupg and openssh-client (deploy/Dockerfile has them)",
        )
    return {name: path for name, path in found.items() if path is not None}


def key_files(source: Path) -> list[tuple[str, bytes]]:
    """(name, content) of every key file in KEYS, sorted; raises on anything unreadable."""
    try:
        if source.is_file():
            return [(source.name, source.read_bytes())]
        if not source.is_dir():
            raise TrustConfigError(
                f"--verify-signatures {source}: no such file or directory",
                fix="mount the Secret or ConfigMap of trusted keys there, or pass its path",
            )
        out = []
        for entry in sorted(source.iterdir()):
            if entry.name.startswith("."):
                continue
            if not entry.is_file():
                raise TrustConfigError(
                    f"--verify-signatures {source}: {entry.name} is not a regular file", fix=FIX
                )
            out.append((entry.name, entry.read_bytes()))
    except OSError as exc:
        raise TrustConfigError(
            f"--verify-signatures {source}: cannot read it: {exc.strerror or exc}",
            fix="make KEYS readable by the controller's user (mode 0440 or wider)",
        ) from None
    if not out:
        raise TrustConfigError(
            f"--verify-signatures {source}: no key files in it (every commit would be refused)",
            fix=FIX,
        )
    return out


def digest_of(files: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, content in files:
        h.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return h.hexdigest()


def load(source: Path, tools: dict[str, str] | None = None) -> KeySet:
    """Validate KEYS and build its private keyring."""
    tools = tools or find_tools()
    files = key_files(source)
    home = Path(tempfile.mkdtemp(prefix="gitops-gpu-keys-"))
    try:
        gnupghome = home / "gnupg"
        gnupghome.mkdir(mode=0o700)
        # No agent, no key server: this keyring only ever verifies with what KEYS holds.
        (gnupghome / "gpg.conf").write_text("no-autostart\nno-auto-key-retrieve\n")
        openpgp: list[str] = []
        ssh_lines: list[str] = []
        ssh: list[str] = []
        for name, content in files:
            text = content.decode("utf-8", errors="replace")
            if PRIVATE_ARMOR in text:
                raise TrustConfigError(
                    f"--verify-signatures {source}: {name} holds a PRIVATE key",
                    fix="put only public keys in KEYS (gpg --armor --export FPR) and rotate "
                    "that private key: it has been exposed",
                )
            if name.lower().endswith(OPENPGP_SUFFIXES) or PUBLIC_ARMOR in text:
                openpgp += _import_openpgp(tools["gpg"], gnupghome, source, name, content)
            else:
                entries = _parse_allowed_signers(tools["ssh-keygen"], home, source, name, text)
                ssh_lines += [line for line, _fp in entries]
                ssh += [fp for _line, fp in entries]
        if not openpgp and not ssh:
            raise TrustConfigError(f"--verify-signatures {source}: holds no key", fix=FIX)
        allowed = home / "allowed_signers"
        allowed.write_text("".join(f"{line}\n" for line in ssh_lines))
        expires, revoked = _openpgp_dates(tools["gpg"], gnupghome, source) if openpgp else ({}, [])
        return KeySet(
            source=source,
            digest=digest_of(files),
            home=home,
            gnupghome=gnupghome,
            allowed_signers=allowed,
            openpgp=tuple(sorted(set(openpgp))),
            expires=expires,
            revoked=frozenset(revoked),
            ssh=tuple(ssh),
            tools=tools,
        )
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise


def gpg_env(gnupghome: Path) -> dict[str, str]:
    return {**os.environ, "GNUPGHOME": str(gnupghome), "LC_ALL": "C"}


def _import_openpgp(gpg: str, gnupghome: Path, source: Path, name: str, data: bytes) -> list[str]:
    where = f"--verify-signatures {source}: {name}"
    try:
        out = subprocess.run(
            [gpg, "--batch", "--no-tty", "--status-fd", "1", "--import"],
            input=data,
            env=gpg_env(gnupghome),
            capture_output=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrustConfigError(f"{where}: gpg --import failed: {exc}", fix=FIX) from None
    status = out.stdout.decode(errors="replace")
    fprs = re.findall(r"^\[GNUPG:\] IMPORT_OK \d+ ([0-9A-F]{40,64})$", status, re.MULTILINE)
    if out.returncode != 0 or not fprs:
        detail = " ".join(out.stderr.decode(errors="replace").split())[:200]
        raise TrustConfigError(
            f"{where}: not a valid OpenPGP public key ({detail or 'gpg imported nothing'})",
            fix="export it with `gpg --armor --export FINGERPRINT` (docs/trust.md)",
        )
    return fprs


def _openpgp_dates(gpg: str, gnupghome: Path, source: Path) -> tuple[dict[str, int], list[str]]:
    """(expiry per key and subkey fingerprint, the revoked ones) as the keyring lists them."""
    where = f"--verify-signatures {source}: gpg --list-keys failed"
    try:
        out = subprocess.run(
            [gpg, "--batch", "--no-tty", "--with-colons", "--fixed-list-mode", "--list-keys"],
            env=gpg_env(gnupghome),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrustConfigError(f"{where}: {exc}", fix=FIX) from None
    expires: dict[str, int] = {}
    revoked: list[str] = []
    key: list[str] = []  # the pub/sub record whose fpr record comes next
    try:
        for fields in (line.split(":") for line in out.stdout.splitlines()):
            if fields[0] in ("pub", "sub"):
                key = fields
            elif fields[0] == "fpr" and key:
                expires[fields[9]] = int(key[6] or 0)
                if key[1] == "r":
                    revoked.append(fields[9])
                key = []
    except (IndexError, ValueError):
        raise TrustConfigError(f"{where}: unexpected output", fix=FIX) from None
    if out.returncode != 0 or not expires:
        raise TrustConfigError(f"{where}: {' '.join(out.stderr.split())[:200]}", fix=FIX)
    return expires, revoked


def _parse_allowed_signers(
    ssh_keygen: str, home: Path, source: Path, name: str, text: str
) -> list[tuple[str, str]]:
    """(line, "principal SHA256:...") per entry; raises naming the first bad line."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"--verify-signatures {source}: {name} line {number}"
        try:
            tokens = shlex.split(line, posix=True)
        except ValueError as exc:
            raise TrustConfigError(f"{where}: {exc}", fix=FIX) from None
        at = next((i for i, t in enumerate(tokens) if t in SSH_KEY_TYPES), None)
        if at is None or at not in (1, 2) or at + 1 >= len(tokens):
            raise TrustConfigError(
                f"{where}: not an allowed-signers entry (principals [options] keytype key), "
                "nor an armored OpenPGP public key",
                fix=FIX,
            )
        keytype, blob = tokens[at], tokens[at + 1]
        try:
            base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            raise TrustConfigError(f"{where}: the {keytype} key is not base64", fix=FIX) from None
        out.append(
            (line, f"{tokens[0]} {_ssh_fingerprint(ssh_keygen, home, where, keytype, blob)}")
        )
    if not out:
        raise TrustConfigError(
            f"--verify-signatures {source}: {name} has no allowed-signers entry", fix=FIX
        )
    return out


def _ssh_fingerprint(ssh_keygen: str, home: Path, where: str, keytype: str, blob: str) -> str:
    probe = home / "probe.pub"
    probe.write_text(f"{keytype} {blob}\n")
    try:
        out = subprocess.run(
            [ssh_keygen, "-l", "-f", str(probe)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrustConfigError(f"{where}: ssh-keygen failed: {exc}", fix=FIX) from None
    finally:
        probe.unlink(missing_ok=True)
    fields = out.stdout.split()
    if out.returncode != 0 or len(fields) < 2 or not fields[1].startswith("SHA256:"):
        raise TrustConfigError(f"{where}: ssh-keygen cannot read the {keytype} key", fix=FIX)
    return fields[1]
