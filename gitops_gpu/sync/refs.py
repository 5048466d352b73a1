"""A smart-HTTP remote's refs, read in-process: what `git ls-remote` prints, without running git.

An idle poll only asks "did the branch (or a watched ref) move?". Over http(s) that is one GET
of ``info/refs?service=git-upload-pack`` whose body is the ref advertisement in pkt-lines; at
5 s polls the two processes `git ls-remote` starts (git and git-remote-http) were a third of
the idle controller's CPU at 5,000 nodes. Fetches still run git.

Only where a plain GET is what git would do (``usable``: no http config or url rewrite that
applies, no GIT_CONFIG_* or GIT_SSL_NO_VERIFY); elsewhere, and after any answer that is not
an advertisement (a 401 or a redirect included), the caller runs `git ls-remote`.

The server may be hostile: the read is capped in bytes and in total time (peer_limits), follows
no redirect (the Authorization header stays with the configured origin), and treats ref names
as the bytes they are: a name that is not UTF-8 (git accepts ``feature-\\xff``) is skipped.
"""

from __future__ import annotations

import fnmatch
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gitops_gpu import boundedhttp, peer_limits

USER_AGENT = "git/2 (gitops-gpu)"  # some forges serve the smart protocol only to git/*
_SHA = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")  # sha1 or sha256 object names


class RefsError(Exception):
    """The server's answer was not a usable ref advertisement. ``reason``: not_advertisement,
    http_status, redirect (``to_git``: `git ls-remote` should answer), or too_large, deadline,
    malformed (the last good refs stand: git would fare no better)."""

    def __init__(self, message: str, reason: str, *, to_git: bool = False) -> None:
        super().__init__(message)
        self.reason, self.to_git = reason, to_git


def usable(url: str, config: Iterable[str], env: Mapping[str, str] = os.environ) -> bool:
    """Whether a plain GET reads the same refs as `git ls-remote` would. ``config``: `git
    config --list` lines. Not where git would do something else: a non-http(s) URL; git
    configuration in the environment (GIT_CONFIG_*) or GIT_SSL_NO_VERIFY; an ``http.*`` key
    that applies to this URL (proxy, TLS, headers...); a ``url.*.insteadOf`` that rewrites it.
    Credential helpers do not matter: they run only after a 401, which hands the remote to
    git (``advertised`` raises RefsError)."""
    if not url.startswith(("http://", "https://")):
        return False
    if any(k.startswith("GIT_CONFIG") or k == "GIT_SSL_NO_VERIFY" for k in env):
        return False
    for line in config:
        key, _, value = line.partition("=")
        section, _, rest = key.partition(".")
        section = section.lower()
        sub, _, name = rest.rpartition(".")
        if section == "http" and (not sub or url.startswith(sub)):
            return False
        if section == "url" and name.lower() == "insteadof" and url.startswith(value):
            return False
    return True


@dataclass(frozen=True)
class Advertisement:
    refs: dict[str, str]  # ref -> sha
    skipped: tuple[bytes, ...] = ()  # names that are not UTF-8 or hold control characters


