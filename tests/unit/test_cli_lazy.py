"""The CLI loads only the command it runs: a controller never imports the testbed or demo."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from gitops_gpu import cli

DEV_ONLY = ("gitops_gpu_dev.testbed", "gitops_gpu_dev.demo", "gitops_gpu.agent.fake_nvml")


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_the_command_table_names_every_command_and_its_module() -> None:
    extra = cli.plugins()
    assert {"testbed", "demo"} <= set(extra)  # the dev tools, installed by make
    assert _subcommands(cli.build_parser()) == set(cli.COMMANDS) | set(extra)
    for command in [*cli.COMMANDS, *extra]:
        assert command in _subcommands(cli.build_parser(command)), command


def test_the_command_word_is_found_after_global_options() -> None:
    assert cli._command(["--log-format", "json", "-v", "controller", "--repo", "x"]) == (
        "controller"
    )
    assert cli._command(["--help"]) is None
    assert cli._command(["no-such-command"]) == "no-such-command"  # the full parser says no


def _loaded_after(argv: list[str]) -> list[str]:
    code = (
        "import json, sys\n"
        "from gitops_gpu import cli\n"
        f"cli.build_parser(cli._command({argv!r})).parse_args({argv!r})\n"
        "import gitops_gpu.controller\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return [str(m) for m in json.loads(out.stdout)]


def test_the_controller_command_loads_no_testbed_simulator_or_demo_module() -> None:
    loaded = _loaded_after(["controller", "--repo", "file:///nowhere"])
    assert "gitops_gpu.controller" in loaded
    assert [m for m in loaded if m.startswith(DEV_ONLY)] == []


def test_the_testbed_command_does_load_the_testbed() -> None:
    # the probe above can see a testbed import when one happens
    assert "gitops_gpu_dev.testbed.session" in _loaded_after(["testbed", "down", "--dir", "x"])


def test_every_flag_and_argument_says_what_it_is_for() -> None:
    missing: list[str] = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(f"{name} {sub}".strip(), subparser)
            elif not action.help and not isinstance(action, argparse._HelpAction):
                missing.append(f"{name}: {action.option_strings or action.dest}")

    walk("", cli.build_parser())
    assert missing == []


def _summaries(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a.help for a in sub._choices_actions}


def test_the_listing_says_what_each_command_module_registers() -> None:
    listed = _summaries(cli.build_parser(listing=True))
    registered = _summaries(cli.build_parser())
    assert {c: listed[c] for c in cli.COMMANDS} == {c: registered[c] for c in cli.COMMANDS}
    assert list(listed)[: len(cli.COMMANDS)] == list(registered)[: len(cli.COMMANDS)]
    assert set(listed) == set(registered)  # the plugins too, by name


def test_help_and_version_import_no_command_module() -> None:
    for argv in (["--help"], ["--version"]):
        code = (
            "import json, sys\n"
            "from gitops_gpu import cli\n"
            "try:\n"
            f"    cli.main({argv!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(json.dumps(sorted(sys.modules)))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout
        loaded = json.loads(out.splitlines()[-1])
        heavy = [m for m in loaded if m.startswith(("gitops_gpu.cli.", "kubernetes", "pydantic"))]
        assert heavy == ["gitops_gpu.cli.exits"], argv
    version = subprocess.run(
        [sys.executable, "-m", "gitops_gpu", "--version"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert version.stdout.strip() == f"gitops-gpu {cli.version()}"
    assert cli.version()[0].isdigit()


def test_a_plain_check_loads_no_git_http_or_cron_library() -> None:
    # what only --base, --kubeconfig, --verify-signatures, --post-* or a window needs (issue 32)
    code = (
        "import json, sys\n"
        "from gitops_gpu import cli\n"
        "from gitops_gpu_dev import paths\n"
        "crds = str(paths.shared_upstream() / 'gpu-operator' / 'crds')\n"
        "rc = cli.main(['check', str(paths.fleet_example()), '--crds', crds])\n"
        "print(json.dumps([rc, sorted(sys.modules)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    rc, loaded = json.loads(out.stdout.splitlines()[-1])
    assert rc == 0, out.stdout
    libraries = {"git", "urllib3", "croniter", "kubernetes"}
    ours = ("gitops_gpu.kube", "gitops_gpu.rollout.backends", "gitops_gpu.rollout.httpclient")
    assert [m for m in loaded if m.split(".")[0] in libraries or m.startswith(ours)] == []
