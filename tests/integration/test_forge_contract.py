"""The Gitea commit-status contract, run against the fake forge AND a real Gitea.

What the fake is allowed to be (rollout_fake_forge.py) is what real Gitea 1.27 does: these tests
fail on the fake the moment it drifts from the real server, and on the product when it relies on
something only the fake does. Fault injection (429, 5xx, shifting pages) stays fake-only in
test_rollout_http_backends.py.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from rollout_fake_forge import OWNER, REPO, FakeForge

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.httpclient import Retry
from gitops_gpu.rollout.seal import Keyring, generate, parse_public_keys
from gitops_gpu.rollout.status import (
    FAILURE,
    MAX_DESCRIPTION,
    PENDING,
    SUCCESS,
    CommitStatus,
    approval_context,
    stage_context,
)
from gitops_gpu_dev.testbed import gitea

FAKE_TOKEN = "tok_FAKE_contract_DO_NOT_LEAK"
FAKE_SHA = "0123456789abcdef0123456789abcdef01234567"
UNKNOWN_SHA = "fedcba9876543210fedcba9876543210fedcba98"
CANARY = stage_context("canary")
FAST = Retry(attempts=2, base_delay=0.001, max_delay=0.01)
GITEA_STATES = ("pending", "success", "error", "failure", "warning", "skipped")


@dataclass
class Side:
    """One Gitea to test against: where it is, a commit it has, and raw API access."""

    kind: str  # fake | real
    url: str
    owner: str
    repo: str
    token: str
    sha: str
    user: str  # the account the token belongs to
    fake: FakeForge | None = None
    forge: gitea.Forge | None = None

    @property
    def repo_path(self) -> str:
        return f"{self.owner}/{self.repo}"

    def backend(self, *, repo: str | None = None, limit: int = 50) -> GiteaBackend:
        return GiteaBackend(
            self.url, self.owner, repo or self.repo, self.token, retry=FAST, limit=limit
        )

    def raw(self, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
        req = urllib.request.Request(
            f"{self.url}/api/v1/repos/{self.owner}/{self.repo}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"token {self.token}", "Accept": "application/json"}
            | ({"Content-Type": "application/json"} if body is not None else {}),
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                headers = {k.lower(): v for k, v in resp.headers.items()}
                return resp.status, json.loads(resp.read() or b"null"), headers
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")
            return exc.code, text, {}

    def post(self, state: str, context: str, description: str = "", sha: str = "") -> int:
        body = {"state": state, "context": context, "description": description, "target_url": ""}
        code, _, _ = self.raw("POST", f"/statuses/{sha or self.sha}", body)
        return code

    def listing(self, sha: str = "") -> list[dict[str, Any]]:
        code, data, _ = self.raw("GET", f"/commits/{sha or self.sha}/statuses?limit=50")
        assert code == 200, data
        assert isinstance(data, list)
        return data

    def freeze_clock(self) -> Callable[[], None]:
        """Make the next statuses share one creation second; returns the undo."""
        if self.fake is not None:
            fake = self.fake
            fake.clock = lambda: 1_780_000_000.0
            return lambda: setattr(fake, "clock", time.time)
        # Real: start right after a second boundary; three local POSTs take well under a second.
        time.sleep(1.0 - time.time() % 1.0 + 0.02)
        return lambda: None


@pytest.fixture(params=["fake", "real"])
def side(
    request: pytest.FixtureRequest,
) -> Iterator[Side]:
    if request.param == "fake":
        fake = FakeForge("gitea", FAKE_TOKEN, commits={FAKE_SHA})
        fake.page_size = 50
        try:
            yield Side("fake", fake.url, OWNER, REPO, FAKE_TOKEN, FAKE_SHA, fake.user, fake)
        finally:
            fake.close()
        assert fake.errors == [], "requests deviated from the documented API"
        return
    make: Callable[[str], gitea.Forge] = request.getfixturevalue("gitea_repo_factory")
    forge = make("contract")
    head = forge.api("GET", f"/repos/{forge.repo}/branches/main")["commit"]["id"]
    yield Side(
        "real", forge.url, forge.owner, forge.name, forge.token, head, forge.owner, None, forge
    )


def test_write_then_read_back(side: Side) -> None:
    backend = side.backend()
    assert backend.list_statuses(side.sha) == []
    assert backend.set_status(CommitStatus(side.sha, CANARY, PENDING, "canary: rolling out"))
    assert backend.set_status(CommitStatus(side.sha, CANARY, SUCCESS, "canary: 2/2 nodes"))
    assert not backend.set_status(CommitStatus(side.sha, CANARY, SUCCESS, "canary: 2/2 nodes"))
    got = backend.list_statuses(side.sha)
    assert [(s.context, s.state) for s in got] == [(CANARY, PENDING), (CANARY, SUCCESS)]
    assert all(s.created_at > 0 for s in got)


def test_every_gitea_state_is_accepted_and_foreign_ones_read_as_failure(side: Side) -> None:
    for n, state in enumerate(GITEA_STATES):
        assert side.post(state, f"ci/{n}") == 201, state
    listed = {item["context"]: item["status"] for item in side.listing()}
    assert listed == {f"ci/{n}": state for n, state in enumerate(GITEA_STATES)}
    read = {s.context: s.state for s in side.backend().list_statuses(side.sha)}
    assert read["ci/4"] == FAILURE and read["ci/5"] == FAILURE  # warning, skipped
    assert read["ci/0"] == PENDING and read["ci/1"] == SUCCESS


def test_no_description_limit_but_we_write_at_most_140(side: Side) -> None:
    long = "x" * 1000
    assert side.post("success", "ci/long", long) == 201
    assert [i["description"] for i in side.listing()] == [long]
    backend = side.backend()
    ours = CommitStatus(side.sha, CANARY, SUCCESS, "canary: " + "y" * 300)
    assert backend.set_status(ours)
    stored = backend.latest(side.sha, CANARY)
    assert stored is not None and len(stored.description) == MAX_DESCRIPTION
    assert not backend.set_status(ours)  # what we compare is what the forge stored


def test_unknown_commit_is_404_on_get_500_on_post_and_named_clearly(side: Side) -> None:
    code, _, _ = side.raw("GET", f"/commits/{UNKNOWN_SHA}/statuses")
    assert code == 404
    assert side.post("pending", CANARY, "x", sha=UNKNOWN_SHA) == 500
    backend = side.backend()
    for call in (
        lambda: backend.list_statuses(UNKNOWN_SHA),
        lambda: backend.set_status(CommitStatus(UNKNOWN_SHA, CANARY, PENDING, "x")),
        lambda: backend._write(CommitStatus(UNKNOWN_SHA, CANARY, PENDING, "x")),
    ):
        with pytest.raises(StatusBackendError) as info:
            call()
        assert f"commit {UNKNOWN_SHA} is not on the forge" in str(info.value)
        assert "push the commit" in info.value.fix
        assert side.token not in str(info.value) + info.value.fix


def test_a_missing_repository_is_not_reported_as_a_missing_commit(side: Side) -> None:
    with pytest.raises(StatusBackendError) as info:
        side.backend(repo="no-such-repo").list_statuses(side.sha)
    assert "404" in str(info.value) and "not on the forge" not in str(info.value)
    assert "check the repository" in info.value.fix


def test_same_second_statuses_list_newest_second_first_then_ascending_id(side: Side) -> None:
    for _attempt in range(3):
        undo = side.freeze_clock()
        try:
            for n in range(3):
                assert side.post("pending", f"ci/same-{_attempt}-{n}") == 201
        finally:
            undo()
        batch = [i for i in side.listing() if i["context"].startswith(f"ci/same-{_attempt}-")]
        if len({i["created_at"] for i in batch}) == 1:
            break
    else:
        pytest.fail("could not create three statuses within one second")
    assert [i["context"] for i in batch] == [f"ci/same-{_attempt}-{n}" for n in range(3)]
    ids = [i["id"] for i in batch]
    assert ids == sorted(ids)  # ascending id, NOT newest first
    # The product does not depend on the listing order: oldest first by id.
    contexts = [s.context for s in side.backend().list_statuses(side.sha)]
    assert contexts[-3:] == [f"ci/same-{_attempt}-{n}" for n in range(3)]


def test_listing_pages_with_link_and_total_count(side: Side) -> None:
    for n in range(5):
        assert side.post("success", f"ci/page-{n}") == 201
    code, data, headers = side.raw("GET", f"/commits/{side.sha}/statuses?limit=2&page=1")
    assert code == 200 and len(data) == 2
    assert headers.get("x-total-count") == "5"
    assert 'rel="next"' in headers.get("link", "")
    listed = side.backend(limit=2).list_statuses(side.sha)
    assert [s.context for s in listed] == [f"ci/page-{n}" for n in range(5)]


def test_a_bad_token_is_refused_with_401(side: Side) -> None:
    backend = GiteaBackend(side.url, side.owner, side.repo, "not-the-token", retry=FAST)
    with pytest.raises(StatusBackendError) as info:
        backend.list_statuses(side.sha)
    assert "401" in str(info.value)


def _post_as_another_user(side: Side, user: str, context: str) -> None:
    """A status posted with another account's token (a CI job, a colleague)."""
    if side.fake is not None:
        side.fake.add(side.sha, context, "success", "approved", creator=user)
        return
    assert side.forge is not None
    password = "pw-" + user + "-0123456789"
    body = {"username": user, "email": f"{user}@example.com", "password": password}
    side.forge.api("POST", "/admin/users", {**body, "must_change_password": False})
    side.forge.api("PUT", f"/repos/{side.repo_path}/collaborators/{user}", {"permission": "write"})
    req = urllib.request.Request(
        f"{side.url}/api/v1/users/{user}/tokens",
        data=json.dumps({"name": "ci", "scopes": ["write:repository"]}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    req.add_header("Authorization", f"Basic {basic}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        token = json.loads(resp.read())["sha1"]
    other = Side(side.kind, side.url, side.owner, side.repo, token, side.sha, user)
    assert other.post("success", context, "approved") == 201


def test_the_creator_is_the_account_that_posted_and_the_seal_survives(side: Side) -> None:
    """What approvals are judged by (the creator) and what verdicts are verified by (the seal
    in target_url's fragment) come back from the forge as we wrote them."""
    key = generate("controller")
    sealed = key.seal(
        CommitStatus(side.sha, CANARY, SUCCESS, "canary: 2/2 nodes", created_at=time.time())
    )
    assert side.backend().set_status(sealed)
    user = f"ci-{secrets.token_hex(3)}"
    _post_as_another_user(side, user, approval_context("fleet"))
    got = {s.context: s for s in side.backend().list_statuses(side.sha)}
    ours, theirs = got[CANARY], got[approval_context("fleet")]
    assert (ours.creator, theirs.creator) == (side.user, user)
    assert ours.seal == sealed.seal and ours.target_url == ""
    ring = Keyring(parse_public_keys(key.public_line(), "controller.pub"))
    assert ring.check(ours).signer == "controller"
    raw = next(i for i in side.listing() if i["context"] == CANARY)
    assert raw["creator"]["login"] == side.user
    assert raw["target_url"] == (
        f"{side.url}/{side.owner}/{side.repo}/commit/{side.sha}#gitops-gpu-seal={sealed.seal}"
    )


def test_gitea_team_membership_is_read_from_the_real_server(
    gitea_repo_factory: Callable[[str], gitea.Forge],
) -> None:
    """Team approvers (`approvers.teams: [org/team]`) are judged by Gitea's own membership."""
    forge = gitea_repo_factory("teams")
    org, user = f"org-{secrets.token_hex(3)}", f"approver-{secrets.token_hex(3)}"
    forge.api("POST", "/orgs", {"username": org})
    units = ["repo.code", "repo.pulls", "repo.issues"]
    team = forge.api(
        "POST", f"/orgs/{org}/teams", {"name": "platform", "permission": "write", "units": units}
    )
    password = "pw-" + user + "-0123456789"
    body = {"username": user, "email": f"{user}@example.com", "password": password}
    forge.api("POST", "/admin/users", {**body, "must_change_password": False})
    forge.api("PUT", f"/teams/{team['id']}/members/{user}")
    backend = GiteaBackend(forge.url, forge.owner, forge.name, forge.token, retry=FAST)
    assert backend.in_team(f"{org}/platform", user)
    assert backend.in_team(f"{org}/Platform", user)  # Gitea's team names are case-blind
    assert not backend.in_team(f"{org}/platform", forge.owner)
    assert not backend.in_team(f"{org}/nobody", user)
    assert not backend.in_team("no-such-org/platform", user)
