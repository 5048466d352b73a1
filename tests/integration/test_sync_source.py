"""Git source against real repositories on disk: ls-remote first, isolated checkouts,
force-push detection, an unreachable remote."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.errors import SourceError
from gitops_gpu.sync import gitproc
from gitops_gpu.sync.source import GitSource, NotFetchedError
from gitops_gpu_dev.testbed.githttp import GitHTTP


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def remote(tmp_path: Path) -> tuple[Path, Path]:
    bare = tmp_path / "remote.git"
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "clone", "-q", str(bare), str(work)], check=True, capture_output=True)
    git(work, "config", "user.email", "t@example.com")
    git(work, "config", "user.name", "t")
    git(work, "checkout", "-q", "-b", "main")
    (work / "a.yaml").write_text("one\n")
    git(work, "add", ".")
    git(work, "commit", "-qm", "one")
    git(work, "push", "-q", "origin", "main")
    return bare, work


def _counting_git(src: GitSource, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    ran: list[str] = []
    real = type(src.repo.git).execute  # Git has __slots__: patch the class

    def counting(self: Any, command: list[str], *a: Any, **kw: Any) -> Any:
        ran.append(command[1])
        return real(self, command, *a, **kw)

    monkeypatch.setattr(type(src.repo.git), "execute", counting)
    bounded = gitproc.run_bounded  # ls-remote runs outside GitPython, bounded

    def counting_bounded(args: list[str], **kw: Any) -> bytes:
        ran.append(args[0])
        return bounded(args, **kw)

    monkeypatch.setattr(gitproc, "run_bounded", counting_bounded)
    return ran


def _note_and_commit(work: Path) -> None:
    """Push a git note on refs/notes/x, then a second commit "two" on main."""
    git(work, "notes", "--ref", "x", "add", "-m", "n", "HEAD")
    git(work, "push", "-q", "origin", "refs/notes/x")
    (work / "a.yaml").write_text("two\n")
    git(work, "commit", "-qam", "two")
    git(work, "push", "-q", "origin", "main")


def test_poll_fetches_only_when_head_moves(remote: tuple[Path, Path], tmp_path: Path) -> None:
    bare, work = remote
    src = GitSource(f"file://{bare}", tmp_path / "cache")
    first = src.poll()
    assert first.changed and src.fetch_calls == 1
    again = src.poll()
    assert not again.changed and src.fetch_calls == 1 and src.ls_remote_calls == 2
    (work / "a.yaml").write_text("two\n")
    git(work, "commit", "-qam", "two")
    git(work, "push", "-q", "origin", "main")
    moved = src.poll()
    assert moved.changed and not moved.rewritten and src.fetch_calls == 2
    assert [c.subject for c in src.commits()] == ["two", "one"]


def test_a_tag_pushed_after_its_commit_is_fetched_when_tags_are_watched(
    remote: tuple[Path, Path], tmp_path: Path
) -> None:
    bare, work = remote
    plain = GitSource(f"file://{bare}", tmp_path / "plain")
    src = GitSource(f"file://{bare}", tmp_path / "cache", tags=True)
    head = src.poll().head
    plain.poll()
    # the usual release flow: the commit is already on the branch, the tag comes later
    git(work, "tag", "-a", "v1", "-m", "release v1")
    git(work, "push", "-q", "origin", "v1")
    tagged = src.poll()
    assert tagged.changed and tagged.head == head and not tagged.rewritten
    assert src.repo.git.rev_parse("v1^{commit}") == head
    assert not src.poll().changed and src.fetch_calls == 2  # idle again: one ls-remote a poll
    # without tag watching an idle branch is never fetched again, as before
    assert not plain.poll().changed and plain.fetch_calls == 1


def test_checkout_is_the_exact_tree_of_the_commit(
    remote: tuple[Path, Path], tmp_path: Path
) -> None:
    bare, work = remote
    src = GitSource(str(bare), tmp_path / "cache")
    src.poll()
    old = src.resolve("refs/remotes/origin/main")
    (work / "a.yaml").write_text("two\n")
    (work / "b.yaml").write_text("new\n")
    git(work, "add", ".")
    git(work, "commit", "-qm", "two")
    git(work, "push", "-q", "origin", "main")
    src.poll()
    old_dir = src.checkout(old)
    assert (old_dir / "a.yaml").read_text() == "one\n"
    assert not (old_dir / "b.yaml").exists()
    new_dir = src.checkout(src.resolve("refs/remotes/origin/main"))
    assert (new_dir / "b.yaml").read_text() == "new\n"


def test_a_commit_pushed_after_the_fetch_is_not_fetched_yet_said_once(
    remote: tuple[Path, Path], tmp_path: Path
) -> None:
    bare, work = remote
    src = GitSource(str(bare), tmp_path / "cache")
    src.poll()
    (work / "a.yaml").write_text("later\n")
    git(work, "commit", "-qam", "later")
    git(work, "push", "-q", "origin", "main")
    later = git(work, "rev-parse", "HEAD")
    with pytest.raises(NotFetchedError) as caught:
        src.checkout(later)  # another writer applied it before our next poll
    assert str(caught.value).count("fix:") == 1, str(caught.value)
    src.poll()
    assert (src.checkout(later) / "a.yaml").read_text() == "later\n"


def test_checkout_writes_only_fleet_files_and_never_a_symlink(
    remote: tuple[Path, Path], tmp_path: Path
) -> None:
    """A hostile commit: a link to /etc/passwd, a loop, a blob the fleet format never reads."""
    bare, work = remote
    (work / "notes").mkdir()
    (work / "notes" / "passwd.yaml").symlink_to("/etc/passwd")
    (work / "notes" / "loop.yaml").symlink_to("loop.yaml")
    (work / "big.bin").write_bytes(b"\0" * (3 << 20))
    git(work, "add", ".")
    git(work, "commit", "-qm", "hostile")
    git(work, "push", "-q", "origin", "main")
    src = GitSource(str(bare), tmp_path / "cache")
    src.poll()
    out = src.checkout(src.resolve("refs/remotes/origin/main"))
    assert (out / "a.yaml").read_text() == "one\n"
    assert not (out / "big.bin").exists()
    assert [p for p in out.rglob("*") if p.is_symlink()] == []


def test_force_push_is_detected(remote: tuple[Path, Path], tmp_path: Path) -> None:
    bare, work = remote
    (work / "a.yaml").write_text("two\n")
    git(work, "commit", "-qam", "two")
    git(work, "push", "-q", "origin", "main")
    src = GitSource(str(bare), tmp_path / "cache")
    src.poll()
    git(work, "reset", "-q", "--hard", "HEAD~1")
    (work / "a.yaml").write_text("rewritten\n")
    git(work, "commit", "-qam", "rewritten")
    git(work, "push", "-q", "--force", "origin", "main")
    result = src.poll()
    assert result.changed and result.rewritten


def test_unreachable_remote_names_remote_and_keeps_last_good(
    remote: tuple[Path, Path], tmp_path: Path
) -> None:
    bare, _work = remote
    src = GitSource(str(bare), tmp_path / "cache")
    src.poll()
    good = src.resolve("refs/remotes/origin/main")
    bare.rename(tmp_path / "gone.git")
    with pytest.raises(SourceError) as err:
        src.poll()
    assert str(bare) in str(err.value)
    assert "ls-remote" in str(err.value)
    # The cache still serves the last good commit.
    assert (src.checkout(good) / "a.yaml").read_text() == "one\n"


def test_credentials_never_appear_in_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ghp_SEEKRIT_TOKEN_0123456789"
    monkeypatch.setenv("GITOPS_GPU_GIT_TOKEN", token)
    src = GitSource(f"https://user:{token}@127.0.0.1:9/fleet.git", tmp_path / "cache")
    with pytest.raises(SourceError) as err:
        src.poll()
    assert token not in str(err.value)


def test_credentials_in_the_url_never_reach_disk_or_errors(tmp_path: Path) -> None:
    token = "tok-3f9a7c0d"  # a refused connection: only where the token went matters
    src = GitSource(f"https://ci:{token}@127.0.0.1:9/fleet.git", tmp_path / "cache")
    with pytest.raises(SourceError) as exc:
        src.poll()
    assert token not in str(exc.value)
    config = (src.mirror_dir / "config").read_text()
    assert "127.0.0.1:9/fleet.git" in config and token not in config and "ci:" not in config
    stored = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert stored and all(token.encode() not in p.read_bytes() for p in stored)


def test_an_idle_poll_runs_only_ls_remote_and_reports_watched_refs(
    remote: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare, work = remote
    src = GitSource(f"file://{bare}", tmp_path / "cache")
    src.watched = ("refs/notes/x",)
    src.poll()
    assert src.remote_refs == {"refs/notes/x": ""}  # absent on the remote
    assert [c.subject for c in src.commits()] == ["one"]
    ran = _counting_git(src, monkeypatch)
    src.poll()
    assert [c.subject for c in src.commits()] == ["one"]
    assert src.local_head() == git(bare, "rev-parse", "main")
    assert ran == ["ls-remote"]  # no rev-parse, no log: the mirror only changes by fetch
    _note_and_commit(work)
    src.poll()
    assert src.remote_refs == {"refs/notes/x": git(bare, "rev-parse", "refs/notes/x")}
    assert [c.subject for c in src.commits()] == ["two", "one"]
    assert src.local_head() == git(bare, "rev-parse", "main")


# --- refs read in-process over smart HTTP (sync/refs.py) ----------------------------------------


@pytest.fixture
def served(remote: tuple[Path, Path]) -> Iterator[tuple[GitHTTP, str]]:
    """The remote behind `git http-backend` on 127.0.0.1."""
    bare, _work = remote
    server = GitHTTP(bare.parent)
    try:
        yield server, server.url(bare.name)
    finally:
        server.stop()


def test_an_idle_poll_over_smart_http_runs_no_git(
    remote: tuple[Path, Path],
    served: tuple[GitHTTP, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bare, work = remote
    server, url = served
    src = GitSource(url, tmp_path / "cache")
    src.watched = ("refs/notes/x",)
    assert src.poll().changed
    assert [c.subject for c in src.commits()] == ["one"]  # the mirror's head, cached
    ran = _counting_git(src, monkeypatch)
    polls = server.polls["git"]
    idle = src.poll()
    assert not idle.changed and idle.head == git(bare, "rev-parse", "main")
    assert ran == [] and server.polls["git"] == polls + 1  # one GET, no process
    _note_and_commit(work)
    moved = src.poll()
    assert moved.changed and ran == ["fetch", "merge-base"]  # the move, and force-push check
    assert src.remote_refs == {"refs/notes/x": git(bare, "rev-parse", "refs/notes/x")}
    assert [c.subject for c in src.commits()] == ["two", "one"]


def test_in_process_refs_print_what_git_ls_remote_prints(
    remote: tuple[Path, Path], served: tuple[GitHTTP, str], tmp_path: Path
) -> None:
    _bare, work = remote
    _server, url = served
    git(work, "tag", "-a", "v1", "-m", "v1")  # annotated: advertised peeled too
    git(work, "tag", "light")
    git(work, "checkout", "-q", "-b", "other")
    git(work, "push", "-q", "origin", "--tags", "other")
    src = GitSource(url, tmp_path / "cache", tags=True)
    patterns = ["refs/heads/main", "refs/tags/*", "refs/notes/none", "other"]
    found = src._advertised(patterns)
    assert found is not None
    ours = "\n".join(f"{sha}\t{ref}" for sha, ref in found)
    theirs = git(tmp_path, "ls-remote", url, *patterns)
    assert ours == theirs
    assert "refs/tags/v1^{}" in ours and "refs/heads/other" in ours


def test_git_decides_where_a_plain_get_would_differ(
    remote: tuple[Path, Path],
    served: tuple[GitHTTP, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bare, _work = remote
    _server, url = served
    # A url rewrite in git's config: only git knows where the request really goes.
    src = GitSource(url, tmp_path / "rewritten")
    src.repo.git.execute(["git", "config", f"url.{url}.insteadOf", url])
    ran = _counting_git(src, monkeypatch)
    assert src.poll().head == git(bare, "rev-parse", "main")
    assert "ls-remote" in ran
    # Not a smart-HTTP remote at all: left to git from then on, whose error names it.
    plain = GitSource(url.rsplit("/", 1)[0] + "/missing.git", tmp_path / "missing")
    with pytest.raises(SourceError, match="ls-remote"):
        plain.poll()
    assert plain._http_refs is False
