"""The group-commit writer: concurrent callers share commits, each gets its own row's seq once
that row is durable, the chain stays linear across processes, and a failure stays in its batch."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, text

from countersign.audit import AuditHeadMissingError, AuditLog, GroupCommitAuditWriter
from countersign.kernel import ContractError, system_clock
from countersign.storage import Database, StorageConstraintError, StorageError

PLAN = "01JDQ3Z0000000000000000001"


def _entry(actor: str, step: int, **more: Any) -> dict[str, Any]:
    return {"kind": "step_finished", "status": "ok", "actor": actor, "step": step, **more}


def _row(db: Database, seq: int) -> dict[str, Any] | None:
    """Read one row on a connection of its own (sees committed rows only)."""
    with db.tx() as c:
        r = c.execute(text("SELECT * FROM audit_log WHERE seq = :s"), {"s": seq}).first()
    return dict(r._mapping) if r else None


def _verify(db: Database) -> tuple[bool, int]:
    with db.tx() as c:
        report = AuditLog(clock=system_clock).verify(c)
    assert report.ok, report
    return report.ok, report.rows


def _wait(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


@contextlib.contextmanager
def _head_held(db: Database) -> Iterator[Connection]:
    """Hold the audit head's row lock in a transaction of our own (as another process would)."""
    with db.engine.connect() as c:
        c.execute(text("SELECT seq FROM audit_head WHERE id = 1 FOR UPDATE"))
        yield c
        c.commit()


def _blocked_on_head(db: Database, n: int) -> Callable[[], bool]:
    def check() -> bool:
        waiting = db.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        return bool(waiting == n)

    return check


class _Callers:
    """Callers in threads of their own; each records its seq or its error."""

    def __init__(self, writer: GroupCommitAuditWriter, db: Database) -> None:
        self.writer, self.db = writer, db
        self.out: dict[str, int | Exception] = {}
        self.seen_at_return: dict[str, bool] = {}
        self.threads: list[threading.Thread] = []

    def start(self, actor: str, step: int = 0) -> None:
        def go() -> None:
            try:
                seq = self.writer.append(_entry(actor, step))
            except Exception as e:
                self.out[actor] = e
                return
            # durable on return: another connection sees the row at once
            self.seen_at_return[actor] = _row(self.db, seq) is not None
            self.out[actor] = seq

        t = threading.Thread(target=go)
        t.start()
        self.threads.append(t)

    def join(self) -> dict[str, int | Exception]:
        for t in self.threads:
            t.join(timeout=30)
            assert not t.is_alive()
        return self.out


