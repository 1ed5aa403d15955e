"""Benchmark: Storage's ``ResourceLocks`` under contention (issue 26, Measure), on a fresh
embedded PostgreSQL in a temp folder.

Cases (each holder is a thread running its own event loop with its own lock connection, as API
processes and durable workers each hold on their own connection):

* uncontended: one holder, one key: acquire (``hold()`` called → block entered: a pool checkout
  and the one try statement) and release (block left → ``hold()`` returned: the unlock, the
  lease's ``RESET`` and the connection back to the pool);
* one hot key, N holders (2, 8, 32), each holding it ``--hold-ms`` per turn: the time from asking
  to holding, the release, the handoff gap (the previous holder starts to let go → the next one
  is in: what the polling adds), the tries per acquire;
* disjoint keys, N holders: what contention on the server alone costs;
* the meeting's 4 keys against another 4-key set that shares one key;
* take + release per second on one hot key (no hold), 1 and 8 holders;
* the hot-key case again with other poll intervals (``backoff_s``): a waiter only sees a release
  at its next try, so the sleep between tries is in the wait.

Run: ``.venv/bin/python bench/bench_locks.py [--rounds 400] [--hold-ms 10] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, text

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.storage import Database, ResourceLocks, embedded_server
from countersign.storage.locks import LOCK_SEED

MEETING = ["calendar:alice", "calendar:bob", "mail:alice@example.org", "mail:bob@example.org"]
OTHER = ["calendar:bob", "calendar:carol", "mail:carol@example.org", "mail:dave@example.org"]
DEFAULT_BACKOFF: tuple[float, float] = ResourceLocks.backoff_s


@dataclass
class Counted(ResourceLocks):
    """``ResourceLocks`` that counts its tries (one statement each)."""

    tries: int = 0

    def _try_all(self, conn: Connection, keys: list[str]) -> str | None:
        self.tries += 1
        return super()._try_all(conn, keys)


@dataclass
class Case:
    name: str
    acquire: list[float] = field(default_factory=list)  # ms
    release: list[float] = field(default_factory=list)  # ms
    #: in, letting go, out, holder, asked
    spans: list[tuple[float, float, float, int, float]] = field(default_factory=list)
    tries: int = 0
    wall_s: float = 0.0

    def row(self) -> dict[str, float | str | int]:
        am, ap = summary(self.acquire)
        rm, rp = summary(self.release)
        out: dict[str, float | str | int] = {
            "case": self.name,
            "holds": len(self.acquire),
            "acquire_median_ms": round(am, 3),
            "acquire_p95_ms": round(ap, 3),
            "acquire_max_ms": round(max(self.acquire), 3),
            "release_median_ms": round(rm, 3),
            "release_p95_ms": round(rp, 3),
            "tries_per_acquire": round(self.tries / len(self.acquire), 2),
            "holds_per_s": round(len(self.acquire) / self.wall_s, 1),
        }
        gaps = self.gaps()
        if gaps:
            gm, gp = summary(gaps)
            out |= {
                "handoff_median_ms": round(gm, 3),
                "handoff_p95_ms": round(gp, 3),
                "retaken": round(self.retakes(), 2),
            }
        return out

    def gaps(self) -> list[float]:
        """One key's handoffs to a waiter: a holder starts to let go → the next holder, another
        one that was already asking, is in (ms). What the wait adds after the key is free."""
        spans = sorted(self.spans)
        return [
            (nxt[0] - cur[1]) * 1000
            for cur, nxt in itertools.pairwise(spans)
            if nxt[4] <= cur[1] and nxt[3] != cur[3]
        ]

    def retakes(self) -> float:
        """The share of one key's turns that went to the holder that had it just before."""
        spans = sorted(self.spans)
        same = sum(1 for cur, nxt in itertools.pairwise(spans) if nxt[3] == cur[3])
        return same / max(1, len(spans) - 1)


