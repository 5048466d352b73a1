"""``controller --notify-*``: the notifier the flags build, and a clear error for each bad one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gitops_gpu import cli
from gitops_gpu.cli import notify_args
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.metrics import Metrics


def _args(*argv: str) -> argparse.Namespace:
    return cli.build_parser("controller").parse_args(["controller", "--repo", "r", *argv])


def test_without_a_url_file_there_is_no_notifier() -> None:
    assert notify_args.notifier(_args(), Metrics()) is None


def test_the_flags_build_a_notifier_that_logs_only_the_urls_origin(tmp_path: Path) -> None:
    url, key = tmp_path / "url", tmp_path / "key"
    url.write_text("https://hooks.example.com:8443/services/T0/B0/token\n")
    key.write_text("k3y\n")
    n = notify_args.notifier(
        _args(
            "--notify-url-file", str(url), "--notify-format", "json", "--notify-key-file",
            str(key), "--notify-link", "https://gpu.example/ui", "--notify-per-minute", "3",
        ),
        Metrics(),
    )  # fmt: skip
    assert n is not None
    assert (n.url, n.origin) == (
        "https://hooks.example.com:8443/services/T0/B0/token",
        "https://hooks.example.com:8443",
    )
    assert (n.fmt, n.link, n._key, n._rate) == ("json", "https://gpu.example/ui", b"k3y", 0.05)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot be read"),
        ("\n", "the file is empty"),
        ("hooks.example.com/x", "not an http(s) URL"),
        ("file:///etc/passwd", "not an http(s) URL"),
    ],
)
def test_a_bad_url_file_stops_the_start_naming_the_file_and_the_fix(
    tmp_path: Path, content: str | None, says: str
) -> None:
    url = tmp_path / "url"
    if content is not None:
        url.write_text(content)
    with pytest.raises(GitopsGpuError) as exc:
        notify_args.notifier(_args("--notify-url-file", str(url)), Metrics())
    assert f"--notify-url-file {url}: {says}" in str(exc.value)
    assert exc.value.fix


@pytest.mark.parametrize("rate", ["0", "-1"])
def test_a_rate_that_is_not_positive_stops_the_start(tmp_path: Path, rate: str) -> None:
    url = tmp_path / "url"
    url.write_text("https://hooks.example.com/x")
    args = _args("--notify-url-file", str(url), "--notify-per-minute", rate)
    with pytest.raises(GitopsGpuError, match=f"--notify-per-minute {rate}: must be above 0"):
        notify_args.notifier(args, Metrics())