def test_threads_each_get_their_own_row_in_shared_commits(db: Database) -> None:
    n_threads, per_thread = 8, 25
    got: dict[tuple[str, int], int] = {}
    with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as writer:

        def go(i: int) -> None:
            for j in range(per_thread):
                got[(f"t{i}", j)] = writer.append(_entry(f"t{i}", j, plan_id=PLAN))

        threads = [threading.Thread(target=go, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(got) == n_threads * per_thread
    assert sorted(got.values()) == list(range(1, n_threads * per_thread + 1))
    with db.tx() as c:
        rows = {r.seq: (r.actor, r.step) for r in c.execute(text("SELECT * FROM audit_log"))}
        events = c.execute(text("SELECT audit_seq FROM plan_events ORDER BY seq")).scalars().all()
    assert {seq: key for key, seq in got.items()} == rows
    # the trigger fed the plan's event log for each row, numbered in the chain's order
    assert events == list(range(1, n_threads * per_thread + 1))
    assert _verify(db) == (True, n_threads * per_thread)
    assert writer.rows == n_threads * per_thread
    assert writer.batches < writer.rows  # concurrent callers did share commits


def test_callers_queued_behind_a_batch_share_the_next_commit_and_see_their_rows(
    db: Database,
) -> None:
    with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as writer:
        callers = _Callers(writer, db)
        with _head_held(db):
            callers.start("leader")
            _wait(_blocked_on_head(db, 1), "the first batch waits for the head lock")
            for i in range(5):
                callers.start(f"f{i}", i)
            _wait(lambda: writer.queued == 5, "five callers are queued")
            time.sleep(0.05)
            assert callers.out == {}  # nobody returns before its commit
        out = callers.join()
    assert out["leader"] == 1
    assert {v for k, v in out.items() if k != "leader"} == {2, 3, 4, 5, 6}
    assert all(callers.seen_at_return.values()) and len(callers.seen_at_return) == 6
    assert (writer.batches, writer.rows) == (2, 6)
    for actor, seq in out.items():
        assert isinstance(seq, int)
        row = _row(db, seq)
        assert row is not None and row["actor"] == actor
    _verify(db)


def test_a_failed_batch_fails_only_its_callers(db: Database) -> None:
    """The first batch waits for the head lock while the head row is replaced: its statement no
    longer finds the head and fails; the batch queued behind it finds the new head and commits."""
    with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as writer:
        callers = _Callers(writer, db)
        with _head_held(db) as c:
            callers.start("doomed")
            _wait(_blocked_on_head(db, 1), "the first batch waits for the head lock")
            for i in range(3):
                callers.start(f"ok{i}", i)
            _wait(lambda: writer.queued == 3, "three callers are queued")
            head = c.execute(text("SELECT seq, last_hash FROM audit_head WHERE id = 1")).one()
            c.execute(text("DELETE FROM audit_head WHERE id = 1"))
            c.execute(
                text("INSERT INTO audit_head (id, seq, last_hash) VALUES (1, :s, :h)"),
                {"s": head.seq, "h": head.last_hash},
            )
        out = callers.join()
        err = out["doomed"]
        assert isinstance(err, AuditHeadMissingError)
        assert "group commit of 1 row" in err.message and "audit_head row is missing" in err.message
        assert {out[f"ok{i}"] for i in range(3)} == {1, 2, 3}
        assert writer.append(_entry("after", 0)) == 4  # the writer keeps working
    assert _verify(db) == (True, 4)


def test_a_batch_without_the_head_fails_every_caller_clearly(db: Database) -> None:
    with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as writer:
        writer.append(_entry("first", 0))
        callers = _Callers(writer, db)
        with _head_held(db) as c:
            callers.start("a")
            _wait(_blocked_on_head(db, 1), "the first batch waits for the head lock")
            for name in ("b", "c", "d"):
                callers.start(name)
            _wait(lambda: writer.queued == 3, "three callers are queued")
            head = c.execute(text("SELECT seq, last_hash FROM audit_head WHERE id = 1")).one()
            c.execute(text("DELETE FROM audit_head WHERE id = 1"))
        out = callers.join()
        errors = [out[k] for k in "abcd"]
        assert all(isinstance(e, AuditHeadMissingError) for e in errors)
        assert len({id(e) for e in errors}) == 4  # each caller has its own error object
        assert "group commit of 3 rows" in str(out["b"])
        with db.tx() as c2:
            c2.execute(
                text("INSERT INTO audit_head (id, seq, last_hash) VALUES (1, :s, :h)"),
                {"s": head.seq, "h": head.last_hash},
            )
        assert writer.append(_entry("after", 0)) == 2
    assert _verify(db) == (True, 2)


def test_a_row_the_database_refuses_fails_only_its_caller(db: Database) -> None:
    """A constraint the entry's validation cannot know of (added here for the test) fails the
    batch's transaction; the rows are retried one each, so only the refused one fails."""
    with db.tx() as c:
        c.execute(
            text("ALTER TABLE audit_log ADD CONSTRAINT test_no_mallory CHECK (actor <> 'mallory')")
        )
    try:
        with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as writer:
            callers = _Callers(writer, db)
            with _head_held(db):
                callers.start("first")
                _wait(_blocked_on_head(db, 1), "the first batch waits for the head lock")
                for name in ("alice", "mallory", "bob"):
                    callers.start(name)
                    _wait(_queued(writer, name), f"{name} is queued")
            out = callers.join()
    finally:
        with db.tx() as c:
            c.execute(text("ALTER TABLE audit_log DROP CONSTRAINT test_no_mallory"))
    assert isinstance(out["mallory"], StorageConstraintError)
    assert "group commit of 1 row" in str(out["mallory"])
    assert [out[k] for k in ("first", "alice", "bob")] == [1, 2, 3]
    assert writer.batches == 3  # first; then alice and bob alone after the shared one failed
    _verify(db)


def _queued(writer: GroupCommitAuditWriter, actor: str) -> Callable[[], bool]:
    def check() -> bool:  # queue order is batch order: wait for each before starting the next
        with writer._cond:
            return any(p.row.params["actor"] == actor for p in writer._queue)

    return check


def test_a_bad_entry_fails_its_caller_before_queueing(db: Database) -> None:
    with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as writer:
        for bad in (
            {"kind": "x", "status": "ok", "actor": "a"},
            _entry("a", 2**31),  # beyond the column's integer
            _entry("a\x00b", 1),  # NUL: PostgreSQL text cannot hold it
            _entry("a", 1, details={"k": ["x\x00"]}),
            _entry("a", 1, details={"token": "cst_x"}),
            _entry("a", 1, details={"n": [1e21]}),  # jsonb would give it back as an integer
        ):
            with pytest.raises(ContractError):
                writer.append(bad)
        assert writer.queued == 0
        assert writer.append(_entry("good", 1)) == 1


def test_settings_are_checked(db: Database) -> None:
    for bad in ({"max_batch": 0}, {"gather_s": -1.0}):
        with pytest.raises(ValueError, match="max_batch must be at least 1"):
            GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock), **bad)


