"""GitHub, Gitea and GitLab status backends against a strict local fake of each API."""

from __future__ import annotations

import logging
import socket
import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from rollout_fake_forge import OWNER, PROJECT, REPO, FakeForge

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout import pr_comment
from gitops_gpu.rollout.backends import make_backend
from gitops_gpu.rollout.forge import ForgeBackend
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.github import GitHubBackend
from gitops_gpu.rollout.gitlab import GitLabBackend
from gitops_gpu.rollout.httpclient import Retry
from gitops_gpu.rollout.seal import Keyring, generate, parse_public_keys
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    SUCCESS,
    CommitStatus,
    StatusBackend,
    stage_context,
)

TOKEN = "tok_FAKE_9f8e7d6c5b4a_DO_NOT_LEAK"
SHA = "0123456789abcdef0123456789abcdef01234567"
CANARY = stage_context("canary")
FAST = Retry(attempts=3, base_delay=0.001, max_delay=0.01)
KINDS = ["github", "gitea", "gitlab"]


def client(kind: str, url: str, token: str = TOKEN, retry: Retry = FAST) -> StatusBackend:
    source = "the environment variable GITOPS_GPU_STATUS_TOKEN"
    if kind == "github":
        return GitHubBackend(OWNER, REPO, token, api_url=url, retry=retry, token_source=source)
    if kind == "gitea":
        return GiteaBackend(url, OWNER, REPO, token, retry=retry, token_source=source)
    return GitLabBackend(url, PROJECT, token, retry=retry, token_source=source)


@pytest.fixture(params=KINDS)
def forge(request: pytest.FixtureRequest) -> Iterator[FakeForge]:
    fake = FakeForge(request.param, TOKEN)
    yield fake
    fake.close()
    assert fake.errors == [], "requests deviated from the documented API"


def status(state: str, description: str, context: str = CANARY) -> CommitStatus:
    return CommitStatus(SHA, context, state, description, target_url="https://ci.example/r/1")


def test_write_then_read_back(forge: FakeForge) -> None:
    backend = client(forge.kind, forge.url)
    assert backend.list_statuses(SHA) == []
    assert backend.set_status(status(PENDING, "canary: rolling out since 2025-03-02T14:00:00Z"))
    assert backend.set_status(status(SUCCESS, "canary: 2/2 nodes on 580.126.20, soaked 10m"))
    assert backend.set_status(status(FAILURE, "preflight failed", "gitops-gpu/preflight"))
    got = backend.list_statuses(SHA)
    latest = backend.latest(SHA, CANARY)
    assert latest is not None
    assert (latest.state, latest.description) == (
        SUCCESS,
        "canary: 2/2 nodes on 580.126.20, soaked 10m",
    )
    assert latest.target_url == "https://ci.example/r/1" and latest.created_at > 0
    assert got[-1].context == "gitops-gpu/preflight" and got[-1].state == FAILURE


def test_identical_status_is_not_written_twice(forge: FakeForge) -> None:
    backend = client(forge.kind, forge.url)
    assert backend.set_status(status(PENDING, "canary: rolling out"))
    posts = forge.posts
    assert not backend.set_status(status(PENDING, "canary: rolling out"))
    assert forge.posts == posts


def test_idempotence_reads_every_page(forge: FakeForge) -> None:
    # notification-controller#1009: our status sits beyond the first page of the listing.
    forge.add(SHA, CANARY, {"gitlab": "success"}.get(forge.kind, SUCCESS), "canary: 2/2 nodes")
    for n in range(5):
        forge.add(SHA, f"ci/job-{n}", {"gitlab": "success"}.get(forge.kind, SUCCESS))
    backend = client(forge.kind, forge.url)
    assert not backend.set_status(CommitStatus(SHA, CANARY, SUCCESS, "canary: 2/2 nodes"))
    assert forge.posts == 0
    assert not backend.set_status(CommitStatus(SHA, CANARY, PENDING, "canary: rolling out"))
    assert forge.posts == 0  # never pending over a verdict
    gets = [p for m, p in forge.requests if m == "GET"]
    assert len(gets) >= 2 * 3  # three pages, read in full for each write


