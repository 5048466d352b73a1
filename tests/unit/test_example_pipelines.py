"""fleet-repo-example ships PR pipelines that run preflight and post its commit status."""

from __future__ import annotations

import re
import shlex
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu.cli import build_parser
from gitops_gpu_dev import paths


def _commands(doc: Any) -> list[str]:
    found: list[str] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("run", "script") and isinstance(value, str):
                found.append(value)
            elif key == "script" and isinstance(value, list):
                found += [v for v in value if isinstance(v, str)]
            else:
                found += _commands(value)
    elif isinstance(doc, list):
        for item in doc:
            found += _commands(item)
    return found


def test_github_and_gitlab_pipelines_post_preflight_status() -> None:
    root = paths.fleet_example()
    yaml = YAML(typ="safe")
    for rel, backend in (
        (".github/workflows/gitops-gpu-preflight.yaml", "github:"),
        (".gitlab-ci.yml", "gitlab:"),
    ):
        cmds = [
            c for c in _commands(yaml.load((root / rel).read_text())) if "gitops-gpu check" in c
        ]
        assert len(cmds) == 1, rel
        # CI expressions (${{ ... }}) hold spaces; stand in a word for each before splitting.
        argv = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", cmds[0]))
        args = build_parser().parse_args(argv[1:])  # the flags exist and parse
        assert args.post_status and args.base and args.status_backend.startswith(backend)
        # An installed gitops-gpu has no upstream CRDs beside it: the pipeline brings them.
        assert args.crds is not None
