"""n8n in queue mode (N8nRuntime LLD §Queue mode): one main process that takes the webhooks and the
API, ``workers`` processes that run the executions, Redis between them, n8n's own data on
PostgreSQL.

- **Redis**: Debian's ``redis-server`` on a loopback port of its own, no persistence (the queue
  holds only jobs in flight; a job lost with Redis is an execution that never started — the
  write protocol's ledger already treats that as ``lost``/``unknown`` and never re-sends).
- **PostgreSQL**: a database ``n8n`` in the cluster the caller names (the embedded one by default);
  created when missing. Queue mode needs a database every process shares: SQLite cannot be.
- **Workers**: ``n8n worker`` with the main process's encryption key, each with its own health
  port (``/healthz/readiness`` is the readiness probe) and task-broker port, pid files
  ``n8n-worker-<i>.pid`` next to ``n8n.pid``; :func:`countersign.n8n.runtime.stop` stops them and
  Redis with the main process.

The single-process mode (SQLite, no Redis) stays the default; ``Settings.n8n_workers`` > 0 picks
this one.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import psycopg
from psycopg import sql

from countersign.kernel import Settings
from countersign.kernel.process import alive, free_port, read_pid, spawn, wait_port

from .errors import N8nUnavailableError
from .runtime import N8nHandle, N8nInstall, install, process_env, start

__all__ = ["N8nDatabase", "QueueHandle", "start_configured", "start_queue"]

#: the database n8n keeps its workflows and executions in (beside Countersign's own)
N8N_DATABASE = "n8n"


@dataclass(frozen=True)
class N8nDatabase:
    """Where n8n's PostgreSQL is: ``host`` may be a socket folder (a path), as libpq allows."""

    host: str
    port: int
    user: str
    password: str
    database: str = N8N_DATABASE

    @classmethod
    def from_url(cls, url: str) -> N8nDatabase:
        """From Countersign's database URL (``postgresql[+driver]://user:pw@host:port/db?host=``):
        the same server and user, the ``n8n`` database."""
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
        return cls(
            host=host,
            port=int(query.get("port", [parts.port or 5432])[0]),
            user=unquote(parts.username or "postgres"),
            password=unquote(parts.password or ""),
        )

    def env(self) -> dict[str, str]:
        return {
            "DB_TYPE": "postgresdb",
            "DB_POSTGRESDB_HOST": self.host,
            "DB_POSTGRESDB_PORT": str(self.port),
            "DB_POSTGRESDB_DATABASE": self.database,
            "DB_POSTGRESDB_USER": self.user,
            "DB_POSTGRESDB_PASSWORD": self.password,
            "DB_POSTGRESDB_POOL_SIZE": "4",
        }

    def ensure(self) -> None:
        """Create the database when it is missing (idempotent)."""
        with psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if found is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))


@dataclass(frozen=True)
class QueueHandle:
    """The main process's handle plus where the workers and Redis run."""

    main: N8nHandle
    worker_pids: tuple[int, ...]
    redis_port: int


def _redis(data_dir: Path) -> int:
    """Start (or reuse) the Redis of ``data_dir``; its port."""
    pid, port_file = read_pid(data_dir / "redis.pid"), data_dir / "redis.port"
    if pid is not None and alive(pid) and port_file.exists():
        return int(port_file.read_text().strip())
    exe = shutil.which("redis-server")
    if exe is None:
        raise N8nUnavailableError(
            "n8n's queue mode needs redis-server (Debian: apt-get install redis-server)"
        )
    port = free_port()
    log = data_dir / "redis.log"
    proc = spawn(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        log=log,
        pid_file=data_dir / "redis.pid",
        cwd=data_dir,
    )
    port_file.write_text(f"{port}\n")
    wait_port(port, proc, name="redis-server", log=log, timeout_s=15.0)
    return port


