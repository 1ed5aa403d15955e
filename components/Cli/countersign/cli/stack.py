"""The whole stack from one command: ``countersign up`` starts embedded PostgreSQL, the Temporal dev
server (+ UI), n8n, the sandbox providers, the durable worker and the API, waits until each is
healthy, prints where everything is and a one-time login link, and stays in the foreground until
Ctrl-C (``--detach``: returns; ``countersign down`` stops it all, PostgreSQL included).

Every process is started through ``countersign.kernel.process`` with its pid file and log in the
data folder (``<home>/run``, ``<home>/logs``); a second ``up`` on the same folder finds the stack
running and says so.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
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
from countersign.n8n import status as n8n_status
from countersign.n8n import stop as n8n_stop
from countersign.sandbox import SandboxPorts, start_sandbox, stop_sandbox
from countersign.storage import Database, stop_embedded

__all__ = ["LOCAL_USER", "StackInfo", "stack_down", "stack_running", "stack_up"]

#: the browser user ``countersign up`` creates on first start (the login link signs in as it)
LOCAL_USER = "local"


@dataclass(frozen=True)
class StackInfo:
    """Where everything is."""

    api: str
    login: str
    temporal_ui: str
    n8n: str
    n8n_login: str
    mailbox: str
    logs: Path
    #: the other API processes (``api_replicas`` > 1), same database, Temporal and n8n
    more_apis: tuple[str, ...] = ()

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
        ]


def _run_dir(settings: Settings) -> Path:
    d = settings.home / "run"
    d.mkdir(parents=True, exist_ok=True)
    return d


def stack_running(settings: Settings, port: int) -> bool:
    """Is an API started by ``up`` from this data folder running?"""
    pid = read_pid(_run_dir(settings) / "api.pid")
    return pid is not None and alive(pid) and port_open(port)


def stack_up(settings: Settings, *, port: int, say: Callable[[str], None]) -> StackInfo:
    """Start everything not yet running; where everything is."""
    run, logs = _run_dir(settings), settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    db = Database.open(settings)
    say(f"database ok: schema {db.current_revision()}")
    n8n_dir = settings.home / "n8n"
    _start_n8n(settings, n8n_dir, db.engine.url.render_as_string(hide_password=False), say)
    mode = f"queue mode, {settings.n8n_workers} workers" if settings.n8n_workers else "one process"
    say(f"n8n ok: http://127.0.0.1:{settings.n8n_port} ({mode})")
    t = _start_temporal(settings, port)
    say(f"temporal ok: {t['address']} (UI {t['ui']})")
    sandbox = start_sandbox(
        settings.home,
        ports=SandboxPorts.any_free() if settings.sandbox_ports == "free" else None,
    )
    say(f"sandbox ok: {', '.join(f'{k} {v}' for k, v in sandbox.urls().items())}")
    env = {
        **os.environ,
        "COUNTERSIGN_HOME": str(settings.home),
        "COUNTERSIGN_CONNECTOR_SETTINGS": json.dumps(
            {**sandbox.connector_settings(), **settings.connector_settings}
        ),
    }
    for i in range(settings.durable_workers):
        _start_worker(run, logs, env, i)
    say(f"worker ok ({settings.durable_workers})")
    apis = [port + i for i in range(settings.api_replicas)]
    for i, p in enumerate(apis):
        _start_api(settings, p, run, logs, env, i)
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
    )


def _start_n8n(
    settings: Settings, n8n_dir: Path, database_url: str, say: Callable[[str], None]
) -> None:
    """n8n, unless it already answers healthy (installed into the cache on first use): one
    process, or queue mode on ``database_url`` with ``settings.n8n_workers`` workers."""
    from countersign.n8n.queue import start_configured  # noqa: PLC0415 - `up` only

    if not n8n_status(n8n_dir).get("healthy"):
        say("starting n8n (installs into the cache on first use, ~5 min once) …")
        start_configured(settings, n8n_dir, database_url=database_url)


def _start_temporal(settings: Settings, port: int) -> dict[str, Any]:
    """The Temporal dev server (+ UI) for a local address; a cluster the settings name as is."""
    host, _, tport = settings.temporal_address.rpartition(":")
    if host not in {"127.0.0.1", "localhost"}:  # a cluster the settings point at
        return {"address": settings.temporal_address, "ui": "(the cluster's own UI)"}
    return temporal_start(
        settings.home / "temporal",
        port=int(tport),
        ui_port=int(tport) + 1000,
        # the UI asks the API to open sealed payloads for the signed-in person
        ui_codec_endpoint=f"http://127.0.0.1:{port}/codec",
    )


#: how ``up`` runs its own commands (the worker, the API) in child processes
_EXE = [sys.executable, "-m", "countersign.cli"]


def _name(kind: str, index: int) -> str:
    """``worker``, ``worker-2``, …: the first of each keeps the name it always had."""
    return kind if index == 0 else f"{kind}-{index + 1}"


def _start_worker(run: Path, logs: Path, env: dict[str, str], index: int = 0) -> None:
    """Durable worker ``index``, unless its pid file names a live process."""
    name = _name("worker", index)
    worker_pid = read_pid(run / f"{name}.pid")
    if worker_pid is None or not alive(worker_pid):
        spawn(
            [*_EXE, "temporal", "worker"],
            log=logs / f"{name}.log",
            pid_file=run / f"{name}.pid",
            env=env,
        )


def _start_api(
    settings: Settings, port: int, run: Path, logs: Path, env: dict[str, str], index: int = 0
) -> None:
    """API process ``index`` on ``port``, unless it runs already; waits until it is healthy."""
    name = _name("api", index)
    pid = read_pid(run / f"{name}.pid")
    if pid is None or not alive(pid) or not port_open(port):
        log = logs / f"{name}.log"
        api = spawn(
            [*_EXE, "api", "--port", str(port)], log=log, pid_file=run / f"{name}.pid", env=env
        )
        wait_port(port, api, name=f"the API ({name})", log=log, timeout_s=60)
        _wait_healthy(f"http://127.0.0.1:{port}/healthz", log)


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