def advertised(
    url: str,
    headers: Mapping[str, str],
    *,
    max_bytes: int | None = None,
    deadline: float | None = None,
    env: Mapping[str, str] = os.environ,
) -> Advertisement:
    """Every ref the remote advertises (protocol v0: all refs, peeled tags as ``<tag>^{}``).

    Bounded: at most ``max_bytes`` of answer and ``deadline`` seconds from connect to the last
    byte (peer_limits defaults). No redirect is followed: the credentials in ``headers`` never
    leave this origin. Raises RefsError (``to_git``: whether `git ls-remote` should answer
    instead), OSError for the network. TLS trusts GIT_SSL_CAINFO when set, as git does."""
    limits = peer_limits.current()
    max_bytes = limits.refs_bytes if max_bytes is None else max_bytes
    seconds = limits.refs_deadline if deadline is None else deadline
    request = urllib.request.Request(
        f"{url.rstrip('/')}/info/refs?service=git-upload-pack",
        headers={"User-Agent": USER_AGENT, **headers},
    )
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=env.get("GIT_SSL_CAINFO") or None)
    what = "the ref advertisement"
    try:
        with boundedhttp.deadline(seconds) as dl:
            op = boundedhttp.opener(context)
            with boundedhttp.open_request(op, request, seconds, dl, what) as resp:
                kind = resp.headers.get("Content-Type", "")
                if kind != "application/x-git-upload-pack-advertisement":
                    raise RefsError(
                        f"not a smart-HTTP ref advertisement (Content-Type {kind!r})",
                        "not_advertisement",
                        to_git=True,
                    )
                body = boundedhttp.read_capped(resp, max_bytes, dl, what)
    except boundedhttp.PeerLimitError as exc:
        raise RefsError(str(exc), exc.reason) from None
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            where = _origin(exc.headers.get("Location", "") if exc.headers else "")
            raise RefsError(
                f"HTTP {exc.code} redirect to {where}", "redirect", to_git=True
            ) from None
        raise RefsError(f"HTTP {exc.code} {exc.reason}", "http_status", to_git=True) from None
    return parse(body)


def parse(body: bytes) -> Advertisement:
    """The refs of a smart-HTTP advertisement: ``# service=...`` and a flush, then one
    ``<sha> <ref>`` pkt-line per ref (the first carrying capabilities after a NUL), a flush.
    Ref names are bytes on the wire: one that is not UTF-8 or holds a control character is
    skipped (git would print it; nothing we track can be named so)."""
    lines = list(_pkt_lines(body))
    if not lines or not (lines[0] or b"").startswith(b"# service=git-upload-pack"):
        raise RefsError("no '# service=git-upload-pack' line", "malformed")
    refs: dict[str, str] = {}
    skipped: list[bytes] = []
    for line in lines[1:]:
        if line is None:
            continue  # a flush
        raw = line.split(b"\0", 1)[0].rstrip(b"\n")
        sha, _, name = raw.partition(b" ")
        if not _SHA.fullmatch(sha) or not name:
            raise RefsError(f"not a ref line: {raw[:80]!r}", "malformed")
        ref = ref_name(name)
        if ref is None:
            skipped.append(name)
        elif ref != "capabilities^{}":  # an empty repo advertises only its capabilities
            refs[ref] = sha.decode()
    return Advertisement(refs, tuple(skipped))


def ref_name(name: bytes) -> str | None:
    """The ref name as text, or None when it is not UTF-8 or holds a control character or a
    space (git check-ref-format refuses those; such a name could forge a line downstream)."""
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(c < 0x21 or c == 0x7F for c in name):
        return None
    return text


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme else "a relative location"


def _pkt_lines(body: bytes) -> Iterable[bytes | None]:
    """pkt-line payloads; None for a flush (0000)."""
    at = 0
    while at < len(body):
        try:
            size = int(body[at : at + 4], 16)
        except ValueError:
            raise RefsError(f"bad pkt-line length at byte {at}", "malformed") from None
        if size == 0:
            yield None
            at += 4
            continue
        if size < 4 or at + size > len(body):
            raise RefsError(f"bad pkt-line length {size} at byte {at}", "malformed")
        yield body[at + 4 : at + size]
        at += size


def matching(refs: Mapping[str, str], patterns: Iterable[str]) -> list[tuple[str, str]]:
    """(sha, ref) for the refs `git ls-remote URL <patterns>` would print, in ref order: a
    pattern matches a ref equal to it or ending in ``/<pattern>``, with globs."""
    pats = list(patterns)
    out = []
    for ref in sorted(refs):
        if any(_matches(ref, p) for p in pats):
            out.append((refs[ref], ref))
    return out


def _matches(ref: str, pattern: str) -> bool:
    # git ls-remote's tail match: "main" matches refs/heads/main; globs as fnmatch.
    return fnmatch.fnmatchcase(ref, pattern) or fnmatch.fnmatchcase(ref, f"*/{pattern}")
