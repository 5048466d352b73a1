"""What one answer from a network peer may cost: the git remote's ref advertisement, a forge's
status listing, a Prometheus answer. A peer is not trusted to be small or quick; past a limit
the read stops with an error on that source or gate, never memory growth or a hung pass.

Defaults are far above what a healthy peer sends (a 100,000-ref repo advertises ~7 MiB) and are
changed with the controller's ``--max-refs-bytes``, ``--refs-deadline``,
``--max-response-bytes`` and ``--max-statuses`` (cli/limits_args.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PeerLimits:
    refs_bytes: int = 32 << 20  # one info/refs advertisement (or `git ls-remote` output)
    refs_deadline: float = 30.0  # seconds for a whole ref read, connect to last byte
    fetch_deadline: float = 600.0  # seconds for one `git fetch` (or notes push)
    response_bytes: int = 8 << 20  # one forge or Prometheus HTTP answer
    response_objects: int = 100_000  # JSON objects and arrays in one answer
    statuses: int = 10_000  # status items of one commit, over all pages
    response_deadline: float = 60.0  # seconds for one forge or Prometheus answer


LIMITS = PeerLimits()


def configure(**changes: float) -> None:
    global LIMITS
    LIMITS = replace(LIMITS, **changes)  # type: ignore[arg-type]


def current() -> PeerLimits:
    return LIMITS
