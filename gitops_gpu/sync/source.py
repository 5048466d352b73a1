"""Git source for the fleet repo: cheap change detection, a local cache, isolated checkouts.

- `poll()` reads the remote's refs first (in-process over smart HTTP, see refs.py; else `git
  ls-remote`) and fetches only when the remote head moved: an idle poll is one round trip.
- Each commit is checked out into its own directory by `git archive` of the commit's tree,
  so a half-fetched or rewritten branch can never yield a mixed tree.
- A force-push (the old head is no longer an ancestor of the new one) is reported.
- An unreachable remote raises SourceError naming the remote and reason; the cache and the
  last good commit stay usable.
Credentials (https token or ssh key) come from the environment or a file and are passed to git
through environment variables only, never on a command line or in a log line.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import logging
import os
import re
import shutil
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from gitops_gpu import peer_limits
from gitops_gpu.errors import SourceError
from gitops_gpu.fleet import export
from gitops_gpu.sync import gitproc, refs

log = logging.getLogger(__name__)
TOKEN_ENV = "GITOPS_GPU_GIT_TOKEN"
TOKEN_FILE_ENV = "GITOPS_GPU_GIT_TOKEN_FILE"
SSH_KEY_ENV = "GITOPS_GPU_GIT_SSH_KEY_FILE"


@dataclass(frozen=True)
class BranchCommit:
    """A commit of the tracked branch as git log shows it (the rollout machine's input is
    rollout.inputs.Commit: the same sha with its preflight verdict)."""

    sha: str
    subject: str
    timestamp: int


@dataclass(frozen=True)
class PollResult:
    head: str
    changed: bool
    rewritten: bool  # the previous head is no longer in the branch's history
    previous: str | None


def _redact(text: str, secret: str | None) -> str:
    text = re.sub(r"(https?://)[^@/\s]+@", r"\1***@", text)
    return text.replace(secret, "***") if secret else text


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``https://user:token@host/x`` -> (``https://host/x``, user, token); others unchanged.

    Credentials in a URL would land in the mirror's ``.git/config`` and in every command line;
    they are moved into the environment instead (see credentials_env)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url, None, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return clean, urllib.parse.unquote(user) or None, urllib.parse.unquote(password) or None


class NotFetchedError(SourceError):
    """A commit the mirror does not have (yet): pushed after the last fetch, or elsewhere."""


def absolute_local(url: str) -> str:
    """A local repo path as an absolute one (git runs in the cache, where "." is not the
    user's repo); URLs and scp-like ``host:path`` remotes are unchanged. Symlinks are kept as
    given: the path names the mirror, and must name the same one when its target is gone."""
    if "://" in url or re.match(r"^[^/]+:", url) or not Path(url).exists():
        return url
    return os.path.abspath(url)


def authorization(url: str) -> tuple[str | None, str | None]:
    """The HTTP Authorization value for the remote's token, and the token (to redact).

    The token is GITOPS_GPU_GIT_TOKEN, GITOPS_GPU_GIT_TOKEN_FILE, or the password of the URL;
    it is sent as Basic auth, and only to an http(s) remote."""
    _clean, user, url_token = split_userinfo(url)
    token = os.environ.get(TOKEN_ENV) or url_token
    token_file = os.environ.get(TOKEN_FILE_ENV)
    if not token and token_file:
        token = Path(token_file).read_text().strip()
    if not token or not url.startswith(("https://", "http://")):
        return None, token
    basic = base64.b64encode(f"{user or 'x-access-token'}:{token}".encode()).decode()
    return f"Basic {basic}", token


def credentials_env(url: str) -> tuple[dict[str, str], str | None]:
    """Environment for git carrying credentials; returns (env, secret to redact).

    The token (see ``authorization``) travels as an http.extraHeader through GIT_CONFIG_*
    variables: never on disk, never on a command line. With it, git follows no redirect: after
    one, git sends the extra header on to the origin it was sent to (its protocol-v2 POST does),
    and the token must never leave the configured origin."""
    env: dict[str, str] = {"GIT_TERMINAL_PROMPT": "0"}
    header, token = authorization(url)
    if header is not None:
        env.update(
            {
                "GIT_CONFIG_COUNT": "2",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: {header}",
                "GIT_CONFIG_KEY_1": "http.followRedirects",
                "GIT_CONFIG_VALUE_1": "false",
            }
        )
    key = os.environ.get(SSH_KEY_ENV)
    if key:
        env["GIT_SSH_COMMAND"] = f"ssh -i {key} -o IdentitiesOnly=yes -o BatchMode=yes"
    return env, token


class GitSource:
    """A fleet repo remote, mirrored into ``cache_dir``."""

    def __init__(
        self, url: str, cache_dir: Path, branch: str = "main", *, tags: bool = False
    ) -> None:
        self._env, self._secret = credentials_env(str(url))
        self._authorization = authorization(str(url))[0]  # for refs read in-process
        # what is stored and shown: no credentials; a local path made absolute
        self.url = absolute_local(split_userinfo(str(url))[0])
        self.branch = branch
        key = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        self.mirror_dir = cache_dir / "git" / key
        self.checkout_root = cache_dir / "checkouts" / key
        self._lock = threading.Lock()
        self.last_good: str | None = None
        self.ls_remote_calls = 0
        self.fetch_calls = 0
        self._repo: git.Repo | None = None
        # Tag-mode signature checks read the tags pointing at a commit; a tag is often pushed
        # after its commit, so the poll also watches refs/tags and fetches when they change.
        self.tags = tags
        self._remote_tags: str | None = None  # the tag refs as of the last fetch
        # Other refs the poll's one ls-remote also reports (the git-notes status record's ref):
        # their remote shas as of the last poll, "" for absent; None when that poll failed.
        self.watched: tuple[str, ...] = ()
        self.remote_refs: dict[str, str] | None = None
        # The mirror is ours alone and changes only in fetch(): an idle poll runs no local git.
        self._head: str | None = None
        self._history: tuple[str | None, int, list[BranchCommit]] | None = None
        self._http_refs: bool | None = None  # refs read in-process (refs.py); None: not decided
        # A ref read refused (too large, too slow, malformed, names skipped): reason -> count,
        # and the controller's metric hook.
        self.refused: collections.Counter[str] = collections.Counter()
        self.on_refused: Callable[[str], None] | None = None
        self._skipped_said: frozenset[bytes] = frozenset()

    # -- mirror ---------------------------------------------------------------------------------
    @property
    def repo(self) -> git.Repo:
        """The bare mirror; its ``origin`` is the fleet remote (status notes are pushed there)."""
        if self._repo is None:
            if not (self.mirror_dir / "HEAD").exists():
                self.mirror_dir.mkdir(parents=True, exist_ok=True)
                git.Repo.init(self.mirror_dir, bare=True)
            self._repo = git.Repo(self.mirror_dir)
            remotes = {r.name: r for r in self._repo.remotes}
            if "origin" not in remotes:
                self._repo.create_remote("origin", self.url)
            elif remotes["origin"].url != self.url:
                remotes["origin"].set_url(self.url)
        return self._repo

    def _git(self, *args: str) -> str:
        try:
            out: str = self.repo.git.execute(
                ["git", *args],
                env={**os.environ, **self._env},
                # a server dribbling a pack would hold the pass forever
                kill_after_timeout=peer_limits.current().fetch_deadline,
            )
        except git.GitCommandError as exc:
            reason = _redact(str(exc.stderr or exc).strip(), self._secret)
            raise SourceError(
                f"git {args[0]} {_redact(self.url, self._secret)} failed: {reason}",
                fix="check the remote URL, network and credentials",
            ) from None
        return out

    def remote_head(self) -> str:
        """The tracked branch's head on the remote (one `ls-remote`, no fetch)."""
        return self._ls_remote()[0]

    def _ls_remote(self) -> tuple[str, str]:
        """(branch head, the remote's tag refs as text; "" unless ``tags``): one round trip,
        which also updates ``remote_refs``."""
        self.ls_remote_calls += 1
        self.remote_refs = None
        patterns = [
            f"refs/heads/{self.branch}",
            *(["refs/tags/*"] if self.tags else []),
            *self.watched,
        ]
        found = self._advertised(patterns)
        if found is None:
            found = self._git_ls_remote(patterns)
        head, tags = None, []
        refs = dict.fromkeys(self.watched, "")
        for sha, ref in found:
            line = f"{sha}\t{ref}"
            if ref == f"refs/heads/{self.branch}":
                head = sha
            elif ref.startswith("refs/tags/"):
                tags.append(line)
            if ref in refs:
                refs[ref] = sha
        self.remote_refs = refs
        if head is None:
            raise SourceError(
                f"branch {self.branch!r} not found on {_redact(self.url, self._secret)}",
                fix="create the branch or pass the right --branch",
            )
        return head, "\n".join(sorted(tags))

    def _advertised(self, patterns: list[str]) -> list[tuple[str, str]] | None:
        """(sha, ref) as `git ls-remote URL <patterns>` prints them, read in-process where that
        is the same thing (refs.usable); None: run git. A server that does not answer as a
        smart-HTTP remote (or redirects) is left to git from then on; a network error to git
        this once (its error). A bounded read that fails (too large, too slow, malformed)
        raises SourceError: the last fetched commits stay in use, git would fare no better."""
        if self._http_refs is None:
            config = self.repo.git.execute(["git", "config", "--list"])
            self._http_refs = refs.usable(self.url, str(config).splitlines())
        if not self._http_refs:
            return None
        headers = {"Authorization": self._authorization} if self._authorization else {}
        try:
            advertised = refs.advertised(self.url, headers)
        except refs.RefsError as exc:
            if exc.to_git:
                self._refuse(exc.reason, f"reading its refs with git from now on: {exc}")
                self._http_refs = False
                return None
            self._refuse(exc.reason, str(exc))
            raise SourceError(
                f"refs of {_redact(self.url, self._secret)} refused: {exc}",
                fix="check the git server (or raise --max-refs-bytes / --refs-deadline); the "
                "last fetched commits stay in use",
            ) from None
        except OSError:
            return None
        self._skipped(advertised.skipped)
        return refs.matching(advertised.refs, patterns)

    def _git_ls_remote(self, patterns: list[str]) -> list[tuple[str, str]]:
        """`git ls-remote`, bounded like the in-process read and parsed as bytes."""
        limits = peer_limits.current()
        _ = self.repo  # the mirror: git reads its config, as `git ls-remote` in it would
        try:
            out = gitproc.run_bounded(
                ["ls-remote", self.url, *patterns],
                cwd=self.mirror_dir,
                env={**os.environ, **self._env},
                max_bytes=limits.refs_bytes,
                deadline=limits.refs_deadline,
            )
        except gitproc.GitRunError as exc:
            reason = _redact(exc.stderr or str(exc), self._secret)
            fix = "check the remote URL, network and credentials"
            if re.search(r"returned error: 30[12378]", reason) and self._authorization:
                fix = (
                    "the remote answered with a redirect, and a token is never sent on to "
                    "another URL: set the fleet repo URL to where it redirects"
                )
            if exc.reason != "failed":
                self._refuse(exc.reason, str(exc))
                fix = "check the git server (or raise --max-refs-bytes / --refs-deadline)"
            raise SourceError(
                f"git ls-remote {_redact(self.url, self._secret)} failed: {reason}", fix=fix
            ) from None
        found, skipped = [], []
        for line in out.splitlines():
            sha, _, name = line.partition(b"\t")
            ref = refs.ref_name(name)
            if ref is None:
                skipped.append(name)
            else:
                found.append((sha.decode("ascii", "replace"), ref))
        self._skipped(tuple(skipped))
        return found

    def _refuse(self, reason: str, message: str) -> None:
        self.refused[reason] += 1
        if self.on_refused is not None:
            self.on_refused(reason)
        log.warning("refs of %s: %s", _redact(self.url, self._secret), message)

    def _skipped(self, names: tuple[bytes, ...]) -> None:
        """Ref names no branch we track can have: counted each poll, said when they change."""
        if not names:
            return
        self.refused["ref_name"] += 1
        if self.on_refused is not None:
            self.on_refused("ref_name")
        if frozenset(names) != self._skipped_said:
            self._skipped_said = frozenset(names)
            shown = ", ".join(repr(n)[2:-1] for n in names[:5])
            log.warning(
                "refs of %s: skipped %d ref names that are not UTF-8 or hold control "
                "characters: %s",
                _redact(self.url, self._secret),
                len(names),
                shown,
            )

    def local_head(self) -> str | None:
        if self._head is None:
            try:
                self._head = str(self.repo.git.rev_parse(f"refs/remotes/origin/{self.branch}"))
            except git.GitCommandError:
                return None
        return self._head

    def fetch(self) -> None:
        self.fetch_calls += 1
        self._head = None
        tags = ["+refs/tags/*:refs/tags/*"] if self.tags else []
        self._git(
            "fetch",
            "--prune",
            "--force",
            self.url,
            f"+refs/heads/{self.branch}:refs/remotes/origin/{self.branch}",
            *tags,
        )

    def fetch_ref(self, ref: str, sha: str) -> None:
        """Fetch one more ref of the remote (a pull request's head, ``refs/pull/7/head``) into
        the mirror under ``refs/gitops-gpu/``, outside the branch's history; SourceError
        unless it brought ``sha``."""
        local = "refs/gitops-gpu/" + ref.removeprefix("refs/")
        with self._lock:
            self._git("fetch", "--force", "--no-tags", self.url, f"+{ref}:{local}")
        if self.resolve(sha) != sha:
            raise SourceError(
                f"{ref} of {_redact(self.url, self._secret)} is not {sha[:12]} (pushed again?)",
                fix="retried on the next look at the pull requests",
            )

    def poll(self) -> PollResult:
        """ls-remote; fetch only when the head moved; detect rewritten history."""
        with self._lock:
            head, tags = self._ls_remote()
            previous = self.local_head()
            if head == previous and tags == (self._remote_tags or ""):
                return PollResult(head, False, False, previous)
            self.fetch()
            self._remote_tags = tags
            rewritten = previous is not None and not self.is_ancestor(previous, head)
            if rewritten and previous is not None:
                log.warning(
                    "history of %s rewritten: %s is no longer an ancestor of %s",
                    self.branch,
                    previous[:12],
                    head[:12],
                )
            return PollResult(head, True, rewritten, previous)

    def is_ancestor(self, older: str, newer: str) -> bool:
        try:
            self.repo.git.merge_base("--is-ancestor", older, newer)
        except git.GitCommandError:
            return False
        return True

    def commits(self, limit: int = 20) -> list[BranchCommit]:
        """The tracked branch's commits, newest first (first-parent history)."""
        head = self.local_head()
        if self._history is not None and self._history[:2] == (head, limit):
            return list(self._history[2])
        out = self.repo.git.log(
            f"refs/remotes/origin/{self.branch}",
            "--first-parent",
            f"-n{limit}",
            "--format=%H%x00%ct%x00%s",
        )
        commits = []
        for line in out.splitlines():
            sha, ts, subject = line.split("\x00", 2)
            commits.append(BranchCommit(sha, subject, int(ts)))
        self._history = (head, limit, commits)
        return list(commits)

    def resolve(self, rev: str) -> str:
        try:
            sha: str = self.repo.git.rev_parse("--verify", f"{rev}^{{commit}}")
        except git.GitCommandError:
            raise SourceError(
                f"revision {rev!r} not found in {_redact(self.url, self._secret)}",
                fix="fetch first or pass a commit that exists",
            ) from None
        return sha

    # -- checkouts ------------------------------------------------------------------------------
    def checkout(self, sha: str) -> Path:
        """An immutable directory holding the fleet files of ``sha`` (cached by sha).

        Raises TreeError (the commit's content is unsafe or too large: its preflight fails)
        or SourceError (the commit is not fetched).
        """
        dest = self.checkout_root / sha
        if dest.exists():
            return dest
        tmp = self.checkout_root / f".{sha}.tmp-{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            result = export.export_commit(self.mirror_dir, sha, tmp)
        except SourceError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise NotFetchedError(
                f"commit {sha[:12]} is not in the fetched history: {exc.args[0]}",
                fix="fetch first (poll) or pass a commit of the tracked branch",
            ) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for note in result.notes:
            log.info("commit %s: %s", sha[:12], note)
        try:
            tmp.rename(dest)
        except OSError:  # another thread won the race: its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
        self._gc_checkouts(keep=8)
        return dest

    def _gc_checkouts(self, keep: int) -> None:
        entries = sorted(
            (p for p in self.checkout_root.iterdir() if not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime,
        )
        for old in entries[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


def default_cache_dir() -> Path:
    env = os.environ.get("GITOPS_GPU_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "gitops-gpu") / "sources"


def open_revision(
    url: str, rev: str | None, branch: str = "main", cache_dir: Path | None = None
) -> tuple[GitSource, str, Path]:
    """Fetch ``url`` if it moved, resolve ``rev`` (default: the branch head), check it out."""
    source = GitSource(url, cache_dir or default_cache_dir(), branch)
    source.poll()
    sha = source.resolve(rev or f"refs/remotes/origin/{branch}")
    return source, sha, source.checkout(sha)
