"""``--verify-signatures KEYS`` and ``--verify-mode`` for controller, check, plan and apply
(docs/trust.md). Not a command module: the commands call these helpers."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from gitops_gpu.cli.exits import Exit
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.sync.keys import TrustConfigError
from gitops_gpu.sync.trust import MODES, Verdict, Verifier


class UntrustedCommitError(GitopsGpuError):
    """The commit asked for is not vouched for by a trusted key: nothing is done with it."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--verify-signatures",
        metavar="KEYS",
        type=Path,
        help="only act on commits signed by a key in KEYS: a directory (or file) of armored "
        "OpenPGP public keys and/or an SSH allowed-signers file (docs/trust.md)",
    )
    p.add_argument(
        "--verify-mode",
        choices=MODES,
        help="head: the commit is signed (default); tag: a signed annotated tag points at it; "
        "tag-and-head: both",
    )


def verifier(args: argparse.Namespace) -> Verifier | None:
    """The Verifier the flags ask for (KEYS loaded and validated now), or None."""
    keys, mode = getattr(args, "verify_signatures", None), getattr(args, "verify_mode", None)
    if keys is None:
        if mode is not None:
            raise TrustConfigError(
                "--verify-mode without --verify-signatures: nothing would be verified",
                fix="pass --verify-signatures KEYS too",
            )
        return None
    return Verifier(keys, mode or "head")


def require_trusted(args: argparse.Namespace, repo: str | os.PathLike[str], sha: str) -> None:
    """Raise ``UntrustedCommitError`` unless the flags are off or ``sha`` is trusted."""
    v = verifier(args)
    if v is None:
        return
    try:
        verdict = v.verify(repo, sha)
    finally:
        v.close()
    if not verdict.trusted:
        raise UntrustedCommitError(
            f"refused: commit {sha[:12]} is untrusted ({verdict.reason}); nothing was done",
            fix="sign it with a key in KEYS, or add its signer's public key to KEYS",
        )
    print(f"commit {sha[:12]}: {verdict.reason}", file=sys.stderr)


def check_commit(args: argparse.Namespace) -> int | None:
    """``check --verify-signatures``: judge the commit the working tree is. Returns an exit code
    when check must stop there (1: untrusted), None to go on with preflight."""
    v = verifier(args)
    if v is None:
        return None
    try:
        sha, repo = _checked_commit(args.path, args.commit)
        verdict = v.verify(repo, sha)
    finally:
        v.close()
    if verdict.trusted:
        print(f"commit {sha[:12]}: {verdict.reason}", file=sys.stderr)
        return None
    _report_untrusted(args, sha, verdict)
    return Exit.FAILED


def _checked_commit(path: Path, commit: str | None) -> tuple[str, str]:
    """(sha, git dir): the commit ``path`` holds, clean, so the signature covers what is checked."""
    import git  # noqa: PLC0415 - gitpython costs 45 ms of every `check`; only this needs it

    try:
        with git.Repo(path, search_parent_directories=True) as repo:
            head = str(repo.head.commit.hexsha)
            want = str(repo.commit(commit).hexsha) if commit else head
            dirty = repo.is_dirty(untracked_files=True, path=str(Path(path).resolve()))
            git_dir = str(repo.git_dir)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.BadName, ValueError) as exc:
        raise GitopsGpuError(
            f"--verify-signatures: {path} is not a git commit ({exc})",
            fix="check a clone of the fleet repo (a signature vouches for a commit)",
        ) from None
    if want != head or dirty:
        raise GitopsGpuError(
            f"--verify-signatures: {path} is not exactly commit {want[:12]} "
            f"({'uncommitted changes' if dirty else f'HEAD is {head[:12]}'})",
            fix="check out that commit cleanly: a signature vouches for a commit, not a tree",
        )
    return want, git_dir


def _report_untrusted(args: argparse.Namespace, sha: str, verdict: Verdict) -> None:
    line = f"untrusted commit: {verdict.reason}"
    if args.format == "json":
        doc = {"commit": sha, "trusted": False, "reason": verdict.reason, "kind": verdict.kind}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(f"{sha[:12]}: error: {line}\n  fix: sign it with a key in KEYS\n")
    if args.post_status:
        from gitops_gpu.rollout.backends import make_backend  # noqa: PLC0415 - HTTP stacks
        from gitops_gpu.rollout.status import (  # noqa: PLC0415
            FAILURE,
            PREFLIGHT_CONTEXT,
            CommitStatus,
        )

        backend = make_backend(
            args.status_backend, str(args.path), token_file=args.status_token_file
        )
        backend.set_status(
            CommitStatus(sha, PREFLIGHT_CONTEXT, FAILURE, line, created_at=time.time())
        )
        print(f"{PREFLIGHT_CONTEXT}: {FAILURE} on {sha[:12]}", file=sys.stderr)
