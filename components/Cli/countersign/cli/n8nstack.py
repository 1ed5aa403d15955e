"""n8n as ``countersign up`` runs it, started process by process: the main process alone, or in
queue mode the main process, its ``n8n_workers`` workers and Redis. ``up`` run again starts only
the processes that are not running and leaves the running ones alone (Cli SPEC §up).

The one exception is Redis: a new Redis listens on a new port, and n8n's processes know only the
port they started with, so when Redis is gone the whole n8n set is started again (a job in flight
with Redis was lost with it either way; the write protocol treats it as ``lost``/``unknown``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from countersign.kernel import Settings
from countersign.kernel.process import alive, read_pid

__all__ = ["ensure_n8n", "n8n_processes"]

#: ``note(name, started)``: one process of the stack, started now (True) or found running
Note = Callable[[str, bool], None]


def _running(pid_file: Path) -> bool:
    pid = read_pid(pid_file)  # None once the pid names another process (reused)
    return pid is not None and alive(pid)


def n8n_processes(settings: Settings, data_dir: Path) -> dict[str, Path]:
    """Each n8n process of the settings' mode, by name (its pid file's stem): its pid file."""
    names = ["n8n"]
    if settings.n8n_workers:
        names += ["redis", *(f"n8n-worker-{i}" for i in range(settings.n8n_workers))]
    return {name: data_dir / f"{name}.pid" for name in names}


def ensure_n8n(settings: Settings, data_dir: Path, *, database_url: str, note: Note) -> None:
    """Start each n8n process that is not running (installs into the cache on first use);
    ``note`` hears of every process, started or found running."""
    from countersign.n8n.queue import start_configured  # noqa: PLC0415 - `up` only

    running = {name: _running(f) for name, f in n8n_processes(settings, data_dir).items()}
    whole = not any(running.values()) or not running.get("redis", True)
    if whole:  # nothing of it runs, or Redis is gone (see the module's text)
        if any(running.values()):
            from countersign.n8n.runtime import stop  # noqa: PLC0415

            stop(data_dir)
        start_configured(settings, data_dir, database_url=database_url)
        for name in running:
            note(name, True)
        return
    if settings.n8n_workers:
        _restart_queue_parts(settings, data_dir, database_url, running)
    for name, up in running.items():
        note(name, not up)


def _restart_queue_parts(
    settings: Settings, data_dir: Path, database_url: str, running: dict[str, bool]
) -> None:
    """Queue mode with Redis running: the main process and each worker that is not running,
    with the environment ``start_queue`` gave them (the same Redis, database and key)."""
    # the queue module has no public "start one part" yet (Cli LLD §up names the change)
    from countersign.n8n.queue import (  # noqa: PLC0415 - `up` only
        N8nDatabase,
        _queue_env,
        _redis,
        _worker,
    )
    from countersign.n8n.runtime import handle_from, install, start  # noqa: PLC0415

    inst = install(settings.cache_dir)
    env = {
        **_queue_env(N8nDatabase.from_url(database_url), _redis(data_dir)),
        "N8N_EXPRESSION_ENGINE": settings.n8n_expression_engine,
    }
    if not running["n8n"]:
        start(inst, data_dir, port=settings.n8n_port, extra_env=env)
    main = handle_from(data_dir)
    for i in range(settings.n8n_workers):
        if not running[f"n8n-worker-{i}"]:
            _worker(inst, main, i, env)
