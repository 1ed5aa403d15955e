"""The whole stack from one command: ``countersign up`` starts embedded PostgreSQL, the Temporal dev
server (+ UI), n8n, the sandbox providers, the durable worker and the API, waits until each is
healthy, prints where everything is and a one-time login link, and stays in the foreground until
Ctrl-C (``--detach``: returns; ``countersign down`` stops it all, PostgreSQL included).

Every process is started through ``countersign.kernel.process`` with its pid file and log in the
data folder (``<home>/run``, ``<home>/logs``). ``up`` run again on the same folder starts exactly the
processes that are not running (a pid file names a process while ``read_pid`` says so: the pid
alive and still the process it was written for) and leaves the running ones alone; it says which
it started and which were already up.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.kernel import Settings, system_clock
from countersign.kernel.process import (
    ServiceError,
    alive,
    port_open,
    read_pid,
    spawn,
    stop_group,
    wait_port,
)
from countersign.n8n import stop as n8n_stop
from countersign.sandbox import SandboxPorts, sandbox_status, start_sandbox, stop_sandbox
from countersign.storage import Database, stop_embedded

from .n8nstack import ensure_n8n, n8n_processes

__all__ = ["LOCAL_USER", "StackInfo", "Tally", "stack_down", "stack_processes", "stack_up"]

#: the browser user ``countersign up`` creates on first start (the login link signs in as it)
LOCAL_USER = "local"


@dataclass
class Tally:
    """What ``up`` started and what it found running, by process name (the pid file's stem)."""

    started: list[str] = field(default_factory=list)
    already_up: list[str] = field(default_factory=list)

    def note(self, name: str, started: bool) -> None:
        (self.started if started else self.already_up).append(name)

    @property
    def was_running(self) -> bool:
        """Was the stack of this folder running: an API or a durable worker, which only ``up``
        starts? (PostgreSQL, n8n, Temporal and the sandbox also run from other commands.)"""
        return any(n.partition("-")[0] in ("api", "worker") for n in self.already_up)

    def lines(self) -> list[str]:
        return [
            f"started          {', '.join(self.started) or 'nothing'}",
            f"already up       {', '.join(self.already_up) or 'nothing'}",
        ]


@dataclass(frozen=True)
class StackInfo:
    """Where everything is, and what this ``up`` started."""

    api: str
    login: str
    temporal_ui: str
    n8n: str
    n8n_login: str
    mailbox: str
    logs: Path
    #: the other API processes (``api_replicas`` > 1), same database, Temporal and n8n
    more_apis: tuple[str, ...] = ()
    tally: Tally = field(default_factory=Tally)

    def lines(self) -> list[str]:
        more = [f"more APIs        {', '.join(self.more_apis)}"] if self.more_apis else []
        return [
            f"API + chat page  {self.api}",
            *more,
            f"sign in (once)   {self.login}",
            f"Temporal UI      {self.temporal_ui}",
            f"n8n editor       {self.n8n}  ({self.n8n_login})",
            f"sandbox mailbox  {self.mailbox}",
            f"logs             {self.logs}",
            *self.tally.lines(),
        ]


def _run_dir(settings: Settings) -> Path:
    d = settings.home / "run"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _running(pid_file: Path) -> bool:
    pid = read_pid(pid_file)  # None once the pid names another process (pids are reused)
    return pid is not None and alive(pid)


def _postgres_running(folder: Path) -> bool:
    """Does the embedded PostgreSQL of ``folder`` run (``postmaster.pid``'s first line)?"""
    try:
        pid = int((folder / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    return alive(pid)


def stack_processes(settings: Settings) -> dict[str, bool]:
    """Each process ``up`` starts with these settings, and every other one a pid file of the data
    folder names (started by ``up --scale``), by name: is it running?"""
    run, home, n8n_dir = _run_dir(settings), settings.home, settings.home / "n8n"
    out: dict[str, bool] = {}
    if settings.database_url is None:
        out["postgres"] = _postgres_running(home / "pg")
    n8n = n8n_processes(settings, n8n_dir)
    for f in sorted([*n8n_dir.glob("n8n-worker-*.pid"), *n8n_dir.glob("redis.pid")]):
        n8n.setdefault(f.stem, f)
    out |= {n: _running(f) for n, f in n8n.items()}
    if _local_temporal(settings):
        out["temporal"] = _running(home / "temporal" / "temporal.pid")
    out["sandbox"] = bool(sandbox_status(home)["running"])
    for kind, count in (("worker", settings.durable_workers), ("api", settings.api_replicas)):
        names = [*_names(kind, count), *(f.stem for f in sorted(run.glob(f"{kind}-*.pid")))]
        out |= {n: _running(run / f"{n}.pid") for n in dict.fromkeys(names)}
    return out


def stack_up(settings: Settings, *, port: int, say: Callable[[str], None]) -> StackInfo:
    """Start every process that is not running, leave the running ones alone; where everything
    is and what was started."""
    run, logs = _run_dir(settings), settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    tally = Tally()
    if settings.database_url is None:
        tally.note("postgres", not _postgres_running(settings.home / "pg"))
    db = Database.open(settings)
    say(f"database ok: schema {db.current_revision()}")
    n8n_dir = settings.home / "n8n"
    url = db.engine.url.render_as_string(hide_password=False)
    if not all(_running(f) for f in n8n_processes(settings, n8n_dir).values()):
        say("starting n8n (installs into the cache on first use, ~5 min once) …")
    ensure_n8n(settings, n8n_dir, database_url=url, note=tally.note)
    mode = f"queue mode, {settings.n8n_workers} workers" if settings.n8n_workers else "one process"
    say(f"n8n ok: http://127.0.0.1:{settings.n8n_port} ({mode})")
    t = _start_temporal(settings, port, tally)
    say(f"temporal ok: {t['address']} (UI {t['ui']})")
    tally.note("sandbox", not sandbox_status(settings.home)["running"])
    sandbox = start_sandbox(settings.home, ports=_sandbox_ports(settings, run))
    say(f"sandbox ok: {', '.join(f'{k} {v}' for k, v in sandbox.urls().items())}")
    env = {
        **os.environ,
        "COUNTERSIGN_HOME": str(settings.home),
        "COUNTERSIGN_CONNECTOR_SETTINGS": json.dumps(
            {**sandbox.connector_settings(), **settings.connector_settings}
        ),
    }
    for name in _names("worker", settings.durable_workers):
        tally.note(name, _start_worker(name, run, logs, env))
    say(f"worker ok ({settings.durable_workers})")
    apis = [port + i for i in range(settings.api_replicas)]
    for name, p in zip(_names("api", settings.api_replicas), apis, strict=True):
        tally.note(name, _start_api(name, p, run, logs, env))
    say(f"api ok: {', '.join(f'http://127.0.0.1:{p}' for p in apis)}")
    from countersign.api import UserStore  # noqa: PLC0415 - `up` only (`down` imports this module)

    users = UserStore(db, clock=system_clock)
    users.ensure(LOCAL_USER)
    link = f"http://127.0.0.1:{port}/login?token={users.login_link(LOCAL_USER)}"
    db.dispose()
    return StackInfo(
        api=f"http://127.0.0.1:{port}",
        login=link,
        temporal_ui=str(t["ui"]),
        n8n=f"http://127.0.0.1:{settings.n8n_port}",
        n8n_login=f"owner@countersign.local, password in {n8n_dir / 'countersign-owner-password'}",
        mailbox=sandbox.mailbox_url,
        logs=logs,
        more_apis=tuple(f"http://127.0.0.1:{p}" for p in apis[1:]),
        tally=tally,
    )


def _sandbox_ports(settings: Settings, run: Path) -> SandboxPorts | None:
    """The ports ``start_sandbox`` is given: None (its defaults) unless the settings say ``free``;
    then free ones, except while an API or a durable worker of this folder runs: their connector
    settings name the providers' ports, so a set started again (one provider died) takes the
    ports it had."""
    if settings.sandbox_ports != "free":
        return None
    if not any(_running(f) for f in [*run.glob("api*.pid"), *run.glob("worker*.pid")]):
        return SandboxPorts.any_free()
    had = sandbox_status(settings.home)["services"]

    def port(where: str) -> int:
        return int(where.rsplit(":", 1)[1])

    return SandboxPorts(
        caldav=port(had["caldav"]["url"]),
        smtp=port(had["mail"]["smtp"]),
        mailbox=port(had["mail"]["url"]),
        shop=port(had["shop"]["url"]),
        visa=port(had["visa"]["url"]),
    )


def _local_temporal(settings: Settings) -> bool:
    """Does ``up`` run the Temporal dev server (a local address), not a cluster?"""
    return settings.temporal_address.rpartition(":")[0] in {"127.0.0.1", "localhost"}


def _start_temporal(settings: Settings, port: int, tally: Tally) -> dict[str, Any]:
    """The Temporal dev server (+ UI) for a local address; a cluster the settings name as is."""
    if not _local_temporal(settings):  # a cluster the settings point at
        return {"address": settings.temporal_address, "ui": "(the cluster's own UI)"}
    tport = int(settings.temporal_address.rpartition(":")[2])
    tally.note("temporal", not port_open(tport))
    return temporal_start(
        settings.home / "temporal",
        port=tport,
        ui_port=tport + 1000,
        # the UI asks the API to open sealed payloads for the signed-in person
        ui_codec_endpoint=f"http://127.0.0.1:{port}/codec",
    )


#: how ``up`` runs its own commands (the worker, the API) in child processes
_EXE = [sys.executable, "-m", "countersign.cli"]


def _names(kind: str, count: int) -> list[str]:
    """``worker``, ``worker-2``, …: the first of each keeps the name it always had."""
    return [kind if i == 0 else f"{kind}-{i + 1}" for i in range(count)]


def _start_worker(name: str, run: Path, logs: Path, env: dict[str, str]) -> bool:
    """Durable worker ``name``, unless its pid file names a live process; True if started."""
    if _running(run / f"{name}.pid"):
        return False
    spawn(
        [*_EXE, "temporal", "worker"],
        log=logs / f"{name}.log",
        pid_file=run / f"{name}.pid",
        env=env,
    )
    return True


def _start_api(name: str, port: int, run: Path, logs: Path, env: dict[str, str]) -> bool:
    """API process ``name`` on ``port``, unless its pid file names a live process; waits until it
    is healthy either way (a running one may still be starting); True if started."""
    log = logs / f"{name}.log"
    started = not _running(run / f"{name}.pid")
    if started:
        api = spawn(
            [*_EXE, "api", "--port", str(port)], log=log, pid_file=run / f"{name}.pid", env=env
        )
        wait_port(port, api, name=f"the API ({name})", log=log, timeout_s=60)
    _wait_healthy(f"http://127.0.0.1:{port}/healthz", log)
    return started


def _wait_healthy(url: str, log: Path, timeout_s: float = 60) -> None:
    import httpx  # noqa: PLC0415 - `up` only (`down` imports this module)

    deadline = threading.Event()
    timer = threading.Timer(timeout_s, deadline.set)
    timer.start()
    try:
        while not deadline.is_set():
            try:
                if httpx.get(url, timeout=3).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            deadline.wait(0.3)
    finally:
        timer.cancel()
    raise ServiceError(f"the API did not report healthy within {timeout_s:.0f} s; see {log}")


def stack_down(settings: Settings, *, say: Callable[[str], None]) -> None:
    """Stop everything ``up`` started, newest first, PostgreSQL included."""
    run = _run_dir(settings)
    say(f"api: {'stopped' if _stop_all(run, 'api') else 'not running'}")
    say(f"worker: {'stopped' if _stop_all(run, 'worker') else 'not running'}")
    stopped = stop_sandbox(settings.home)
    say(f"sandbox: {'stopped' if stopped else 'not running'}")
    say(f"n8n: {'stopped' if n8n_stop(settings.home / 'n8n') else 'not running'}")
    say(f"temporal: {'stopped' if temporal_stop(settings.home / 'temporal') else 'not running'}")
    if settings.database_url is None:
        say(f"postgres: {'stopped' if stop_embedded(settings.home / 'pg') else 'not running'}")


def _stop_all(run: Path, kind: str) -> bool:
    """Stop every ``kind`` process of the stack (``api.pid``, ``api-2.pid``, …); True if any ran."""
    files = [run / f"{kind}.pid", *sorted(run.glob(f"{kind}-*.pid"))]
    return any([stop_group(f) for f in files])


def wait_for_interrupt(on_stop: Callable[[], Any]) -> None:
    """Stay in the foreground until Ctrl-C or SIGTERM, then ``on_stop()``."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    on_stop()
