"""options.controller_config: the Config the shared fleet-source and record options spell."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from gitops_gpu import cli
from gitops_gpu.cli import options
from gitops_gpu.sync.source import default_cache_dir


def _args(*argv: str) -> argparse.Namespace:
    return cli.build_parser(argv[0]).parse_args(list(argv))


def test_the_controller_command_maps_its_flags_and_extras() -> None:
    args = _args(
        "controller", "--repo", "file:///fleet", "--branch", "prod", "--cluster", "east",
        "--namespace", "gpu-ops", "--status-token-file", "/tok",
    )  # fmt: skip
    cfg = options.controller_config(args, "controller", interval=5.0)
    assert (cfg.repo, cfg.branch, cfg.cluster, cfg.namespace) == (
        "file:///fleet",
        "prod",
        "east",
        "gpu-ops",
    )
    assert cfg.status_backend == "gitnotes" and cfg.status_token_file == Path("/tok")
    assert cfg.cache_dir == default_cache_dir().parent / "controller"
    assert cfg.interval == 5.0


def test_a_command_without_cluster_or_with_its_own_cache_dir() -> None:
    args = _args("approve", "--repo", "r", "--stage", "s", "--cache-dir", "/c", "abc123")
    cfg = options.controller_config(args, "cli")
    assert cfg.cluster is None and cfg.cache_dir == Path("/c")


def test_the_controller_reads_durations_as_fleet_yaml_does() -> None:
    """One parser: ``--interval 1h30m`` means what ``1h30m`` means in fleet.yaml."""
    args = _args(
        "controller", "--repo", "r", "--interval", "1h30m", "--lease-duration", "1m30s",
        "--renew-deadline", "45s", "--retry-period", "500ms",
    )  # fmt: skip
    assert (args.interval, args.lease_duration) == (5400.0, 90.0)
    assert (args.renew_deadline, args.retry_period) == (45.0, 0.5)
    assert _args("controller", "--repo", "r", "--interval", "7").interval == 7.0
    for bad in ("-5s", "nan", "1x", "90d"):
        try:
            _args("controller", "--repo", "r", "--interval", bad)
        except SystemExit as exc:
            assert exc.code == 2, bad
        else:
            raise AssertionError(f"--interval {bad} was accepted")


def test_help_speaks_to_users_and_its_examples_parse() -> None:
    text = cli.build_parser(listing=True).format_help()
    assert "this module" not in text and "cli/" not in text  # not the developer docstring
    examples = [
        re.split(r"\s{2,}", line.strip())[0].split()[1:]
        for line in cli.EPILOG.splitlines()
        if line.strip().startswith("gitops-gpu ") and "COMMAND" not in line
    ]
    assert len(examples) == 4
    for argv in examples:
        args = _args(*argv)
        assert args.func is not None, argv