def test_close_writes_what_is_queued_then_refuses(db: Database) -> None:
    before = threading.active_count()
    writer = GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock))
    assert threading.active_count() == before  # it starts no thread of its own
    callers = _Callers(writer, db)
    with _head_held(db):
        callers.start("a")
        _wait(_blocked_on_head(db, 1), "the first batch waits for the head lock")
        callers.start("b")
        _wait(lambda: writer.queued == 1, "b is queued")
        closer = threading.Thread(target=writer.close)
        closer.start()
        time.sleep(0.05)
        assert closer.is_alive()  # close waits for the queued rows
    closer.join(timeout=30)
    assert not closer.is_alive()
    assert callers.join() == {"a": 1, "b": 2}
    with pytest.raises(StorageError, match="writer is closed"):
        writer.append(_entry("late", 0))
    writer.close()  # idempotent
    assert threading.active_count() == before


_CHILD = """
import json, sys, threading
from countersign.audit import AuditLog, GroupCommitAuditWriter
from countersign.kernel import system_clock
from countersign.storage import Database

url, name, threads, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
db = Database.from_url(url, migrate=False)
got = []
sys.stdin.readline()  # start together
with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as w:
    def go(i):
        for j in range(per):
            e = {"kind": "step_finished", "status": "ok", "actor": f"{name}-{i}", "step": j}
            got.append((w.append(e), f"{name}-{i}", j))
    ts = [threading.Thread(target=go, args=(i,)) for i in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
print(json.dumps({"rows": got, "batches": w.batches}))
db.dispose()
"""


def test_two_processes_keep_one_linear_chain(db: Database, pg_url: str) -> None:
    threads, per = 4, 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, pg_url, name, str(threads), str(per)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2")
    ]
    outs = [p.communicate("go\n", timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    got = [tuple(r) for o in outs for r in json.loads(o)["rows"]]
    total = 2 * threads * per
    assert sorted(seq for seq, _, _ in got) == list(range(1, total + 1))
    with db.tx() as c:
        rows = {r.seq: (r.actor, r.step) for r in c.execute(text("SELECT * FROM audit_log"))}
    assert {seq: (actor, step) for seq, actor, step in got} == rows
    assert _verify(db) == (True, total)


_text = st.text(max_size=40) | st.sampled_from(
    ["", "\x00", "a\x00", "\ud800", "é", "cst_" + "x" * 24]
)
_json: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e21, 2.0**53, -(2.0**60), 5.0, 1e-7])
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_entries = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["step_finished", "gate_approved", "x"]),
        "status": _text,
        "actor": _text,
    },
    optional={
        "step": st.integers(-1, 2**32),
        "op": _text,
        "reason": _text,
        "latency_ms": st.integers(0, 2**32),
        "retries": st.integers(0, 2**32),
        "details": st.dictionaries(_text, _json, max_size=3),
    },
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(entry=_entries)
def test_any_entry_is_refused_up_front_or_stored_as_given(
    db: Database, entry: dict[str, Any]
) -> None:
    """Whatever the content: a ContractError before queueing, or a row that holds the entry and
    keeps the chain verifiable — never a database error for a validated entry."""
    with GroupCommitAuditWriter(db, log=AuditLog(clock=system_clock)) as writer:
        try:
            seq = writer.append(entry)
        except ContractError:
            return
    row = _row(db, seq)
    assert row is not None
    for key, value in entry.items():
        if key != "details":
            assert row[key] == value, key
    with db.tx() as c:
        assert AuditLog(clock=system_clock).verify(c).ok
