"""Group commit: the audit rows of concurrent decisions in one process share one transaction.

A row appended in its own transaction costs one commit (a WAL flush), which caps one row per
transaction at about 1,000 rows/s whatever the number of threads. ``GroupCommitAuditWriter``
serves the appends that are their own transaction (a refusal, a preview, a step event), not the
ones that must commit with another write (those stay ``AuditLog.append(conn, …)`` in the caller's
transaction). Scheme: leader/follower, no thread of its own. A caller validates, stamps and hashes
its entry in its own thread (``AuditLog.prepare``: a bad entry fails only its caller), queues it,
and waits; when no batch is being written, the first waiting caller becomes the leader, gathers
(waits at most ``gather_s``, 1 ms, for as many rows as the last batch held), takes everything
queued (up to ``max_batch``), appends it in one transaction through ``AuditLog.append_prepared``
(one statement) and commits, then wakes every caller of that batch with its sequence number.
Rows queued meanwhile form the next batch.

Invariants:
    * A caller returns only after the transaction holding its row has committed (durable as any
      commit: ``synchronous_commit`` is the database's), and gets the seq of its own row.
    * The chain stays linear across processes: every batch takes the ``audit_head`` row lock, as
      every single append does.
    * A failed batch fails exactly its callers, each with its own copy of the error; the next
      batch is written as usual. If the database refused a value or a constraint, the rows are
      retried one transaction each, so only the row at fault fails.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from countersign.kernel import CountersignError
from countersign.storage import (
    Database,
    StorageConstraintError,
    StorageError,
    StorageInputError,
)

from .store import AuditEntry, AuditLog, PreparedEntry

__all__ = ["GroupCommitAuditWriter"]


@dataclass(eq=False, slots=True)
class _Pending:
    """One caller's row and, once its batch is written, the outcome."""

    row: PreparedEntry
    done: bool = False
    seq: int | None = None
    error: CountersignError | None = None


class GroupCommitAuditWriter:
    """Appends audit rows as their own transaction, grouping concurrent callers into one commit.

    Thread-safe; one per process (more work, but they would only queue on the head lock).
    Usable as a context manager; ``close`` refuses new appends and returns once every queued
    row is written. It starts no thread: callers take turns writing the batch.

    Args:
        db: the database.
        log: the chain code (its clock stamps the rows when their callers append them).
        max_batch: the most rows one transaction takes.
        gather_s: how long a new leader may wait for the callers of the last batch to append
            again (until as many rows as that batch held are queued). Without it, concurrent
            callers split into two groups that commit in turn, each half as large (LLD.md).
    """

    def __init__(
        self, db: Database, *, log: AuditLog, max_batch: int = 512, gather_s: float = 0.001
    ) -> None:
        if max_batch < 1 or gather_s < 0:
            raise ValueError(
                f"max_batch must be at least 1 and gather_s not negative, got {max_batch} and "
                f"{gather_s}"
            )
        self._db = db
        self._log = log
        self._max_batch = max_batch
        self._gather_s = gather_s
        self._last = 1  # rows in the last batch
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # wakes the callers of a written batch
        self._gather = threading.Condition(lock)  # wakes a gathering leader
        self._queue: list[_Pending] = []
        self._writing = False
        self._closed = False
        #: batches and rows committed (for benchmarks and tests)
        self.batches = 0
        self.rows = 0

    @property
    def queued(self) -> int:
        """Rows waiting for the next batch (not counting the one being written)."""
        with self._cond:
            return len(self._queue)

    def append(self, entry: AuditEntry | Mapping[str, Any]) -> int:
        """Append ``entry`` as its own decision; return its seq once its row has committed.

        Raises:
            ContractError: the entry is not a valid ``AuditEntry`` (nothing was queued).
            StorageError: the batch's transaction failed (its subclasses as ``Database.tx``
                raises them, the message naming the batch), or the writer is closed.
            AuditHeadMissingError: the chain's head row is gone.
        """
        mine = _Pending(self._log.prepare(entry))
        with self._cond:
            if self._closed:
                raise StorageError(
                    "audit append: the group-commit writer is closed (the process is shutting "
                    "down); the entry was not stored"
                )
            self._queue.append(mine)
            self._gather.notify()
            while not mine.done:
                if self._writing:
                    self._cond.wait()
                    continue
                self._lead()
        if mine.error is not None:
            raise mine.error
        if mine.seq is None:  # done without an error means written: never expected
            raise StorageError("audit group commit: a row was marked done without a number")
        return mine.seq

    def _lead(self) -> None:
        """Write one batch (called holding the lock; releases it while the database works)."""
        self._writing = True
        # The callers of the last batch were just woken and may be about to append again: wait
        # for as many rows as the last batch held, for at most gather_s, before taking the queue.
        deadline = time.monotonic() + self._gather_s
        try:
            while len(self._queue) < min(self._last, self._max_batch) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._gather.wait(left)
        except BaseException:  # interrupted while gathering: let another caller lead
            self._writing = False
            self._cond.notify_all()
            raise
        batch = self._queue[: self._max_batch]
        del self._queue[: self._max_batch]
        self._last = len(batch)
        self._cond.release()
        try:
            outcome = self._write(batch)
        finally:
            self._cond.acquire()
            self._writing = False
            for p in batch:
                p.done = True
                if p.seq is None and p.error is None:  # the leader was interrupted
                    p.error = StorageError(
                        "audit append: the thread writing this row's batch was interrupted; "
                        "the row may or may not be stored"
                    )
            self._cond.notify_all()
        self.batches += outcome
        self.rows += sum(p.seq is not None for p in batch)

    def _write(self, batch: list[_Pending]) -> int:
        """Append ``batch`` in one transaction; its callers' outcomes; transactions committed."""
        try:
            with self._db.tx() as c:
                seqs = self._log.append_prepared(c, [p.row for p in batch])
        except (StorageInputError, StorageConstraintError) as e:
            if len(batch) == 1:
                batch[0].error = _for_caller(e, 1)
                return 0
            # a row the database refuses must not fail the others: one transaction each
            return sum(self._write([p]) for p in batch)
        except Exception as e:  # every other failure is the batch's, not one row's
            for p in batch:
                p.error = _for_caller(e, len(batch))
            return 0
        for p, seq in zip(batch, seqs, strict=True):
            p.seq = seq
        return 1

    def close(self) -> None:
        """Refuse new appends and wait until every queued row is written (idempotent)."""
        with self._cond:
            self._closed = True
            self._gather.notify_all()
            while self._queue or self._writing:
                self._cond.wait()

    def __enter__(self) -> GroupCommitAuditWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _for_caller(e: Exception, n: int) -> CountersignError:
    """The error one caller of a failed batch gets: its own copy, naming the batch."""
    what = f"audit append (group commit of {n} row{'s' if n != 1 else ''}; its transaction failed)"
    err: CountersignError
    if isinstance(e, CountersignError):
        err = copy.copy(e)
        err.message = f"{what}: {e.message}"
        err.args = (err.message,)
    else:  # a bug or a driver error outside Database.tx's translation (e.g. the pool's timeout)
        err = StorageError(f"{what}: {type(e).__name__}: {e}")
    err.__cause__ = e
    err.__suppress_context__ = True
    return err
