"""Hearing of a plan's new events as they commit (LISTEN/NOTIFY).

Rows are written by the database itself, in the transaction of the audit row they mirror
(Storage migration 0002), and read through Storage's ``PlanEvents``. ``EventHub`` holds one LISTEN
connection for the process and wakes the event streams of the plan a notification names; a stream
registers before it reads, so a row committed between its read and its wait still wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import psycopg

__all__ = ["EventHub"]


@dataclass
class EventHub:
    """One LISTEN connection per process; per-plan wake-ups for event streams."""

    dsn: str
    _waiters: dict[str, set[asyncio.Event]] = field(default_factory=lambda: defaultdict(set))
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        """Start listening (returns once LISTEN is in place)."""
        if self._task is None:
            self._task = asyncio.create_task(self._listen())
            await asyncio.wait_for(self._ready.wait(), timeout=10)

    async def stop(self) -> None:
        """Stop listening."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await conn.execute("LISTEN plan_events")
                    self._ready.set()
                    self._wake_all()  # anything committed while we were reconnecting
                    async for note in conn.notifies():
                        plan_id = note.payload.split(":", 1)[0]
                        for ev in list(self._waiters.get(plan_id, ())):
                            ev.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                self._wake_all()
                await asyncio.sleep(0.5)

    def _wake_all(self) -> None:
        for events in self._waiters.values():
            for ev in events:
                ev.set()

    @contextlib.asynccontextmanager
    async def waiter(self, plan_id: str) -> AsyncIterator[asyncio.Event]:
        """An event set whenever a new row of ``plan_id`` commits (register before reading)."""
        ev = asyncio.Event()
        self._waiters[plan_id].add(ev)
        try:
            yield ev
        finally:
            self._waiters[plan_id].discard(ev)
            if not self._waiters[plan_id]:
                del self._waiters[plan_id]
