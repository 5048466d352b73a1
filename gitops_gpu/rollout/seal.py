"""Seals: ed25519 signatures that say the controller (or an approver) wrote a status.

Anyone who can push ``refs/notes/gitops-gpu`` or post a commit status can write the record, so a
status counts for a decision only when it carries a seal by a trusted key (rollout/authentic.py).
A seal is one string, ``gg1.<key id>.<milliseconds since the epoch>.<signature>``, over the
status's commit, context, state and description and the seal's own time: a seal copied onto
another commit, context or state no longer verifies, and the time it carries orders the record
whatever order its lines were stored in.

Keys are OpenSSH or PKCS#8 PEM ed25519 private keys (``ssh-keygen -t ed25519``); trusted keys
are OpenSSH public key lines (``ssh-ed25519 AAAA... name``), one per line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.rollout.status import CommitStatus

VERSION = "gg1"
_DOMAIN = "gitops-gpu-record-v1"
_CACHE_MAX = 8192
FIX_KEYS = "see docs/trust.md, 'Sealed record': trusted keys are 'ssh-ed25519 AAAA... name' lines"


class SealKeyError(GitopsGpuError):
    """A seal key or trusted-keys file is missing or malformed."""


def payload(status: CommitStatus, at_ms: int) -> bytes:
    """The bytes a seal signs: NUL cannot occur in any of the fields as stored."""
    fields = (_DOMAIN, status.sha, status.context, str(status.state), status.description)
    return "\0".join((*fields, str(at_ms))).encode()


def split(seal: str) -> tuple[str, int, str] | None:
    """A seal's key id, time (ms) and signature; None when it is not one (gg1.<key>.<ms>.<sig>).
    Which key a seal names says nothing of whether it holds: Keyring.check says that."""
    parts = seal.split(".")
    if len(parts) != 4 or parts[0] != VERSION or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2]), parts[3]


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:12]


def public_line(public: Ed25519PublicKey, name: str) -> str:
    """The key as an OpenSSH public key line (what trusted-keys files hold)."""
    text = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{text.decode()} {name}".strip()


@dataclass(frozen=True)
class SealKey:
    """A private key that seals statuses, and the name its seals are reported by."""

    private: Ed25519PrivateKey
    name: str

    @property
    def id(self) -> str:
        return key_id(self.private.public_key())

    def public_line(self) -> str:
        return public_line(self.private.public_key(), self.name)

    def seal(self, status: CommitStatus) -> CommitStatus:
        """``status`` with a seal; its created_at becomes the sealed time (milliseconds)."""
        at_ms = round(status.created_at * 1000)
        signature = self.private.sign(payload(status, at_ms))
        sig = base64.urlsafe_b64encode(signature).decode().rstrip("=")
        return replace(status, seal=f"{VERSION}.{self.id}.{at_ms}.{sig}", created_at=at_ms / 1000)

    def private_bytes(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )


def generate(name: str) -> SealKey:
    return SealKey(Ed25519PrivateKey.generate(), name)


def load_private(data: bytes, source: str, name: str) -> SealKey:
    """An ed25519 private key from OpenSSH or PEM bytes; ``source`` names it in errors."""
    key: object
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SealKeyError(
            f"{source}: not an unencrypted ed25519 private key ({exc})",
            fix="create one with: ssh-keygen -t ed25519 -N '' -f record-key",
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SealKeyError(
            f"{source}: a {type(key).__name__.removeprefix('_')} key; seals are ed25519 only",
            fix="create one with: ssh-keygen -t ed25519 -N '' -f record-key",
        )
    return SealKey(key, name)


def load_private_file(path: Path, name: str) -> SealKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SealKeyError(
            f"{path}: cannot read the seal key: {exc.strerror}",
            fix="mount the key Secret there, or leave the option out to keep the key in a Secret",
        ) from None
    return load_private(data, str(path), name)


@dataclass(frozen=True)
class TrustedKey:
    id: str
    name: str
    public: Ed25519PublicKey


def parse_public_keys(text: str, source: str) -> list[TrustedKey]:
    """OpenSSH ed25519 public key lines; blank lines and ``#`` comments are skipped. A line that
    is not one raises, naming ``source`` and the line."""
    out: list[TrustedKey] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        out.append(_public(line, f"{source}:{number}"))
    return out


def _public(line: str, where: str) -> TrustedKey:
    parts = line.split(None, 2)
    if len(parts) < 2 or parts[0] != "ssh-ed25519":
        raise SealKeyError(
            f"{where}: expected 'ssh-ed25519 AAAA... name', got {line[:40]!r}", fix=FIX_KEYS
        )
    try:
        key = serialization.load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except (ValueError, binascii.Error, TypeError) as exc:
        raise SealKeyError(f"{where}: unreadable ssh-ed25519 key ({exc})", fix=FIX_KEYS) from None
    assert isinstance(key, Ed25519PublicKey)  # the type was checked above
    kid = key_id(key)
    return TrustedKey(kid, parts[2].strip() if len(parts) > 2 else kid, key)


@dataclass(frozen=True)
class Check:
    """A seal's verdict: ``signer`` names the key when it verified, else ``reason`` says why not."""

    signer: str | None
    reason: str = ""
    at: float = 0.0  # the sealed time, seconds


class Keyring:
    """Trusted public keys; ``check`` verifies a status's seal (cached: statuses repeat)."""

    def __init__(self, keys: Iterable[TrustedKey]) -> None:
        self._keys = {k.id: k for k in keys}
        self._cache: dict[tuple[str, bytes], Check] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, keys: Iterable[TrustedKey]) -> None:
        """Trust more keys (the controller's own, once loaded): verdicts are judged again."""
        with self._lock:
            self._keys.update((k.id, k) for k in keys)
            self._cache.clear()

    def names(self) -> list[str]:
        return sorted(f"{k.name} ({k.id})" for k in self._keys.values())

    def ids(self) -> frozenset[str]:
        return frozenset(self._keys)

    def check(self, status: CommitStatus) -> Check:
        if not status.seal:
            return Check(None, "unsigned")
        parts = split(status.seal)
        if parts is None:
            return Check(None, "malformed seal")
        kid, at_ms, sig_text = parts
        signed = payload(status, at_ms)
        key = (status.seal, hashlib.sha256(signed).digest())
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        verdict = self._verify(kid, at_ms, sig_text, signed)
        with self._lock:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = verdict
        return verdict

    def _verify(self, kid: str, at_ms: int, sig_text: str, signed: bytes) -> Check:
        trusted = self._keys.get(kid)
        if trusted is None:
            return Check(None, f"sealed by an unknown key {kid}")
        try:
            signature = base64.urlsafe_b64decode(sig_text + "=" * (-len(sig_text) % 4))
            trusted.public.verify(signature, signed)
        except (InvalidSignature, binascii.Error, ValueError):
            return Check(None, f"bad seal (key {trusted.name}): altered after sealing")
        return Check(trusted.name, at=at_ms / 1000)