def _queue_env(db: N8nDatabase, redis_port: int) -> dict[str, str]:
    return {
        **db.env(),
        "EXECUTIONS_MODE": "queue",
        "QUEUE_BULL_REDIS_HOST": "127.0.0.1",
        "QUEUE_BULL_REDIS_PORT": str(redis_port),
        "OFFLOAD_MANUAL_EXECUTIONS_TO_WORKERS": "true",
        "N8N_GRACEFUL_SHUTDOWN_TIMEOUT": "5",
    }


def _wait_worker(port: int, pid: int, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if not alive(pid):
                tail = log.read_text(errors="replace")[-1500:]
                raise N8nUnavailableError(f"an n8n worker exited while starting; {log}:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if http.get(f"http://127.0.0.1:{port}/healthz/readiness").status_code == 200:
                    return
            time.sleep(0.25)
    raise N8nUnavailableError(f"an n8n worker was not ready within {timeout_s:.0f} s; see {log}")


def _worker(inst: N8nInstall, main: N8nHandle, index: int, env: dict[str, str]) -> int:
    data = main.data_dir
    key = (data / "countersign-encryption-key").read_text().strip()
    health = free_port()
    wenv = process_env(inst, data / f"worker-{index}", free_port(), key)
    wenv.update(env)
    wenv.update({"QUEUE_HEALTH_CHECK_ACTIVE": "true", "QUEUE_HEALTH_CHECK_PORT": str(health)})
    wenv["N8N_WORKER_SERVER_ADDRESS"] = "127.0.0.1"
    (data / f"worker-{index}").mkdir(exist_ok=True, mode=0o700)
    log = data / f"n8n-worker-{index}.log"
    proc = spawn(
        [str(inst.node), str(inst.n8n_bin), "worker", "--concurrency=10"],
        log=log,
        pid_file=data / f"n8n-worker-{index}.pid",
        cwd=data,
        env=wenv,
    )
    _wait_worker(health, proc.pid, log, 120.0)
    return proc.pid


def start_queue(
    inst: N8nInstall,
    data_dir: Path,
    *,
    database_url: str,
    workers: int = 2,
    port: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> QueueHandle:
    """Redis, the ``n8n`` database, the main process (bootstrapped like the single mode) and
    ``workers`` workers, each ready before this returns."""
    if workers < 1:
        raise ValueError("queue mode needs at least one worker")
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = N8nDatabase.from_url(database_url)
    db.ensure()
    env = {**_queue_env(db, _redis(data_dir)), **(extra_env or {})}
    main = start(inst, data_dir, port=port, extra_env=env)
    pids = tuple(_worker(inst, main, i, env) for i in range(workers))
    return QueueHandle(main=main, worker_pids=pids, redis_port=int(env["QUEUE_BULL_REDIS_PORT"]))


def start_configured(
    settings: Settings, data_dir: Path, *, database_url: str | None = None
) -> N8nHandle:
    """n8n as the settings say: one process, or queue mode with ``settings.n8n_workers`` workers
    on ``database_url`` (Countersign's own PostgreSQL; ``DATABASE_URL`` when not given). Installs
    into the cache on first use."""
    inst = install(settings.cache_dir)
    env: dict[str, str] = {"N8N_EXPRESSION_ENGINE": settings.n8n_expression_engine}
    if settings.n8n_workers == 0:
        return start(inst, data_dir, port=settings.n8n_port, extra_env=env)
    url = database_url or (
        settings.database_url.get_secret_value() if settings.database_url else None
    )
    if url is None:
        raise N8nUnavailableError(
            "n8n's queue mode (COUNTERSIGN_N8N_WORKERS > 0) needs a PostgreSQL: set DATABASE_URL "
            "or start it with 'countersign up', which uses the embedded one"
        )
    handle = start_queue(
        inst,
        data_dir,
        database_url=url,
        workers=settings.n8n_workers,
        port=settings.n8n_port,
        extra_env=env,
    )
    return handle.main
