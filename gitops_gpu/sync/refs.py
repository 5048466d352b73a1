"""A smart-HTTP remote's refs, read in-process: what `git ls-remote` prints, without running git.

An idle poll only asks "did the branch (or a watched ref) move?". Over http(s) that is one GET
of ``info/refs?service=git-upload-pack`` whose body is the ref advertisement in pkt-lines; at
5 s polls the two processes `git ls-remote` starts (git and git-remote-http) were a third of
the idle controller's CPU at 5,000 nodes. Fetches still run git.

Only where a plain GET is what git would do (``usable``: no http config or url rewrite that
applies, no GIT_CONFIG_* or GIT_SSL_NO_VERIFY); elsewhere, and after any answer that is not
an advertisement (a 401 included), the caller runs `git ls-remote`.
"""

from __future__ import annotations

import fnmatch
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping

USER_AGENT = "git/2 (gitops-gpu)"  # some forges serve the smart protocol only to git/*


class RefsError(Exception):
    """The server's answer was not a ref advertisement (or not a success)."""


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


def advertised(
    url: str, headers: Mapping[str, str], timeout: float = 30.0, env: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """ref -> sha for every ref the remote advertises (protocol v0: all refs, peeled tags as
    ``<tag>^{}``). Raises RefsError for an answer that is not one, OSError for the network.
    TLS trusts GIT_SSL_CAINFO when set, as git does, else the system's CAs."""
    request = urllib.request.Request(
        f"{url.rstrip('/')}/info/refs?service=git-upload-pack",
        headers={"User-Agent": USER_AGENT, **headers},
    )
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=env.get("GIT_SSL_CAINFO") or None)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            kind = resp.headers.get("Content-Type", "")
            body = resp.read()
    except urllib.error.HTTPError as exc:
        raise RefsError(f"HTTP {exc.code} {exc.reason}") from None
    if kind != "application/x-git-upload-pack-advertisement":
        raise RefsError(f"not a smart-HTTP ref advertisement (Content-Type {kind!r})")
    return parse(body)


def parse(body: bytes) -> dict[str, str]:
    """The refs of a smart-HTTP advertisement: ``# service=...`` and a flush, then one
    ``<sha> <ref>`` pkt-line per ref (the first carrying capabilities after a NUL), a flush."""
    lines = list(_pkt_lines(body))
    if not lines or not (lines[0] or b"").startswith(b"# service=git-upload-pack"):
        raise RefsError("no '# service=git-upload-pack' line")
    refs: dict[str, str] = {}
    for line in lines[1:]:
        if line is None:
            continue  # a flush
        text = line.split(b"\0", 1)[0].rstrip(b"\n").decode()
        sha, _, ref = text.partition(" ")
        if len(sha) != 40 or not ref:
            raise RefsError(f"not a ref line: {text[:80]!r}")
        if ref != "capabilities^{}":  # an empty repo advertises only its capabilities
            refs[ref] = sha
    return refs


def _pkt_lines(body: bytes) -> Iterable[bytes | None]:
    """pkt-line payloads; None for a flush (0000)."""
    at = 0
    while at < len(body):
        try:
            size = int(body[at : at + 4], 16)
        except ValueError:
            raise RefsError(f"bad pkt-line length at byte {at}") from None
        if size == 0:
            yield None
            at += 4
            continue
        if size < 4 or at + size > len(body):
            raise RefsError(f"bad pkt-line length {size} at byte {at}")
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
