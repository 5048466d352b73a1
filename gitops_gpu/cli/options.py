"""Options every command spells the same way: one meaning and one parser each."""

from __future__ import annotations

import argparse

from gitops_gpu.fleet.models import parse_duration


def duration(text: str) -> float:
    """``30s``, ``2m``, ``1h30m``, ``500ms`` or plain seconds (fleet.yaml's rules)."""
    try:
        number = float(text)
    except ValueError:
        number = None
    try:
        return parse_duration(text if number is None else number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