def _holder(
    db: Database,
    case: Case,
    keys: Sequence[str],
    rounds: int,
    hold_s: float,
    think_s: float,
    backoff: tuple[float, float],
    start: threading.Barrier,
    mutex: threading.Lock,
) -> None:
    locks = Counted(db, backoff_s=backoff)
    ident = threading.get_ident()

    async def run() -> None:
        start.wait()
        for _ in range(rounds):
            if think_s:  # a pause before asking again: arrivals spread out
                await asyncio.sleep(random.uniform(0, 2 * think_s))
            t0 = time.perf_counter()
            async with locks.hold(keys, wait_s=600):
                t1 = time.perf_counter()
                if hold_s:
                    await asyncio.sleep(hold_s)
                t2 = time.perf_counter()
            t3 = time.perf_counter()
            with mutex:
                case.acquire.append((t1 - t0) * 1000)
                case.release.append((t3 - t2) * 1000)
                case.spans.append((t1, t2, t3, ident, t0))

    asyncio.run(run())
    with mutex:
        case.tries += locks.tries


def run_case(
    db: Database,
    name: str,
    keysets: Sequence[Sequence[str]],
    *,
    rounds: int,
    hold_s: float,
    think_s: float = 0.0,
    backoff: tuple[float, float] = DEFAULT_BACKOFF,
) -> Case:
    """Each key set in ``keysets`` is one holder thread taking it ``rounds`` times."""
    case = Case(name)
    start = threading.Barrier(len(keysets) + 1)
    mutex = threading.Lock()
    threads = [
        threading.Thread(
            target=_holder, args=(db, case, ks, rounds, hold_s, think_s, backoff, start, mutex)
        )
        for ks in keysets
    ]
    return _timed(case, threads, start)


def _timed(case: Case, threads: list[threading.Thread], start: threading.Barrier) -> Case:
    """Run the holders from the barrier on; the case's wall time is theirs."""
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    case.wall_s = time.perf_counter() - t0
    return case


def cases(db: Database, rounds: int, hold_s: float) -> list[Case]:
    def per(n: int) -> int:  # about ``rounds`` holds per case, at least 10 per holder
        return max(10, rounds // n)

    out = [
        run_case(db, "uncontended, 1 key", [["k:solo"]], rounds=rounds * 2, hold_s=0),
        run_case(db, "uncontended, the meeting's 4 keys", [MEETING], rounds=rounds * 2, hold_s=0),
    ]
    for n in (2, 8, 32):
        out.append(
            run_case(db, f"one key, {n} holders", [["k:hot"]] * n, rounds=per(n), hold_s=hold_s)
        )
    for n in (8, 32):  # each pauses ~ 2n holds between turns: the key busy about half the time
        out.append(
            run_case(
                db,
                f"one key, {n} holders, paused turns",
                [["k:paused"]] * n,
                rounds=per(n),
                hold_s=hold_s,
                think_s=2 * hold_s * n,
            )
        )
    for n in (8, 32):
        keysets = [[f"k:own-{i}"] for i in range(n)]
        out.append(
            run_case(db, f"disjoint keys, {n} holders", keysets, rounds=per(n), hold_s=hold_s)
        )
    out.append(
        run_case(
            db, "meeting 4 keys vs 4 keys, 1 shared", [MEETING, OTHER], rounds=per(2), hold_s=hold_s
        )
    )
    out.append(
        run_case(
            db,
            "meeting 4 keys vs 4 one-key holders on its keys",
            [MEETING] + [[k] for k in MEETING],
            rounds=per(5),
            hold_s=hold_s,
        )
    )
    for n in (1, 8):
        out.append(
            run_case(
                db,
                f"take+release, one key, {n} holder(s), no hold",
                [["k:ops"]] * n,
                rounds=rounds * 2 // n,
                hold_s=0,
            )
        )
    return out


def poll_cases(db: Database, rounds: int, gate_s: float) -> list[Case]:
    """A gate-long hold (``gate_s``: the re-check and the writes), 2 and 4 holders pausing
    between turns, under each poll schedule, and under PostgreSQL's own queue (a blocking
    ``pg_advisory_lock`` in a thread: the server wakes the next waiter, no polling)."""
    out = []
    for n in (2, 4):
        per = max(10, rounds // (5 * n))
        think = gate_s  # a pause of about one hold between turns: most turns wait
        for backoff in ((0.001, 0.005), DEFAULT_BACKOFF, (0.005, 0.2)):
            ms = f"{backoff[0] * 1000:g}..{backoff[1] * 1000:g} ms"
            out.append(
                run_case(
                    db,
                    f"gate-long hold, {n} holders, poll {ms}",
                    [["k:gate"]] * n,
                    rounds=per,
                    hold_s=gate_s,
                    think_s=think,
                    backoff=backoff,
                )
            )
        out.append(
            blocking_case(db, f"gate-long hold, {n} holders, blocking lock", n, per, gate_s, think)
        )
    return out


def blocking_case(
    db: Database, name: str, n: int, rounds: int, hold_s: float, think_s: float
) -> Case:
    """The baseline: each holder waits in ``pg_advisory_lock`` (a thread blocked on the server)."""
    case = Case(name)
    start = threading.Barrier(n + 1)
    mutex = threading.Lock()
    key = {"k": "k:blocking", "seed": LOCK_SEED}

    def holder() -> None:
        ident = threading.get_ident()
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            start.wait()
            for _ in range(rounds):
                time.sleep(random.uniform(0, 2 * think_s))
                t0 = time.perf_counter()
                conn.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, :seed))"), key)
                t1 = time.perf_counter()
                time.sleep(hold_s)
                t2 = time.perf_counter()
                conn.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, :seed))"), key)
                t3 = time.perf_counter()
                with mutex:
                    case.acquire.append((t1 - t0) * 1000)
                    case.release.append((t3 - t2) * 1000)
                    case.spans.append((t1, t2, t3, ident, t0))
                    case.tries += 1

    return _timed(case, [threading.Thread(target=holder) for _ in range(n)], start)


