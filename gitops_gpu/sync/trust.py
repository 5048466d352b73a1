"""Only trusted commits reach the cluster: commit and tag signature verification.

``Verifier(KEYS, mode).verify(repo, sha)`` judges a commit with git's own verification
(``git verify-commit --raw`` / ``git verify-tag --raw``: gpg against a keyring private to the
process, ssh-keygen against ``gpg.ssh.allowedSignersFile``) and returns a ``Verdict``: trusted or
not, and one line saying why. Modes, as Flux names them:

- ``head``: the commit itself is signed by a trusted key;
- ``tag``: an annotated tag pointing at the commit is signed by a trusted key;
- ``tag-and-head``: both.

A check that errors (gpg crashed, timed out, an unknown signature format) is a failure for that
commit, never a pass (and is not cached: the next check runs it again). A commit that is not
in the repository raises ``SourceError``: that is no verdict at all. KEYS is re-read (cheaply:
names and contents hashed) on every call, so a key added or removed counts from the next check
on; a KEYS that became malformed raises
``TrustConfigError`` instead of verifying with stale keys. Verdicts are cached by commit, KEYS
digest and (tag modes) the tags pointing at the commit.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gitops_gpu.errors import SourceError
from gitops_gpu.sync import keys
from gitops_gpu.sync.keys import KeySet, TrustConfigError

log = logging.getLogger(__name__)
Mode = Literal["head", "tag", "tag-and-head"]
MODES: tuple[Mode, ...] = ("head", "tag", "tag-and-head")
# Metric label of an untrusted verdict (gitops_gpu_untrusted_commits_total{reason}).
Kind = Literal[
    "trusted",
    "unsigned",
    "unknown_key",
    "expired_key",
    "revoked_key",
    "bad_signature",
    "no_signed_tag",
    "error",
]
CACHE_MAX = 4096
_STATUS = re.compile(r"^\[GNUPG:\] (\S+)(?: (.*))?$", re.MULTILINE)
_SSH_GOOD = re.compile(r'^Good "git" signature for (\S+) with (\S+) key (\S+)$', re.MULTILINE)
_SSH_ANY = re.compile(r'^Good "git" signature with (\S+) key (\S+)$', re.MULTILINE)


@dataclass(frozen=True)
class Verdict:
    trusted: bool
    reason: str  # one line: "signed by ...", "unsigned", "signed by an unknown key <fpr>", ...
    kind: Kind = "trusted"


def untrusted(kind: Kind, reason: str) -> Verdict:
    return Verdict(False, reason, kind)


class Verifier:
    """Judges commits against KEYS. Construction loads and validates KEYS (raises
    ``TrustConfigError``); ``verify`` reloads it whenever its files changed."""

    def __init__(self, source: Path, mode: Mode = "head") -> None:
        if mode not in MODES:
            raise TrustConfigError(
                f"--verify-mode {mode!r}: expected one of {', '.join(MODES)}",
                fix="pass --verify-mode head, tag or tag-and-head",
            )
        self.source, self.mode = Path(source), mode
        self._lock = threading.RLock()
        self._tools = keys.find_tools()
        self.keys: KeySet = keys.load(self.source, self._tools)
        self._cache: dict[tuple[str, str, str, tuple[str, ...]], Verdict] = {}
        self._present: set[tuple[str, str]] = set()  # commits known to be in the repo
        self.checks = 0  # signature checks run (cache misses), for tests and benchmarks
        log.info("verifying signatures (mode %s) with %s", mode, self.keys.describe())

    def close(self) -> None:
        with self._lock:
            self.keys.remove()

    def __del__(self) -> None:
        keyset = getattr(self, "keys", None)
        if keyset is not None:
            keyset.remove()

    # -- KEYS rotation ----------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Re-read KEYS; rebuild the keyring if it changed. True when it did."""
        with self._lock:
            digest = keys.digest_of(keys.key_files(self.source))
            if digest == self.keys.digest:
                return False
            fresh = keys.load(self.source, self._tools)
            old, self.keys = self.keys, fresh
            old.remove()
            self._cache.clear()
            log.warning("KEYS changed: now %s", fresh.describe())
            return True

    # -- verdicts -------------------------------------------------------------------------------
    def verify(self, repo: str | os.PathLike[str], sha: str) -> Verdict:
        """The verdict on commit ``sha`` of the git repository at ``repo`` (bare or not)."""
        with self._lock:
            self.refresh()
            where = os.fspath(repo)
            tags = self._tags(where, sha) if self.mode != "head" else ()
            key = (where, sha, self.keys.digest, tags)
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            self.checks += 1
            verdict = self._judge(where, sha, tags)
            if verdict.kind == "error":
                return verdict  # a failure now; checked again next time (it may be transient)
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
            self._cache[key] = verdict
            return verdict

    def _judge(self, repo: str, sha: str, tags: tuple[str, ...]) -> Verdict:
        head = self._commit(repo, sha) if self.mode != "tag" else None
        if head is not None and not head.trusted:
            return head
        if self.mode == "head":
            assert head is not None
            return head
        if not tags:
            return untrusted("no_signed_tag", "no annotated tag points at it")
        verdicts = [(tag, self._tag(repo, tag)) for tag in tags]
        good = next(((t, v) for t, v in verdicts if v.trusted), None)
        if good is None:
            tag, first = verdicts[0]
            return untrusted(first.kind, f"tag {tag}: {first.reason}")
        tag_reason = f"tag {good[0]} {good[1].reason}"
        return Verdict(True, f"{head.reason}; {tag_reason}" if head else tag_reason)

    def _commit(self, repo: str, sha: str) -> Verdict:
        raw = self._git(repo, "cat-file", "commit", sha)
        if raw.returncode != 0:
            # Not a verdict on the commit: it is not (yet) in this repository.
            raise SourceError(
                f"commit {sha[:12]} is not in {repo}: {_line(raw.stderr)}",
                fix="fetch first; nothing can be said about a commit that is not there",
            )
        header = raw.stdout.split("\n\n", 1)[0]
        if not re.search(r"^gpgsig(-sha256)? ", header, re.MULTILINE):
            return untrusted("unsigned", "unsigned")
        return self._check(repo, "verify-commit", sha, header)

    def _tag(self, repo: str, tag: str) -> Verdict:
        raw = self._git(repo, "cat-file", "tag", f"refs/tags/{tag}")
        if raw.returncode != 0:
            return untrusted("error", f"signature check failed: {_line(raw.stderr)}")
        if "-----BEGIN " not in raw.stdout:
            return untrusted("unsigned", "unsigned")
        return self._check(repo, "verify-tag", f"refs/tags/{tag}", raw.stdout)

    def _tags(self, repo: str, sha: str) -> tuple[str, ...]:
        """Annotated tags whose object is ``sha`` itself (a tag of a tag does not count)."""
        out = self._git(
            repo,
            "for-each-ref",
            f"--points-at={sha}",
            "--format=%(objecttype) %(*objectname) %(refname)",
            "refs/tags",
        )
        if (repo, sha) not in self._present and (out.returncode != 0 or not out.stdout.strip()):
            out = self._git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
        if out.returncode != 0:
            raise SourceError(
                f"commit {sha[:12]} is not in {repo}: {_line(out.stderr)}",
                fix="fetch first; nothing can be said about a commit that is not there",
            )
        if len(self._present) >= CACHE_MAX:
            self._present.clear()
        self._present.add((repo, sha))
        tags = []
        for line in out.stdout.splitlines():
            otype, target, name = [*line.split(" ", 2), "", ""][:3]
            if otype == "tag" and target == sha:
                tags.append(name.removeprefix("refs/tags/"))
        return tuple(sorted(tags))

    def _check(self, repo: str, verb: str, obj: str, signed: str) -> Verdict:
        try:
            out = self._git(repo, verb, "--raw", obj)
        except subprocess.TimeoutExpired:
            return untrusted("error", f"signature check failed: git {verb} timed out")
        text = out.stderr + out.stdout
        if "-----BEGIN SSH SIGNATURE-----" in signed:
            return _ssh_verdict(out.returncode, text)
        if "-----BEGIN PGP SIGNATURE-----" in signed:
            return _gpg_verdict(out.returncode, text, self.keys.openpgp)
        return untrusted("error", "signature check failed: not an OpenPGP or SSH signature")

    def _git(self, repo: str, *args: str) -> subprocess.CompletedProcess[str]:
        # Only our keyring and programs count: no user or system git config, and the repo's own
        # gpg settings overridden on the command line.
        env = {
            **keys.gpg_env(self.keys.gnupghome),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
        tools = self.keys.tools
        cmd = [
            tools["git"],
            "-C",
            repo,
            "-c",
            f"gpg.program={tools['gpg']}",
            "-c",
            f"gpg.openpgp.program={tools['gpg']}",
            "-c",
            f"gpg.ssh.program={tools['ssh-keygen']}",
            "-c",
            f"gpg.ssh.allowedSignersFile={self.keys.allowed_signers}",
            "-c",
            "gpg.ssh.revocationFile=",
            "-c",
            "gpg.minTrustLevel=undefined",
            *args,
        ]
        return subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=keys.TIMEOUT, check=False
        )


