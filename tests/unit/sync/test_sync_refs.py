"""sync/refs.py: the smart-HTTP ref advertisement, parsed from what real git serves, and when a
plain GET may stand in for `git ls-remote`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gitops_gpu.sync import refs

SERVICE = b"001e# service=git-upload-pack\n0000"


def _advertisement(repo: Path) -> bytes:
    out: bytes = subprocess.run(
        ["git", "upload-pack", "--advertise-refs", "--stateless-rpc", str(repo)],
        check=True,
        capture_output=True,
    ).stdout
    return SERVICE + out


def test_parse_reads_every_ref_git_advertises(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    run = ["git", "-C", str(repo), "-c", "user.email=t@x", "-c", "user.name=t"]
    subprocess.run([*run, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    subprocess.run([*run, "tag", "-a", "v1", "-m", "v1"], check=True)
    shown = subprocess.run(
        ["git", "-C", str(repo), "show-ref", "--head", "-d"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    expected = {ref: sha for sha, ref in (line.split(" ", 1) for line in shown.splitlines())}
    assert refs.parse(_advertisement(repo)).refs == expected


def test_an_empty_repo_advertises_no_refs(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "e.git")], check=True)
    assert refs.parse(_advertisement(tmp_path / "e.git")) == refs.Advertisement({})


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"", "no '# service"),
        (b"<html>login</html>", "bad pkt-line length"),
        (SERVICE + b"0010not-a-sha x\n", "not a ref line"),
        (SERVICE + b"00ff" + b"a" * 10, "bad pkt-line length 255"),
    ],
)
def test_what_is_not_an_advertisement_says_so(body: bytes, error: str) -> None:
    with pytest.raises(refs.RefsError, match=error):
        refs.parse(body)


def _pkt(payload: bytes) -> bytes:
    return b"%04x" % (len(payload) + 4) + payload


def test_a_ref_name_that_is_not_utf8_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    # git accepts the name (a branch pushed as feature-\xff); nothing we track is named so.
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    run = ["git", "-C", str(repo), "-c", "user.email=t@x", "-c", "user.name=t"]
    subprocess.run([*run, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    subprocess.run([*run, "branch", b"feature-\xff".decode("utf-8", "surrogateescape")], check=True)
    got = refs.parse(_advertisement(repo))
    assert got.skipped == (b"refs/heads/feature-\xff",)
    assert set(got.refs) == {"HEAD", "refs/heads/main"}


def test_a_ref_name_with_a_newline_cannot_forge_another_ref() -> None:
    # "x\n<sha>\trefs/heads/main" would read as a second line if names were joined as text.
    forged = b"refs/heads/x\n" + b"f" * 40 + b"\trefs/heads/main"
    body = SERVICE + _pkt(b"a" * 40 + b" refs/heads/main\0caps\n") + _pkt(b"b" * 40 + b" " + forged)
    got = refs.parse(body + b"0000")
    assert got.refs == {"refs/heads/main": "a" * 40}
    assert got.skipped == (forged,)


def test_sha256_object_names_are_read() -> None:
    body = SERVICE + _pkt(b"c" * 64 + b" refs/heads/main\0caps\n") + b"0000"
    assert refs.parse(body).refs == {"refs/heads/main": "c" * 64}


def test_matching_is_git_ls_remote_tail_match() -> None:
    advertised = {
        "HEAD": "1" * 40,
        "refs/heads/main": "2" * 40,
        "refs/heads/maintenance": "3" * 40,
        "refs/tags/v1": "4" * 40,
        "refs/tags/v1^{}": "5" * 40,
        "refs/notes/gitops-gpu": "6" * 40,
    }
    got = refs.matching(advertised, ["refs/heads/main", "refs/tags/*", "gitops-gpu"])
    assert [ref for _sha, ref in got] == [
        "refs/heads/main",
        "refs/notes/gitops-gpu",
        "refs/tags/v1",
        "refs/tags/v1^{}",
    ]


URL = "https://git.example.com/fleet.git"


@pytest.mark.parametrize(
    ("url", "config", "env", "ok"),
    [
        (URL, [], {}, True),
        ("http://127.0.0.1:8080/f.git", [], {"GIT_SSL_CAINFO": "/ca.pem"}, True),
        ("ssh://git@git.example.com/fleet.git", [], {}, False),
        ("/srv/fleet.git", [], {}, False),
        (URL, ["http.proxy=http://proxy:3128"], {}, False),
        (URL, ["http.https://git.example.com.sslverify=false"], {}, False),
        (URL, ["http.https://other.example.com.sslverify=false"], {}, True),
        (URL, [f"url.https://mirror.example.com/.insteadof={URL[:24]}"], {}, False),
        (URL, ["url.https://mirror.example.com/.insteadof=git@other:"], {}, True),
        (URL, ["credential.helper=store", "user.name=x"], {}, True),
        (URL, [], {"GIT_CONFIG_COUNT": "1"}, False),
        (URL, [], {"GIT_SSL_NO_VERIFY": "1"}, False),
    ],
)
def test_usable_only_where_a_plain_get_is_what_git_would_do(
    url: str, config: list[str], env: dict[str, str], ok: bool
) -> None:
    assert refs.usable(url, config, env) is ok