def test_pages_that_shift_mid_read_yield_no_duplicates(forge: FakeForge) -> None:
    for n in range(5):
        forge.add(SHA, f"ci/job-{n}", {"gitlab": "success"}.get(forge.kind, SUCCESS))
    added: list[int] = []

    def add_one(page: int) -> None:
        if page == 1 and not added:
            added.append(
                forge.add(SHA, "ci/late", {"gitlab": "running"}.get(forge.kind, PENDING))["id"]
            )

    forge.after_page = add_one
    listed = client(forge.kind, forge.url).list_statuses(SHA)
    contexts = [s.context for s in listed]
    assert len(contexts) == len(set(contexts))
    assert set(contexts) >= {f"ci/job-{n}" for n in range(5)}
    assert contexts[:5] == [f"ci/job-{n}" for n in range(5)]  # oldest first


def test_server_errors_are_retried_with_backoff(forge: FakeForge) -> None:
    sleeps: list[float] = []
    backend = client(forge.kind, forge.url)
    backend._client._sleep = sleeps.append  # type: ignore[attr-defined]
    forge.fail = [500, 429]
    assert backend.set_status(status(PENDING, "canary: rolling out"))
    assert len(sleeps) == 2 and all(s <= FAST.max_delay for s in sleeps)
    assert len(forge.jobs[SHA]) == 1


def test_slow_pages_are_read_in_full_once_each(forge: FakeForge) -> None:
    for n in range(5):
        forge.add(SHA, f"ci/job-{n}", {"gitlab": "success"}.get(forge.kind, SUCCESS))
    forge.page_delay = 0.2
    listed = client(forge.kind, forge.url).list_statuses(SHA)
    assert [s.context for s in listed] == [f"ci/job-{n}" for n in range(5)]
    assert len(forge.requests) == 3  # no retry: slow is not failed


def test_retries_are_bounded(forge: FakeForge) -> None:
    forge.fail = [502, 503, 500, 500]
    with pytest.raises(StatusBackendError) as info:
        client(forge.kind, forge.url).list_statuses(SHA)
    assert "after 3 attempts" in str(info.value)
    assert len(forge.requests) == 3