def _line(text: str) -> str:
    return " ".join(text.split())[:160] or "no output"


def _gpg_verdict(rc: int, text: str, trusted_fprs: tuple[str, ...]) -> Verdict:
    status: dict[str, str] = {}
    for name, rest in _STATUS.findall(text):
        status.setdefault(name, rest or "")
    valid = status.get("VALIDSIG", "").split()
    fpr = valid[-1] if valid else ""  # the primary key's fingerprint
    if "BADSIG" in status:
        keyid = status["BADSIG"].split()[0]
        return untrusted(
            "bad_signature",
            f"signature check failed: bad signature by key {keyid} (altered after signing)",
        )
    if "REVKEYSIG" in status:
        return untrusted("revoked_key", f"signature by a revoked key {fpr or status['REVKEYSIG']}")
    if "EXPKEYSIG" in status:
        return untrusted("expired_key", f"signature by an expired key {fpr or status['EXPKEYSIG']}")
    if "EXPSIG" in status:
        return untrusted("expired_key", f"expired signature by key {fpr or status['EXPSIG']}")
    if "ERRSIG" in status:
        fields = status["ERRSIG"].split()
        # ERRSIG <keyid> <pkalgo> <hashalgo> <class> <time> <rc> [<fpr>]; rc 9: no public key
        who = fields[6] if len(fields) > 6 and fields[6] != "-" else fields[0]
        if len(fields) > 5 and fields[5] == "9":
            return untrusted("unknown_key", f"signed by an unknown key {who}")
        return untrusted("error", f"signature check failed: gpg error {fields[5:6]} for key {who}")
    if rc == 0 and "GOODSIG" in status and fpr:
        if fpr not in trusted_fprs:  # cannot happen with a private keyring; belt and braces
            return untrusted("unknown_key", f"signed by an unknown key {fpr}")
        signer = status["GOODSIG"].split(" ", 1)[-1]
        return Verdict(True, f"signed by {signer} (OpenPGP {fpr})")
    return untrusted("error", f"signature check failed: {_line(text)}")


def _ssh_verdict(rc: int, text: str) -> Verdict:
    good = _SSH_GOOD.search(text)
    if rc == 0 and good:
        principal, algo, fp = good.groups()
        return Verdict(True, f"signed by {principal} (SSH {algo} {fp})")
    anyone = _SSH_ANY.search(text)
    if anyone and "key has expired" in text:  # allowed-signers valid-before in the past
        return untrusted("expired_key", f"signature by an expired key {anyone.group(2)}")
    if anyone and "No principal matched" in text:
        return untrusted("unknown_key", f"signed by an unknown key {anyone.group(2)}")
    if "incorrect signature" in text or "verification failed" in text.lower():
        return untrusted("bad_signature", f"signature check failed: {_line(text)}")
    return untrusted("error", f"signature check failed: {_line(text)}")


__all__ = ["MODES", "Mode", "TrustConfigError", "Verdict", "Verifier"]
