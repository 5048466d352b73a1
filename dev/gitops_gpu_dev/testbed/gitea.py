"""A real forge for the testbed: Gitea, built from the Go module proxy and run on 127.0.0.1.

Run (``testbed up --forge``, and the test session's forge fixture): an app.ini in the forge
directory (sqlite, INSTALL_LOCK, generated secrets, SSH/LFS/Actions off, webhooks allowed to
loopback only), ``gitea web`` as one more process of the testbed (so ``testbed down`` stops it),
an admin user and an access token made with ``gitea admin``, a repository created with
``auto_init`` (pushing into a truly empty repo makes the branch API answer 500 for a while) and
the fleet repo force-pushed over it. ``DIR/forge.json`` tells clients where everything is.

Build (once per machine, cached per version under ``~/.cache/gitops-gpu/bin/gitea-<v>``):
``go install`` cannot build Gitea (its go.mod has replace directives and now calls itself
``gitea.dev``), so the module is downloaded, copied to a writable directory, its dependencies
downloaded, the templates/options/public/migration assets embedded with
``go generate -tags bindata`` and the binary built with ``CGO_ENABLED=0 -tags bindata``. SQLite
is pure Go and always built in. No npm front end is needed for the API and git over HTTP.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import pwd
import secrets
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitops_gpu.errors import BuildError, TestbedError
from gitops_gpu_dev.testbed import controlplane
from gitops_gpu_dev.testbed.build import Progress, _go, _go_env, _run, cache_dir

GITEA_VERSION = "v1.27.3"
GITEA_MODULE = "code.gitea.io/gitea"
BINDATA_DIRS = ("modules/options", "modules/templates", "modules/public", "modules/migration")


def _stderr(msg: str) -> None:
    print(f"[testbed build] {msg}", file=sys.stderr, flush=True)


def gitea_path() -> Path:
    """Where the cached Gitea binary lives (it may not exist yet)."""
    return cache_dir() / "bin" / f"gitea-{GITEA_VERSION}" / "gitea"


def find_gitea() -> Path | None:
    path = gitea_path()
    return path if path.exists() else None


def _module_dir(progress: Progress) -> Path:
    cmd = [_go(), "mod", "download", "-json", f"{GITEA_MODULE}@{GITEA_VERSION}"]
    progress(f"gitea {GITEA_VERSION}: {' '.join(cmd)}")
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=_go_env(), check=False, cwd=cache_dir()
    )
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).splitlines()[-25:])
        raise BuildError(
            f"gitea {GITEA_VERSION} failed (exit {out.returncode}) running: {' '.join(cmd)}\n"
            + tail,
            fix="check that the Go module proxy is reachable (GOPROXY)",
        )
    return Path(json.loads(out.stdout)["Dir"])


def _copy_writable(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, symlinks=True)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            p = Path(root) / name
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
    dst.chmod(dst.stat().st_mode | stat.S_IWUSR)


def build_gitea(dest: Path, progress: Progress = _stderr) -> None:
    """Build Gitea into ``dest/gitea``; on failure raise BuildError with the command's tail."""
    start = time.monotonic()
    work = cache_dir() / "src" / f"gitea-{GITEA_VERSION}"
    work.parent.mkdir(parents=True, exist_ok=True)
    if not (work / ".copied").exists():
        _copy_writable(_module_dir(progress), work)
        (work / ".copied").write_text(GITEA_VERSION + "\n")
    _run([_go(), "mod", "download"], work, progress, f"gitea {GITEA_VERSION} deps")
    _run(
        [_go(), "generate", "-tags", "bindata", *[f"./{d}" for d in BINDATA_DIRS]],
        work,
        progress,
        f"gitea {GITEA_VERSION} bindata",
    )
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(
        [
            _go(),
            "build",
            "-v",
            "-trimpath",
            "-tags",
            "bindata",
            "-ldflags",
            f'-s -w -X "main.Version={GITEA_VERSION.lstrip("v")}"',
            "-o",
            str(tmp / "gitea"),
            ".",
        ],
        work,
        progress,
        f"gitea {GITEA_VERSION}",
    )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    progress(f"gitea {GITEA_VERSION}: built in {time.monotonic() - start:.0f}s -> {dest}")