COLUMNS = [
    ("case", "case"),
    ("holds", "holds"),
    ("acquire_median_ms", "acquire median ms"),
    ("acquire_p95_ms", "acquire p95 ms"),
    ("acquire_max_ms", "acquire max ms"),
    ("release_median_ms", "release median ms"),
    ("release_p95_ms", "release p95 ms"),
    ("handoff_median_ms", "handoff median ms"),
    ("handoff_p95_ms", "handoff p95 ms"),
    ("retaken", "retaken by its holder"),
    ("tries_per_acquire", "tries/acquire"),
    ("holds_per_s", "holds/s"),
]

ONE_KEY_ONLY = {"handoff_median_ms", "handoff_p95_ms", "retaken"}


def table(rows: list[dict[str, float | str | int]], one_key: Callable[[str], bool]) -> str:
    lines = [
        "| " + " | ".join(h for _, h in COLUMNS) + " |",
        "| --- | " + " | ".join("---:" for _ in COLUMNS[1:]) + " |",
    ]
    for r in rows:
        cells = [
            str(r.get(k, "")) if (k not in ONE_KEY_ONLY or one_key(str(r["case"]))) else ""
            for k, _ in COLUMNS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--hold-ms", type=float, default=10.0)
    ap.add_argument("--gate-ms", type=float, default=150.0, help="a gate's hold (poll cases)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", default="main,poll", help="main, poll or both (comma separated)")
    a = ap.parse_args()
    before = "/".join(f"{x:.2f}" for x in os.getloadavg())
    pg = contextlib.ExitStack()  # stops the throw-away server at the end
    db = Database.from_url(pg.enter_context(embedded_server(Path(tempfile.mkdtemp()) / "pg")))
    hold_s = a.hold_ms / 1000
    with pg:
        run_case(db, "warm-up", [["k:warm"]] * 4, rounds=50, hold_s=0)
        main_rows = [c.row() for c in cases(db, a.rounds, hold_s)] if "main" in a.only else []
        poll_rows = (
            [c.row() for c in poll_cases(db, a.rounds, a.gate_ms / 1000)]
            if "poll" in a.only
            else []
        )
        db.engine.dispose()
    load = f"{before} before, {'/'.join(f'{x:.2f}' for x in os.getloadavg())} after"
    print(f"{machine()}; load average (1/5/15 min) {load}")
    print(
        f"hold per turn: {a.hold_ms:g} ms (poll cases: {a.gate_ms:g} ms); backoff {DEFAULT_BACKOFF}\n"
    )

    def one_key(name: str) -> bool:
        return name.startswith(("one key", "take+release", "gate-long"))

    print(table(main_rows, one_key))
    print()
    print(table(poll_rows, one_key))
    if a.json:
        a.json.write_text(
            json.dumps(
                {"machine": machine(), "load": load, "cases": main_rows, "poll": poll_rows},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