def test_unauthorized_fails_at_once_and_never_shows_the_token(
    forge: FakeForge, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    forge.token = "the-server-expects-another-token"
    backend = client(forge.kind, forge.url)
    for call in (
        lambda: backend.list_statuses(SHA),
        lambda: backend.set_status(status(PENDING, "x")),
    ):
        with pytest.raises(StatusBackendError) as info:
            call()
        text = "".join(traceback.format_exception(info.value)) + repr(info.value) + info.value.fix
        assert "401" in str(info.value)
        assert "GITOPS_GPU_STATUS_TOKEN" in info.value.fix
        assert TOKEN not in text
    assert len(forge.requests) == 2  # no retry on 401
    assert TOKEN not in caplog.text


def test_connection_errors_are_retried_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for kind in KINDS:
        with pytest.raises(StatusBackendError) as info:
            client(kind, f"http://127.0.0.1:{port}").list_statuses(SHA)
        assert "after 3 attempts" in str(info.value)
        assert TOKEN not in "".join(traceback.format_exception(info.value))
    assert TOKEN not in caplog.text
    assert caplog.text.count("retry") == 2 * len(KINDS)


def test_links_to_other_hosts_are_not_followed() -> None:
    forge = FakeForge("github", TOKEN)
    try:
        for n in range(3):
            forge.add(SHA, f"ci/{n}", SUCCESS)
        forge.url = "http://evil.example:1"  # the Link header now points elsewhere
        backend = client("github", f"http://127.0.0.1:{forge.server.server_address[1]}")
        with pytest.raises(StatusBackendError) as info:
            backend.list_statuses(SHA)
        assert "another host" in str(info.value)
        assert len(forge.requests) == 1
    finally:
        forge.close()


def test_gitlab_job_transitions() -> None:
    forge = FakeForge("gitlab", TOKEN)
    try:
        backend = client("gitlab", forge.url)
        assert backend.set_status(status(PENDING, "canary: rolling out since 2025-03-02T14:00:00Z"))
        assert backend.set_status(status(PENDING, "canary: soaking 10m since 2025-03-02T14:03:00Z"))
        assert [j["status"] for j in forge.jobs[SHA]] == ["running"]
        # A third in-progress description cannot be represented on GitLab: skipped, not an error.
        assert not backend.set_status(status(PENDING, "canary: awaiting approval since ..."))
        assert backend.latest(SHA, CANARY).description.startswith("canary: soaking")  # type: ignore[union-attr]
        assert backend.set_status(status(SUCCESS, "canary: 2/2 nodes"))
        assert backend.latest(SHA, CANARY).state == SUCCESS  # type: ignore[union-attr]
        # superseded -> canceled; reads back as error; a new pending then starts a new job
        other = stage_context("production")
        assert backend.set_status(status(PENDING, "production: rolling out", other))
        assert backend.set_status(status(ERROR, "production: superseded by abc1234", other))
        assert forge.jobs[SHA][-1]["status"] == "canceled"
        assert backend.latest(SHA, other).state == ERROR  # type: ignore[union-attr]
        assert backend.set_status(status(PENDING, "production: rolling out again", other))
        assert [j["status"] for j in forge.jobs[SHA] if j["name"] == other] == [
            "canceled",
            "pending",
        ]
    finally:
        forge.close()
        assert forge.errors == []


def test_gitea_warning_reads_as_failure() -> None:
    forge = FakeForge("gitea", TOKEN)
    try:
        forge.add(SHA, CANARY, "warning", "flaky")
        assert client("gitea", forge.url).latest(SHA, CANARY).state == FAILURE  # type: ignore[union-attr]
    finally:
        forge.close()


def test_make_backend_reaches_each_api(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    for kind, spec in [
        ("gitea", "gitea:{url}/fleet-org/gpu-fleet"),
        ("gitlab", "gitlab:{url}/infra/gpu-fleet"),
    ]:
        forge = FakeForge(kind, TOKEN)
        try:
            backend = make_backend(spec.format(url=forge.url), tmp_path, token_file=token_file)
            assert backend.set_status(status(PENDING, "canary: rolling out"))
            assert forge.errors == []
        finally:
            forge.close()


def test_bad_sha_never_reaches_the_server() -> None:
    forge = FakeForge("github", TOKEN)
    try:
        with pytest.raises(StatusBackendError):
            client("github", forge.url).list_statuses("../../admin")
        assert forge.requests == []
    finally:
        forge.close()


def test_identity_fields_and_seals_on_every_forge(forge: FakeForge) -> None:
    """GitHub and Gitea name a status's poster creator.login, GitLab author.username (their
    documented listing shapes, as the fake serves them); the seal rides in target_url and a
    re-sealed identical status is not written again."""
    key = generate("controller")
    ring = Keyring(parse_public_keys(key.public_line(), "controller.pub"))
    backend = client(forge.kind, forge.url)
    backend.trust = lambda s: ring.check(s).signer is not None
    first = key.seal(CommitStatus(SHA, CANARY, PENDING, "canary: rolling out", created_at=10.0))
    again = key.seal(CommitStatus(SHA, CANARY, PENDING, "canary: rolling out", created_at=20.0))
    assert backend.set_status(first)
    assert not backend.set_status(again)  # same content: the seal and time do not count
    forge.add(SHA, CANARY, {"gitlab": "success"}.get(forge.kind, SUCCESS), "forged", creator="eve")
    read = backend.list_statuses(SHA)
    assert [(s.creator, bool(s.seal)) for s in read] == [(forge.user, True), ("eve", False)]
    assert ring.check(read[0]).signer == "controller" and read[0].target_url == ""
    # A forged verdict as the latest never makes the controller's own write redundant.
    assert backend.set_status(key.seal(replace(first, description="canary: soaking")))
    web = {"github": f"{forge.url}/{OWNER}/{REPO}/commit/", "gitea": f"{forge.url}/{OWNER}/"}
    key_of = "target_url"
    posted = forge.jobs[SHA][0][key_of]
    if forge.kind == "gitlab":
        assert posted.startswith(f"{forge.url}/{PROJECT}/-/commit/{SHA}#gitops-gpu-seal=gg1.")
    else:
        assert posted.startswith(web[forge.kind]) and "#gitops-gpu-seal=gg1." in posted


@pytest.mark.parametrize("kind", ["github", "gitlab"])
def test_team_approvers_are_asked_of_the_forge_and_cached(kind: str) -> None:
    fake = FakeForge(kind, TOKEN)
    try:
        team = "gpu-org/platform"
        fake.teams[team] = {"alice": 30, "guest": 10}
        backend = client(kind, fake.url)
        assert isinstance(backend, ForgeBackend)
        assert backend.in_team(team, "alice")
        assert not backend.in_team(team, "mallory")
        assert not backend.in_team("gpu-org/nobody", "alice")
        if kind == "gitlab":
            assert not backend.in_team(team, "guest")  # below Developer
        asked = len(fake.requests)
        assert backend.in_team(team, "alice") and not backend.in_team(team, "mallory")
        assert len(fake.requests) == asked  # answered from the cache within a minute
        assert fake.errors == []
    finally:
        fake.close()


def test_one_pull_request_comment_found_by_its_marker_and_edited_in_place(
    forge: FakeForge,
) -> None:
    """On every forge: comments read across pages, ours found by its marker among others,
    edited with the forge's own method (GitHub/Gitea PATCH, GitLab PUT of the note)."""
    backend = client(forge.kind, forge.url)
    assert isinstance(backend, ForgeBackend)
    forge.comments[7] = [{"id": i, "body": f"review {i}"} for i in range(1, 4)]  # two pages
    first = f"{pr_comment.MARKER}\nplan v1"
    assert backend.upsert_comment(7, first) == "created"
    assert backend.upsert_comment(7, first) == "unchanged"
    assert backend.upsert_comment(7, f"{pr_comment.MARKER}\nplan v2") == "edited"
    bodies = [c["body"] for c in forge.comments[7]]
    assert bodies == ["review 1", "review 2", "review 3", f"{pr_comment.MARKER}\nplan v2"]
    edit = "PUT" if forge.kind == "gitlab" else "PATCH"
    assert sum(1 for method, _ in forge.requests if method == edit) == 1


def test_open_pull_requests_against_the_branch_and_their_merge_commit(forge: FakeForge) -> None:
    backend = client(forge.kind, forge.url)
    assert isinstance(backend, ForgeBackend)
    head, other, base, merge = "1" * 40, "2" * 40, "3" * 40, "4" * 40
    for number in (5, 6, 7):  # three: more than one page of two
        forge.add_pull(number, head, base)
    forge.add_pull(9, other, base, target="release")  # against another branch: not ours
    pulls = backend.open_pulls("main")
    assert [(p.number, p.head, p.base) for p in pulls] == [(n, head, base) for n in (5, 6, 7)]
    ref = "refs/merge-requests/5/head" if forge.kind == "gitlab" else "refs/pull/5/head"
    assert pulls[0].ref == ref
    assert backend.merged_as(5) is None  # still open
    forge.merge_pull(5, merge)
    assert backend.merged_as(5) == merge
    assert [p.number for p in backend.open_pulls("main")] == [6, 7]