def ensure_gitea(progress: Progress = _stderr) -> Path:
    """Return the cached Gitea binary, building it the first time (about 10 min on 2 cores)."""
    path = gitea_path()
    if not path.exists():
        progress(f"building gitea {GITEA_VERSION} (first time: about 10 minutes)")
        build_gitea(path.parent, progress)
    return path


# --- running it --------------------------------------------------------------------------------

ADMIN = "platform"
REPO_NAME = "gpu-fleet"
PROCESS = "gitea"
# The controller's default --metrics-addr: where `testbed up --forge` points the push webhook.
DEFAULT_WEBHOOK_URL = "http://127.0.0.1:9464/webhook"
PREFLIGHT = "gitops-gpu/preflight"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def app_ini(work: Path, port: int, run_user: str, *, as_root: bool) -> str:
    """A headless, loopback-only Gitea configuration with freshly generated secrets."""
    data = work / "data"
    lines = [
        "APP_NAME = gitops-gpu testbed forge",
        "RUN_MODE = prod",
        f"RUN_USER = {run_user}",
        f"WORK_PATH = {work}",
    ]
    if as_root:
        lines.append("I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true")
    sections: dict[str, dict[str, str]] = {
        "server": {
            "PROTOCOL": "http",
            "HTTP_ADDR": controlplane.LOOPBACK,
            "HTTP_PORT": str(port),
            "DOMAIN": controlplane.LOOPBACK,
            "ROOT_URL": f"http://{controlplane.LOOPBACK}:{port}/",
            "APP_DATA_PATH": str(data),
            "DISABLE_SSH": "true",
            "START_SSH_SERVER": "false",
            "LFS_START_SERVER": "false",
            "LFS_JWT_SECRET": _b64(secrets.token_bytes(32)),
            "ENABLE_PPROF": "false",
        },
        "database": {
            "DB_TYPE": "sqlite3",
            "PATH": str(data / "gitea.db"),
            "SQLITE_JOURNAL_MODE": "WAL",
        },
        "repository": {"ROOT": str(work / "repositories"), "DEFAULT_BRANCH": "main"},
        "security": {
            "INSTALL_LOCK": "true",
            "SECRET_KEY": secrets.token_hex(32),
            "INTERNAL_TOKEN": _b64(secrets.token_bytes(48)),
            # Webhooks may reach loopback (the controller) and nothing else.
            "ALLOWED_HOST_LIST": "loopback",
        },
        "oauth2": {"JWT_SECRET": _b64(secrets.token_bytes(32))},
        "lfs": {"PATH": str(data / "lfs")},
        # Else a workflow file in the repo adds a status stuck at "Waiting to run".
        "actions": {"ENABLED": "false"},
        "service": {"DISABLE_REGISTRATION": "true", "REQUIRE_SIGNIN_VIEW": "false"},
        "mailer": {"ENABLED": "false"},
        "session": {"PROVIDER": "memory"},
        "cron.update_checker": {"ENABLED": "false"},
        "webhook": {"DELIVER_TIMEOUT": "5"},
        "log": {"MODE": "console", "LEVEL": "Warn", "ROOT_PATH": str(work / "log")},
    }
    for name, keys in sections.items():
        lines += ["", f"[{name}]", *(f"{k} = {v}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Forge:
    """A running Gitea with an admin token and the fleet repository."""

    url: str  # http://127.0.0.1:PORT
    token: str
    token_file: Path
    owner: str
    name: str
    work: Path

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v1"

    @property
    def repo(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def clone_url(self) -> str:
        return f"{self.url}/{self.repo}.git"

    @property
    def status_backend(self) -> str:
        return f"gitea:{self.url}/{self.repo}"

    def info(self) -> dict[str, str]:
        return {
            "url": self.url,
            "api_url": self.api_url,
            "clone_url": self.clone_url,
            "repo": self.repo,
            "token_file": str(self.token_file),
            "status_backend": self.status_backend,
        }

    @classmethod
    def load(cls, directory: Path) -> Forge:
        """The forge described by ``DIR/forge.json``."""
        try:
            info = json.loads((directory / "forge.json").read_text())
            token_file = Path(info["token_file"])
            owner, _, name = str(info["repo"]).partition("/")
            return cls(
                url=str(info["url"]),
                token=token_file.read_text().strip(),
                token_file=token_file,
                owner=owner,
                name=name,
                work=token_file.parent,
            )
        except (OSError, ValueError, KeyError) as exc:
            raise TestbedError(
                f"no forge described in {directory}/forge.json: {exc}",
                fix=f"gitops-gpu testbed up --dir {directory} --forge",
            ) from None

    # --- the REST API -------------------------------------------------------------------------
    def api(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        *,
        expect: Sequence[int] = (200, 201, 204),
    ) -> Any:
        """Call the API as the admin; raise TestbedError unless the status is in ``expect``."""
        code, data = self.request(method, path, body)
        if code not in expect:
            raise TestbedError(
                f"gitea: {method} {path} answered {code}: {str(data)[:500]}",
                fix=f"see {self.work}/log and {self.work.parent}/logs/{PROCESS}.log",
            )
        return data

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> tuple[int, Any]:
        """One API call as the admin: (HTTP status, decoded JSON or text)."""
        url = path if "://" in path else f"{self.api_url}{path}"
        raw = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=raw, method=method)
        req.add_header("Authorization", f"token {self.token}")
        req.add_header("Accept", "application/json")
        if raw is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read())

    def wait_for(self, what: str, path: str, timeout: float = 30.0) -> Any:
        """Poll GET ``path`` until it answers 200 (pushes and merges show up asynchronously)."""
        deadline = time.monotonic() + timeout
        code, data = 0, None
        while time.monotonic() < deadline:
            code, data = self.request("GET", path)
            if code == 200:
                return data
            time.sleep(0.2)
        raise TestbedError(
            f"gitea: {what}: GET {path} still answers {code} after {timeout:.0f}s: {data}",
            fix=f"see {self.work.parent}/logs/{PROCESS}.log",
        )

    # --- git ----------------------------------------------------------------------------------
    def git_env(self) -> dict[str, str]:
        """Environment for git commands that authenticate to this forge with the token."""
        basic = base64.b64encode(f"{self.owner}:{self.token}".encode()).decode()
        return {
            **os.environ,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"http.{self.url}/.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        }

    def git(self, cwd: Path, *args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=cwd, env=self.git_env(), capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
            raise TestbedError(
                f"git {' '.join(args)} (in {cwd}) failed (exit {out.returncode}):\n{tail}",
                fix=f"check that the forge at {self.url} is up",
            )
        return out.stdout.strip()

    def push(self, work: Path, refspec: str = "HEAD:main", *, force: bool = False) -> None:
        """Push from a local clone; wait until the branch shows the pushed commit in the API."""
        local, _, branch = refspec.partition(":")
        sha = self.git(work, "rev-parse", local or "HEAD")
        self.git(work, "push", "-q", *(["--force"] if force else []), self.clone_url, refspec)
        self.wait_branch(branch or local, sha)

    def wait_branch(self, branch: str, sha: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        seen: Any = None
        while time.monotonic() < deadline:
            code, data = self.request("GET", f"/repos/{self.repo}/branches/{branch}")
            seen = data
            if code == 200 and isinstance(data, dict) and data["commit"]["id"] == sha:
                return
            time.sleep(0.2)
        raise TestbedError(
            f"gitea: branch {branch} does not show {sha[:12]} after {timeout:.0f}s: {seen}",
            fix=f"see {self.work.parent}/logs/{PROCESS}.log",
        )

    # --- repository settings ------------------------------------------------------------------
    def add_push_webhook(self, url: str, secret: str) -> int:
        """A Gitea push hook (signed: X-Gitea-Signature and X-Hub-Signature-256)."""
        hook = self.api(
            "POST",
            f"/repos/{self.repo}/hooks",
            {
                "type": "gitea",
                "active": True,
                "events": ["push"],
                "branch_filter": "*",
                "config": {"url": url, "content_type": "json", "secret": secret},
            },
        )
        return int(hook["id"])

    def protect_branch(self, branch: str, contexts: Sequence[str]) -> None:
        """Require ``contexts`` to succeed before a pull request into ``branch`` merges."""
        self.api(
            "POST",
            f"/repos/{self.repo}/branch_protections",
            {
                "rule_name": branch,
                "enable_push": True,
                "enable_status_check": True,
                "status_check_contexts": list(contexts),
            },
        )

    def webhook_deliveries(self, last: int = 5) -> list[dict[str, Any]]:
        """Gitea's own record of its latest webhook deliveries (for diagnosing a missed wake)."""
        db = self.work / "data" / "gitea.db"
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
                rows = conn.execute(
                    "SELECT id, event_type, is_delivered, is_succeed, delivered,"
                    " response_content FROM hook_task ORDER BY id DESC LIMIT ?",
                    (last,),
                ).fetchall()
        except sqlite3.Error as exc:
            return [{"error": str(exc)}]
        keys = ("id", "event", "delivered", "succeeded", "delivered_ns", "response")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    # --- pull requests ------------------------------------------------------------------------
    def open_pull(self, head: str, title: str, base: str = "main") -> int:
        pr = self.api(
            "POST", f"/repos/{self.repo}/pulls", {"head": head, "base": base, "title": title}
        )
        return int(pr["number"])

    def merge_pull(self, number: int, timeout: float = 30.0) -> tuple[int, Any]:
        """Try to merge: (HTTP status, answer). Mergeability is computed in the background, so
        "Please try again later" (405) is retried; a refusal by branch protection is returned."""
        deadline = time.monotonic() + timeout
        while True:
            code, data = self.request(
                "POST", f"/repos/{self.repo}/pulls/{number}/merge", {"Do": "merge"}
            )
            if code == 405 and "try again later" in str(data) and time.monotonic() < deadline:
                time.sleep(0.3)
                continue
            return code, data


def _decode(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return text


def _run_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def _cli(binary: Path, work: Path, *args: str) -> str:
    cmd = [str(binary), "--config", str(work / "app.ini"), "--work-path", str(work), *args]
    out = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env=_gitea_env(work), cwd=work
    )
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-20:])
        shown = " ".join(
            "***" if "password" in prev else a for prev, a in zip(["", *cmd[:-1]], cmd, strict=True)
        )
        raise TestbedError(
            f"gitea: {shown} failed (exit {out.returncode}):\n{tail}",
            fix=f"see {work}/log and the gitea log",
        )
    return out.stdout.strip()


def _gitea_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GITEA"))}
    env["HOME"] = str(work / "home")
    env["GITEA_WORK_DIR"] = str(work)
    return env


def start(
    state: controlplane.State,
    *,
    binary: Path | None = None,
    die_with_parent: bool = False,
    progress: Progress | None = None,
    timeout: float = 60.0,
) -> Forge:
    """Start Gitea as a process of the testbed in ``state.dir`` (``down`` stops it), with an
    admin user and a token. The repository is made by ``create_repo``."""
    say = progress or (lambda _m: None)
    gitea = binary or find_gitea()
    if gitea is None:
        raise TestbedError(
            f"the Gitea binary is missing at {gitea_path()}",
            fix="gitops-gpu testbed build (or make binaries) builds it once (about 10 minutes)",
        )
    work = Path(state.dir) / "gitea"
    (work / "home").mkdir(parents=True, exist_ok=True)
    (work / "log").mkdir(parents=True, exist_ok=True)
    url = ""
    for _attempt in range(3):
        port = controlplane.free_port()
        url = f"http://{controlplane.LOOPBACK}:{port}"
        (work / "app.ini").write_text(app_ini(work, port, _run_user(), as_root=os.getuid() == 0))
        (work / "app.ini").chmod(0o600)
        say(f"starting gitea on {url}")
        argv = [
            str(gitea),
            "web",
            "--config",
            str(work / "app.ini"),
            "--work-path",
            str(work),
            "--port",
            str(port),
        ]
        _spawn_gitea(argv, state, work, die_with_parent)
        try:
            controlplane._wait(
                "gitea",
                state,
                PROCESS,
                functools.partial(controlplane._http_ok, f"{url}/api/v1/version"),
                timeout,
            )
            break
        except TestbedError as exc:
            if not controlplane._port_in_use_error(state, PROCESS):
                raise TestbedError(
                    f"gitea failed to start: {' '.join(argv)}\n{exc.args[0]}", fix=exc.fix
                ) from None
    else:
        raise TestbedError("gitea: no free port after 3 tries", fix="free some loopback ports")
    password = secrets.token_hex(16)
    _cli(
        gitea,
        work,
        "admin",
        "user",
        "create",
        "--admin",
        "--username",
        ADMIN,
        "--email",
        f"{ADMIN}@example.com",
        "--must-change-password=false",
        "--password",
        password,
    )
    token = _cli(
        gitea,
        work,
        "admin",
        "user",
        "generate-access-token",
        "--username",
        ADMIN,
        "--token-name",
        f"testbed-{secrets.token_hex(4)}",
        "--scopes",
        "all",
        "--raw",
    ).splitlines()[-1]
    token_file = work / "admin-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    return Forge(url=url, token=token, token_file=token_file, owner=ADMIN, name="", work=work)


def _spawn_gitea(argv: list[str], state: controlplane.State, work: Path, die: bool) -> None:
    """Like controlplane._spawn (a process of the testbed, stopped by ``down``), with an
    environment of its own: Gitea must not see our GIT_* settings."""
    logs = Path(state.dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{PROCESS}.log").open("ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_gitea_env(work),
            cwd=work,
            start_new_session=True,
            preexec_fn=controlplane._die_with_parent if die else None,  # noqa: PLW1509
        )
    controlplane._CHILDREN[proc.pid] = proc
    state.pids[PROCESS] = proc.pid
    state.save()


def create_repo(forge: Forge, name: str = REPO_NAME, *, private: bool = False) -> Forge:
    """Create ``owner/name`` with an initial commit on main (auto_init)."""
    forge.api(
        "POST",
        "/user/repos",
        {
            "name": name,
            "auto_init": True,
            "default_branch": "main",
            "private": private,
            "description": "GPU fleet (gitops-gpu testbed)",
        },
    )
    made = Forge(forge.url, forge.token, forge.token_file, forge.owner, name, forge.work)
    made.wait_for("the new repository's main branch", f"/repos/{made.repo}/branches/main")
    return made


def push_fleet(forge: Forge, fleet: Path) -> str:
    """Force-push the fleet repo to main: a git checkout's HEAD, else a fresh commit of the
    directory's files. Returns the pushed commit."""
    fleet = fleet.resolve()
    top = subprocess.run(
        ["git", "-C", str(fleet), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=False,
    )
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == fleet:
        forge.push(fleet, "HEAD:main", force=True)
        return forge.git(fleet, "rev-parse", "HEAD")
    with tempfile.TemporaryDirectory(prefix="fleet-seed-") as tmp:
        seed = Path(tmp) / "fleet"
        shutil.copytree(fleet, seed, ignore=shutil.ignore_patterns(".git"))
        forge.git(seed, "init", "-q", "-b", "main")
        forge.git(seed, "add", "-A")
        forge.git(
            seed,
            "-c",
            "user.name=platform team",
            "-c",
            "user.email=platform@example.com",
            "commit",
            "-q",
            "-m",
            "fleet repo",
        )
        forge.push(seed, "HEAD:main", force=True)
        return forge.git(seed, "rev-parse", "HEAD")


def up(
    state: controlplane.State,
    fleet: Path,
    *,
    webhook_url: str | None = DEFAULT_WEBHOOK_URL,
    die_with_parent: bool = False,
    progress: Progress | None = None,
) -> Forge:
    """`testbed up --forge`: Gitea, the admin token, the fleet repo pushed to it (private), a
    signed push webhook to the controller, and ``DIR/forge.json``."""
    start_t = time.monotonic()
    binary = ensure_gitea(progress or _stderr)
    forge = start(state, binary=binary, die_with_parent=die_with_parent, progress=progress)
    forge = create_repo(forge, private=True)  # clones need the token, as in real life
    push_fleet(forge, fleet)
    info = forge.info()
    if webhook_url:
        secret_file = forge.work / "webhook-secret"
        secret = secrets.token_hex(24)
        secret_file.write_text(secret + "\n")
        secret_file.chmod(0o600)
        forge.add_push_webhook(webhook_url, secret)
        info.update(webhook_url=webhook_url, webhook_secret_file=str(secret_file))
    (Path(state.dir) / "forge.json").write_text(json.dumps(info, indent=2) + "\n")
    if progress:
        progress(f"forge {forge.repo} up at {forge.url} in {time.monotonic() - start_t:.1f}s")
    return forge


def log_tail(state: controlplane.State, lines: int = 20) -> str:
    return controlplane._log_tail(state, PROCESS, lines)


def main() -> int:
    try:
        print(f"gitea: {ensure_gitea()}")
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
