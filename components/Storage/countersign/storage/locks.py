"""Resource locks: writes that touch the same resource run one after another, across processes.

A lock is a PostgreSQL session-level advisory lock on ``hashtextextended(key, SEED)``, taken on a
connection of its own for as long as the holder needs it (the staleness re-check and the writes
of one gate), so the API processes, their n8n calls and the durable workers all serialize on the
one database. The lease is the holder's database session: a process that dies loses its
connection and PostgreSQL drops its locks at once; a holder that hangs idle past
``lease_s`` has its session ended by the server (``idle_session_timeout``), which releases them
too. Waiting never blocks an event loop: locks are *tried* (``pg_try_advisory_lock``), all of a
holder's keys or none, in sorted order, and retried after a short sleep until ``wait_s`` ends,
then ``ResourceBusyError`` names the key that was held.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from .db import Database
from .errors import ResourceBusyError, StorageError

__all__ = ["LOCK_SEED", "ResourceLocks"]

#: the seed of the key hash: Countersign's advisory keys never meet another application's
LOCK_SEED = 7357_2025


_TRY_ALL = text(
    """
    SELECT (SELECT array_agg(pg_try_advisory_lock(hashtextextended(k, :seed)) ORDER BY i)
            FROM unnest(CAST(:ks AS text[])) WITH ORDINALITY AS t(k, i))
    FROM (SELECT set_config('idle_session_timeout', :lease, false)) AS lease
    """
)

#: the lock connection holds no other session lock (it is taken for one ``hold`` and handed back
#: after this), so ``pg_advisory_unlock_all`` lets go of exactly the holder's keys; ``reset_val``
#: is what ``RESET idle_session_timeout`` would restore
_LET_GO = text(
    """
    SELECT pg_advisory_unlock_all(), set_config('idle_session_timeout', reset_val, false)
    FROM pg_settings WHERE name = 'idle_session_timeout'
    """
)


@dataclass
class ResourceLocks:
    """Advisory locks by resource key over ``db`` (module docstring)."""

    db: Database
    #: how long a holder may sit idle on its lock connection before the server ends it
    lease_s: float = 120.0
    #: the first and the longest sleep between tries
    backoff_s: tuple[float, float] = (0.005, 0.05)

    @contextlib.asynccontextmanager
    async def hold(
        self, keys: Iterable[str], *, wait_s: float = 15.0
    ) -> AsyncIterator[Connection | None]:
        """Hold every key in ``keys`` until the block ends (none: nothing is taken). Yields the
        lock's connection (``AUTOCOMMIT``: each statement its own transaction), so a holder can
        send its statements under the lock without taking a second connection from the pool;
        None when nothing is held.

        Raises:
            ResourceBusyError: another holder kept one of them for ``wait_s`` seconds.
            StorageError: the database could not be reached.
        """
        wanted = sorted(set(keys))
        if not wanted:
            yield None
            return
        conn = self._connect()
        try:
            try:
                await self._take(conn, wanted, wait_s)
            except SQLAlchemyError as e:  # the database went away between connect and take
                raise StorageError(f"cannot take the locks {wanted}: {e}") from e
            yield conn
        finally:
            # one statement lets every key go and puts the lease's timeout back to the session's
            # default: the connection goes back to the pool and must keep neither (a lost
            # session released them already)
            with contextlib.suppress(SQLAlchemyError):
                conn.execute(_LET_GO)
            conn.close()

    def _connect(self) -> Connection:
        try:
            conn = self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except DBAPIError as e:
            raise StorageError(f"cannot open a lock connection: {e.orig}") from e
        return conn

    async def _take(self, conn: Connection, keys: list[str], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        pause = self.backoff_s[0]
        while True:
            busy = self._try_all(conn, keys)
            if busy is None:
                return
            if time.monotonic() + pause > deadline:
                raise ResourceBusyError(busy, wait_s)
            await asyncio.sleep(pause)
            pause = min(pause * 2, self.backoff_s[1])

    def _try_all(self, conn: Connection, keys: list[str]) -> str | None:
        """Take every key, or none: the first key held elsewhere (what was taken is let go).
        One statement sets the session's lease (``idle_session_timeout``) and tries every key in
        order (a try never waits, so the order only names the first busy key)."""
        got = conn.execute(
            _TRY_ALL,
            {"lease": str(int(self.lease_s * 1000)), "ks": list(keys), "seed": LOCK_SEED},
        ).scalar_one()
        taken = [k for k, ok in zip(keys, got, strict=True) if ok]
        if len(taken) == len(keys):
            return None
        self._release(conn, taken)
        return next(k for k, ok in zip(keys, got, strict=True) if not ok)

    @staticmethod
    def _release(conn: Connection, keys: list[str]) -> None:
        for k in keys:
            with contextlib.suppress(SQLAlchemyError):  # a lost session released them already
                conn.execute(
                    text("SELECT pg_advisory_unlock(hashtextextended(:k, :seed))"),
                    {"k": k, "seed": LOCK_SEED},
                )
