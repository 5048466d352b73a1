"""Hostile peers on 127.0.0.1: a git server, a forge and a Prometheus that answer as attackers
would (dev testbed/hostile_peer.py), against the real clients: GitSource (in-process refs and
real git), the forge backends' HttpClient and the gate.metrics Prometheus client.

Each case ends in a clear error on that source or gate, within its limit, with the last good
state kept; no token reaches another origin.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitops_gpu import peer_limits
from gitops_gpu.analysis import Prometheus
from gitops_gpu.errors import SourceError, StatusBackendError
from gitops_gpu.rollout.forge import ForgeBackend
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.github import GitHubBackend
from gitops_gpu.rollout.gitlab import GitLabBackend
from gitops_gpu.rollout.httpclient import Retry
from gitops_gpu.rollout.status import CommitStatus
from gitops_gpu.sync.source import TOKEN_ENV, GitSource, credentials_env
from gitops_gpu_dev.testbed import hostile_peer as hp
from gitops_gpu_dev.testbed.githttp import GitHTTP

TOKEN = "tok-hostile-peers-0123456789"
SHA = "a" * 40


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Small limits, so each case is quick; restored after."""
    small = dataclasses.replace(
        peer_limits.PeerLimits(),
        refs_bytes=1 << 20,
        refs_deadline=2.0,
        response_bytes=1 << 20,
        response_deadline=2.0,
        statuses=300,
        response_objects=5_000,
    )
    monkeypatch.setattr(peer_limits, "LIMITS", small)
    yield


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[GitHTTP, Path]]:
    """A real `git http-backend` remote serving repo ``fleet.git`` with one commit on main."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    git(
        work,
        "-c",
        "user.email=t@x",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "one",
    )
    root = tmp_path / "served"
    root.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(work), str(root / "fleet.git"))
    git(work, "remote", "add", "origin", str(root / "fleet.git"))
    server = GitHTTP(root)
    try:
        yield server, work
    finally:
        server.stop()


@pytest.fixture
def peers() -> Iterator[list[hp.HostilePeer]]:
    made: list[hp.HostilePeer] = []
    yield made
    for peer in made:
        peer.stop()


def _peer(peers: list[hp.HostilePeer], script: hp.Script) -> hp.HostilePeer:
    peer = hp.HostilePeer(script)
    peers.append(peer)
    return peer


# -- the git server -------------------------------------------------------------------------------


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "git"])
def test_a_branch_name_that_is_not_utf8_stops_no_poll(
    remote: tuple[GitHTTP, Path], tmp_path: Path, in_process: bool
) -> None:
    server, work = remote
    subprocess.run(
        ["git", "push", "-q", "origin", b"HEAD:refs/heads/feature-\xff", b"HEAD:refs/tags/v-\xff"],
        cwd=work,
        check=True,
    )
    # Tag mode: `git ls-remote ... refs/tags/*` prints the bad tag name too.
    src = GitSource(server.url("fleet.git"), tmp_path / "cache", tags=True)
    if not in_process:
        src._http_refs = False  # what `git ls-remote` prints, parsed as bytes
    first = src.poll()
    assert first.head == git(work, "rev-parse", "HEAD")
    assert src.refused["ref_name"] == 1
    git(
        work,
        "-c",
        "user.email=t@x",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "two",
    )
    git(work, "push", "-q", "origin", "main")
    moved = src.poll()
    assert moved.changed and moved.head == git(work, "rev-parse", "HEAD")
    assert [c.subject for c in src.commits()] == ["two", "one"]


def test_an_endless_ref_advertisement_is_cut_at_the_cap_and_the_commits_stay(
    remote: tuple[GitHTTP, Path], peers: list[hp.HostilePeer], tmp_path: Path, limits: None
) -> None:
    server, _work = remote
    peer = _peer(peers, hp.forward(server.url("")[:-1]))
    src = GitSource(f"{peer.base}/fleet.git", tmp_path / "cache")
    good = src.poll().head
    peer.script = hp.endless_refs()
    t = time.monotonic()
    with pytest.raises(SourceError, match="larger than 1048576 bytes") as err:
        src.poll()
    assert time.monotonic() - t < 2.0 + 5  # the cap, not the deadline, ended it
    assert "--max-refs-bytes" in err.value.fix
    assert src.refused["too_large"] == 1
    assert src.local_head() == good and [c.subject for c in src.commits()] == ["one"]
    assert src._http_refs is True  # the next poll reads in-process again, not with git


def test_a_dribbled_ref_advertisement_is_cut_at_the_deadline(
    peers: list[hp.HostilePeer], tmp_path: Path, limits: None
) -> None:
    peer = _peer(peers, hp.slow_refs(every=0.4))  # 40 bytes: 16 s, never 2 s without a byte
    src = GitSource(f"{peer.base}/fleet.git", tmp_path / "cache")
    t = time.monotonic()
    with pytest.raises(SourceError, match="no complete answer within 2s"):
        src.poll()
    assert time.monotonic() - t < 2.0 + 3
    assert src.refused["deadline"] == 1


def test_git_itself_is_bounded_where_it_reads_the_refs(
    peers: list[hp.HostilePeer], tmp_path: Path, limits: None
) -> None:
    # The same endless answer to `git ls-remote` (an http config hands the remote to git).
    peer = _peer(peers, hp.slow_refs(every=0.4))
    src = GitSource(f"{peer.base}/fleet.git", tmp_path / "cache")
    src._http_refs = False
    t = time.monotonic()
    with pytest.raises(SourceError, match="ran past 2s"):
        src.poll()
    assert time.monotonic() - t < 2.0 + 3
    assert src.refused["deadline"] == 1


def test_the_git_token_never_follows_a_redirect_to_another_origin(
    remote: tuple[GitHTTP, Path],
    peers: list[hp.HostilePeer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, _work = remote
    sink = _peer(peers, hp.forward(server.url("")[:-1]))  # another port: another origin
    front = _peer(peers, hp.redirect(lambda path: sink.base + path))
    url = f"{front.base}/fleet.git"
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    src = GitSource(url, tmp_path / "cache")
    with pytest.raises(SourceError, match="302") as err:
        src.poll()  # in-process: not followed; then git: refused (http.followRedirects=false)
    assert "set the fleet repo URL to where it redirects" in err.value.fix
    assert src.refused["redirect"] == 1
    with pytest.raises(SourceError):
        src.fetch()  # git fetch with the same environment
    assert TOKEN not in str(err.value)
    assert sink.seen == [] and sink.authorizations() == []
    assert front.authorizations()  # the configured origin did get it: the test could fail
    # git alone, with the environment the controller gives it (fleet remote and git notes)
    env, _ = credentials_env(url)
    ran = subprocess.run(
        ["git", "ls-remote", url],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        check=False,
    )
    assert ran.returncode != 0 and sink.authorizations() == []


def test_without_a_token_a_redirect_is_followed_as_git_would(
    remote: tuple[GitHTTP, Path], peers: list[hp.HostilePeer], tmp_path: Path
) -> None:
    server, work = remote
    sink = _peer(peers, hp.forward(server.url("")[:-1]))
    front = _peer(peers, hp.redirect(lambda path: sink.base + path))
    src = GitSource(f"{front.base}/fleet.git", tmp_path / "cache")
    assert src.poll().head == git(work, "rev-parse", "HEAD")
    assert src._http_refs is False  # git reads it from now on


# -- the forge ------------------------------------------------------------------------------------


def _gitea(peer: hp.HostilePeer) -> GiteaBackend:
    return GiteaBackend(peer.base, "o", "r", TOKEN, retry=Retry(attempts=3, base_delay=0.01))


def test_a_huge_status_list_is_a_clear_error_read_once(
    peers: list[hp.HostilePeer], limits: None
) -> None:
    item = {"id": 1, "status": "success", "context": "x", "description": "d" * 900}
    body = json.dumps([item] * 6000).encode()  # 5.6 MB: over the 1 MiB cap
    peer = _peer(peers, hp.oversized("application/json", body))
    with pytest.raises(StatusBackendError, match="larger than 1048576 bytes") as err:
        _gitea(peer).list_statuses(SHA)
    assert "--max-response-bytes" in err.value.fix
    assert len(peer.seen) == 1  # a limit passed is not retried
    assert TOKEN not in str(err.value)


def test_a_dribbled_forge_answer_is_cut_at_the_deadline(
    peers: list[hp.HostilePeer], limits: None
) -> None:
    peer = _peer(peers, hp.dribble("application/json", b"[" + b" " * 100 + b"]", 0.4))
    t = time.monotonic()
    with pytest.raises(StatusBackendError, match="no complete answer within 2s"):
        _gitea(peer).list_statuses(SHA)
    assert time.monotonic() - t < 2.0 + 3


def test_many_small_json_values_are_refused_before_parsing(
    peers: list[hp.HostilePeer], limits: None
) -> None:
    peer = _peer(peers, hp.oversized("application/json", b"[" + b"[]," * 20_000 + b"[]]"))
    with pytest.raises(StatusBackendError, match="more than 5000 JSON objects"):
        _gitea(peer).list_statuses(SHA)
    deep = _peer(peers, hp.oversized("application/json", b"[" * 3000 + b"]" * 3000))
    with pytest.raises(StatusBackendError, match="nested too deep"):
        _gitea(deep).list_statuses(SHA)


def test_pages_without_end_are_capped_in_statuses(
    peers: list[hp.HostilePeer], limits: None
) -> None:
    def pages(req: hp.BaseHTTPRequestHandler, peer: hp.HostilePeer) -> None:
        page = int(req.path.split("page=")[1].split("&")[0])
        items = [{"id": page * 100 + i, "status": "success", "context": "c"} for i in range(50)]
        body = json.dumps(items).encode()
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    peer = _peer(peers, pages)
    with pytest.raises(StatusBackendError, match="more than 300 statuses") as err:
        _gitea(peer).list_statuses(SHA)
    assert "--max-statuses" in err.value.fix
    assert len(peer.seen) == 7  # 350 read, then it stopped


def _forge(kind: str, base: str) -> ForgeBackend:
    retry = Retry(attempts=3, base_delay=0.01)
    if kind == "github":
        return GitHubBackend("o", "r", TOKEN, api_url=base, retry=retry)
    if kind == "gitlab":
        return GitLabBackend(base, "g/r", TOKEN, retry=retry)
    return GiteaBackend(base, "o", "r", TOKEN, retry=retry)


@pytest.mark.parametrize("kind", ["gitea", "github", "gitlab"])
def test_the_forge_token_never_follows_a_redirect(peers: list[hp.HostilePeer], kind: str) -> None:
    sink = _peer(peers, hp.oversized("application/json", b"[]"))
    front = _peer(peers, hp.redirect(lambda path: sink.base + path, status=307))
    backend = _forge(kind, front.base)
    with pytest.raises(StatusBackendError, match=r"redirect to http://127\.0\.0\.1") as err:
        backend.list_statuses(SHA)
    assert "where it redirects" in err.value.fix
    assert backend.in_team("org/team", "someone") is False  # on doubt, not a member
    with pytest.raises(StatusBackendError):
        backend.set_status(CommitStatus(SHA, "gitops-gpu/canary", "success", "d"))
    assert sink.seen == []  # never contacted, so no token there
    # the configured origin did get it, on every request (Authorization or PRIVATE-TOKEN)
    assert len(front.seen) == 3
    assert all(any(TOKEN in v for v in seen.headers.values()) for seen in front.seen)


# -- Prometheus -----------------------------------------------------------------------------------


def test_prometheus_answers_are_bounded(peers: list[hp.HostilePeer], limits: None) -> None:
    series = {"metric": {"Hostname": "n" * 200}, "value": [0, "1"]}
    huge = json.dumps({"data": {"resultType": "vector", "result": [series] * 8000}}).encode()
    big = _peer(peers, hp.oversized("application/json", huge))
    answer = Prometheus(big.base, timeout=5).query("up", "max")
    assert answer.value is None and answer.error and "larger than 1048576" in answer.problem
    slow = _peer(peers, hp.dribble("application/json", b" " * 100, 0.4))
    t = time.monotonic()
    answer = Prometheus(slow.base, timeout=5).query("up", "max")
    assert answer.value is None and not answer.error and "within 2s" in answer.problem
    assert time.monotonic() - t < 2.0 + 3
    sink = _peer(peers, hp.oversized("application/json", b"{}"))
    moved = _peer(peers, hp.redirect(lambda path: sink.base + path))
    answer = Prometheus(moved.base, timeout=5).query("up", "max")
    assert answer.value is None and "302" in answer.problem and sink.seen == []
