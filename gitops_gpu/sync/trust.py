"""Only trusted commits reach the cluster: commit and tag signature verification.

``Verifier(KEYS, mode).verify(repo, sha, at=first_seen)`` judges a commit and returns a
``Verdict``: trusted or not, and one line saying why. The signed payload and its signature are
split out of the commit (or tag) object as git does it, then checked by gpg against a keyring
private to the process or by ``ssh-keygen -Y`` against KEYS' allowed-signers. Modes, as Flux
names them:

- ``head``: the commit itself is signed by a trusted key;
- ``tag``: an annotated tag pointing at the commit is signed by a trusted key;
- ``tag-and-head``: both.

Key validity (allowed-signers ``valid-after``/``valid-before``, OpenPGP expiry) is judged at
``at``, the time the caller first saw the commit (None: now), never at a date the signer wrote
(committer date, signature time): those are the signer's to choose. A revoked OpenPGP key is
refused whenever it was revoked.

A check that errors (gpg crashed, timed out, an unknown signature format) is a failure for that
commit, never a pass (and is not cached: the next check runs it again). A commit that is not
in the repository raises ``SourceError``: that is no verdict at all. KEYS is re-read (cheaply:
names and contents hashed) on every call, so a key added or removed counts from the next check
on; a KEYS that became malformed raises
``TrustConfigError`` instead of verifying with stale keys. Verdicts are cached by commit, KEYS
digest, (tag modes) the tags pointing at the commit, and ``at``; ``at=None`` is judged afresh
on every call (now moves on).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime
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
# A tag's signature starts at the last line opening one of these (git's parse_signature).
_TAG_SIG = re.compile(
    rb"^-----BEGIN (PGP SIGNATURE|PGP MESSAGE|SIGNED MESSAGE|SSH SIGNATURE)-----", re.MULTILINE
)


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
        self._cache: dict[tuple[str, str, str, tuple[str, ...], datetime | None], Verdict] = {}
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
    def verify(self, repo: str | os.PathLike[str], sha: str, at: datetime | None = None) -> Verdict:
        """The verdict on commit ``sha`` of the git repository at ``repo`` (bare or not), with
        key validity judged at ``at`` (an aware datetime: when the commit was first seen;
        None: now)."""
        with self._lock:
            self.refresh()
            where = os.fspath(repo)
            tags = self._tags(where, sha) if self.mode != "head" else ()
            key = (where, sha, self.keys.digest, tags, at)
            cached = self._cache.get(key) if at is not None else None
            if cached is not None:
                return cached
            self.checks += 1
            verdict = self._judge(where, sha, tags, time.time() if at is None else at.timestamp())
            if verdict.kind == "error" or at is None:
                return verdict  # an error may be transient; "now" is later on the next call
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
            self._cache[key] = verdict
            return verdict

    def _judge(self, repo: str, sha: str, tags: tuple[str, ...], at: float) -> Verdict:
        head = self._commit(repo, sha, at) if self.mode != "tag" else None
        if head is not None and not head.trusted:
            return head
        if self.mode == "head":
            assert head is not None
            return head
        if not tags:
            return untrusted("no_signed_tag", "no annotated tag points at it")
        verdicts = [(tag, self._tag(repo, tag, at)) for tag in tags]
        good = next(((t, v) for t, v in verdicts if v.trusted), None)
        if good is None:
            tag, first = verdicts[0]
            return untrusted(first.kind, f"tag {tag}: {first.reason}")
        tag_reason = f"tag {good[0]} {good[1].reason}"
        return Verdict(True, f"{head.reason}; {tag_reason}" if head else tag_reason)

    def _commit(self, repo: str, sha: str, at: float) -> Verdict:
        raw = self._git(repo, "cat-file", "commit", sha)
        if raw.returncode != 0:
            # Not a verdict on the commit: it is not (yet) in this repository.
            raise SourceError(
                f"commit {sha[:12]} is not in {repo}: {_line(raw.stderr.decode(errors='replace'))}",
                fix="fetch first; nothing can be said about a commit that is not there",
            )
        return self._check(*split_commit(raw.stdout), at)

    def _tag(self, repo: str, tag: str, at: float) -> Verdict:
        raw = self._git(repo, "cat-file", "tag", f"refs/tags/{tag}")
        if raw.returncode != 0:
            error = _line(raw.stderr.decode(errors="replace"))
            return untrusted("error", f"signature check failed: {error}")
        return self._check(*split_tag(raw.stdout), at)

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
                f"commit {sha[:12]} is not in {repo}: {_line(out.stderr.decode(errors='replace'))}",
                fix="fetch first; nothing can be said about a commit that is not there",
            )
        if len(self._present) >= CACHE_MAX:
            self._present.clear()
        self._present.add((repo, sha))
        tags = []
        for line in out.stdout.decode(errors="replace").splitlines():
            otype, target, name = [*line.split(" ", 2), "", ""][:3]
            if otype == "tag" and target == sha:
                tags.append(name.removeprefix("refs/tags/"))
        return tuple(sorted(tags))

    def _check(self, payload: bytes, signature: bytes, at: float) -> Verdict:
        if not signature:
            return untrusted("unsigned", "unsigned")
        is_ssh = signature.startswith(b"-----BEGIN SSH SIGNATURE-----")
        if not is_ssh and not signature.startswith(b"-----BEGIN PGP "):
            return untrusted("error", "signature check failed: not an OpenPGP or SSH signature")
        sigfile = self.keys.home / "signature"  # one check at a time: under self._lock
        try:
            sigfile.write_bytes(signature)
            return self._ssh(payload, sigfile, at) if is_ssh else self._gpg(payload, sigfile, at)
        except subprocess.TimeoutExpired as exc:
            tool = os.path.basename(exc.cmd[0])
            return untrusted("error", f"signature check failed: {tool} timed out")
        except OSError as exc:
            return untrusted("error", f"signature check failed: {exc}")
        finally:
            sigfile.unlink(missing_ok=True)

    def _gpg(self, payload: bytes, sigfile: Path, at: float) -> Verdict:
        # gpg judges expiry at its own "now": _gpg_verdict re-judges it at `at`.
        cmd = [self.keys.tools["gpg"], "--batch", "--no-tty", "--status-fd", "1"]
        out = self._run([*cmd, "--verify", str(sigfile), "-"], payload)
        return _gpg_verdict(out.returncode, out.stdout + out.stderr, self.keys, at)

    def _ssh(self, payload: bytes, sigfile: Path, at: float) -> Verdict:
        # ssh-keygen's own verify-time, not git's (the committer date, the signer's to write).
        when = time.strftime("-Overify-time=%Y%m%d%H%M%SZ", time.gmtime(at))
        tool, sig, allowed = self.keys.tools["ssh-keygen"], str(sigfile), self.keys.allowed_signers
        find = self._run([tool, "-Y", "find-principals", "-f", str(allowed), "-s", sig, when])
        failed = find.stderr
        for principal in find.stdout.splitlines() if find.returncode == 0 else []:
            args = ["-f", str(allowed), "-I", principal, "-n", "git", "-s", sig, when]
            out = self._run([tool, "-Y", "verify", *args], payload)
            good = _SSH_GOOD.search(out.stdout)
            if out.returncode == 0 and good:
                who, algo, fp = good.groups()
                return Verdict(True, f"signed by {who} (SSH {algo} {fp})")
            failed += out.stdout + out.stderr
        anyone = self._run([tool, "-Y", "check-novalidate", "-n", "git", "-s", sig], payload)
        return _ssh_failure(failed, anyone.stdout + anyone.stderr)

    def _run(self, cmd: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            cmd,
            input=stdin,
            env=keys.gpg_env(self.keys.gnupghome),
            capture_output=True,
            timeout=keys.TIMEOUT,
            check=False,
        )
        return subprocess.CompletedProcess(
            cmd,
            out.returncode,
            out.stdout.decode(errors="replace"),
            out.stderr.decode(errors="replace"),
        )

    def _git(self, repo: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        # Bytes: a signed payload must reach the checker exactly as stored. No user or system
        # git config either.
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
        return subprocess.run(
            [self.keys.tools["git"], "-C", repo, *args],
            env=env,
            capture_output=True,
            timeout=keys.TIMEOUT,
            check=False,
        )


def split_commit(raw: bytes) -> tuple[bytes, bytes]:
    """(payload, signature) of a commit object as git splits them: the object without its
    ``gpgsig*`` headers (continuation lines included), and the signature of the repository's
    own hash algorithm (``gpgsig``, or ``gpgsig-sha256`` where ``tree`` is a SHA-256 id);
    an empty signature when unsigned."""
    head, blank, body = raw.partition(b"\n\n")
    tree = head.split(b"\n", 1)[0].removeprefix(b"tree ")
    own = b"gpgsig-sha256 " if len(tree) == 64 else b"gpgsig "
    payload: list[bytes] = []
    signature: list[bytes] = []
    within = ""  # "own" or "other": the gpgsig header whose continuation lines (" ...") follow
    for line in head.split(b"\n"):
        if within and line.startswith(b" "):
            if within == "own":
                signature.append(line[1:])
            continue
        within = "own" if line.startswith(own) else "other" if line.startswith(b"gpgsig") else ""
        if within == "own":
            signature.append(line[len(own) :])
        elif not within:
            payload.append(line)
    sig = b"\n".join(signature) + b"\n" if signature else b""
    return b"\n".join(payload) + blank + body, sig


def split_tag(raw: bytes) -> tuple[bytes, bytes]:
    """(payload, signature) of a tag object: the signature is its trailing armored block."""
    starts = [m.start() for m in _TAG_SIG.finditer(raw)]
    return (raw[: starts[-1]], raw[starts[-1] :]) if starts else (raw, b"")


def _line(text: str) -> str:
    return " ".join(text.split())[:160] or "no output"


def _gpg_verdict(rc: int, text: str, keyset: KeySet, at: float) -> Verdict:
    status: dict[str, str] = {}
    for name, rest in _STATUS.findall(text):
        status.setdefault(name, rest or "")
    valid = status.get("VALIDSIG", "").split()
    signing, fpr = (valid[0], valid[-1]) if valid else ("", "")  # signing (sub)key, primary
    if "BADSIG" in status:
        keyid = status["BADSIG"].split()[0]
        return untrusted(
            "bad_signature",
            f"signature check failed: bad signature by key {keyid} (altered after signing)",
        )
    if "REVKEYSIG" in status or {signing, fpr} & keyset.revoked:
        who = fpr or status["REVKEYSIG"]
        return untrusted("revoked_key", f"signature by a revoked key {who}")
    if "EXPSIG" in status:  # the signature's own expiry: the signer's limit, kept at now
        return untrusted("expired_key", f"expired signature by key {fpr or status['EXPSIG']}")
    if "ERRSIG" in status:
        fields = status["ERRSIG"].split()
        # ERRSIG <keyid> <pkalgo> <hashalgo> <class> <time> <rc> [<fpr>]; rc 9: no public key
        who = fields[6] if len(fields) > 6 and fields[6] != "-" else fields[0]
        if len(fields) > 5 and fields[5] == "9":
            return untrusted("unknown_key", f"signed by an unknown key {who}")
        return untrusted("error", f"signature check failed: gpg error {fields[5:6]} for key {who}")
    good = status.get("GOODSIG", status.get("EXPKEYSIG"))  # EXPKEYSIG: expired by gpg's now
    if rc != 0 or good is None or not fpr:
        return untrusted("error", f"signature check failed: {_line(text)}")
    if fpr not in keyset.openpgp:  # cannot happen with a private keyring; belt and braces
        return untrusted("unknown_key", f"signed by an unknown key {fpr}")
    if signing not in keyset.expires or fpr not in keyset.expires:
        return untrusted("error", f"signature check failed: no expiry known for key {signing}")
    if any(0 < keyset.expires[f] <= at for f in (signing, fpr)):
        return untrusted("expired_key", f"signature by an expired key {fpr}")
    signer = good.split(" ", 1)[-1]
    return Verdict(True, f"signed by {signer} (OpenPGP {fpr})")


def _ssh_failure(failed: str, anyone: str) -> Verdict:
    """Why no allowed-signers entry vouched: ``failed`` is what find-principals and verify said,
    ``anyone`` what check-novalidate (the signature on its own, no key trusted) said."""
    good = _SSH_ANY.search(anyone)
    if good is None:
        if "incorrect signature" in anyone or "verification failed" in anyone.lower():
            return untrusted("bad_signature", f"signature check failed: {_line(anyone)}")
        return untrusted("error", f"signature check failed: {_line(anyone)}")
    fp = good.group(2)
    if "key has expired" in failed:  # allowed-signers valid-before passed at `at`
        return untrusted("expired_key", f"signature by an expired key {fp}")
    if "key is not yet valid" in failed:  # allowed-signers valid-after still ahead at `at`
        return untrusted("expired_key", f"signature by a key not yet valid {fp}")
    if "No principal matched" in failed:
        return untrusted("unknown_key", f"signed by an unknown key {fp}")
    return untrusted("error", f"signature check failed: {_line(failed)}")


__all__ = ["MODES", "Mode", "TrustConfigError", "Verdict", "Verifier", "split_commit", "split_tag"]
