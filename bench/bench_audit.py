"""Benchmark: audit rows/s with one logical append per decision, 1 / 8 / 32 concurrent threads,
(a) one row per transaction (``with db.tx(): AuditLog.append``) against (b) the group-commit
writer (``GroupCommitAuditWriter.append``, default 1 ms gathering) and (b0) the same without
gathering, on the embedded PostgreSQL (a fresh one in a temp folder). Rounds interleave the three
so the machine's noise falls on all; the figures are the medians over the rounds, and (b)/(a) is
the comparable figure.

Run: ``.venv/bin/python bench/bench_audit.py [--rows 1200] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from countersign.kernel import system_clock

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.audit import AuditLog, GroupCommitAuditWriter
from countersign.storage import Database, embedded_server

PLANS = [f"01JDQ3Z00000000000000000{i:02d}" for i in range(32)]


def entry(thread: int, i: int) -> dict[str, Any]:
    """One decision, as the step runner writes them (names a plan, so the trigger runs too)."""
    return {
        "kind": "step_finished",
        "status": "ok",
        "actor": "bench",
        "plan_id": PLANS[thread % len(PLANS)],
        "step": i,
        "latency_ms": 3,
    }


def run(
    append: Callable[[dict[str, Any]], int], threads: int, rows: int
) -> tuple[float, list[float]]:
    """``rows`` appends over ``threads`` threads; rows/s and each append's latency (ms)."""
    per = rows // threads
    lat: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        start.wait()
        for i in range(per):
            t0 = time.perf_counter()
            append(entry(t, i))
            lat[t].append((time.perf_counter() - t0) * 1000)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return threads * per / (time.perf_counter() - t0), [x for xs in lat for x in xs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1200, help="rows per measurement")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    pg = contextlib.ExitStack()  # stops the throw-away server at the end
    db = Database.from_url(pg.enter_context(embedded_server(Path(tempfile.mkdtemp()) / "pg")))
    log = AuditLog(clock=system_clock)
    writer = GroupCommitAuditWriter(db, log=log)
    eager = GroupCommitAuditWriter(db, log=log, gather_s=0.0)

    def per_tx(e: dict[str, Any]) -> int:
        with db.tx() as c:
            return log.append(c, e)

    run(per_tx, 4, 200)  # warm the pool and the caches
    run(writer.append, 4, 200)
    results: dict[tuple[str, int], list[float]] = {}
    latencies: dict[tuple[str, int], list[float]] = {}
    batches: dict[tuple[str, int], list[float]] = {}
    modes: list[tuple[str, Callable[[dict[str, Any]], int], GroupCommitAuditWriter | None]] = [
        ("a", per_tx, None),
        ("b", writer.append, writer),
        ("b0", eager.append, eager),
    ]
    for r in range(args.rounds):
        for threads in (1, 8, 32):
            # each round starts with another mode, so no mode always follows the same one
            for name, fn, w in modes[r % 3 :] + modes[: r % 3]:
                nb, nr = (w.batches, w.rows) if w else (0, 0)
                rate, lat = run(fn, threads, args.rows)
                results.setdefault((name, threads), []).append(rate)
                latencies.setdefault((name, threads), []).extend(lat)
                if w is not None:
                    batches.setdefault((name, threads), []).append(
                        (w.rows - nr) / max(1, w.batches - nb)
                    )
    writer.close()
    eager.close()
    with db.tx() as c:
        report = log.verify(c)
    assert report.ok, report

    print(
        f"machine: {machine()}; embedded PostgreSQL 18 over a Unix socket; "
        f"{args.rows} rows per measurement, median of {args.rounds} interleaved rounds\n"
    )
    print(
        "| threads | (a) one row per transaction | (b) group commit | (b)/(a) "
        "| (b0) no gathering | rows per commit (b) / (b0) "
        "| append p50 / p95 ms (a) | (b) | (b0) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for threads in (1, 8, 32):
        a, b, b0 = (statistics.median(results[(k, threads)]) for k in ("a", "b", "b0"))
        la, lb, lb0 = (summary(latencies[(k, threads)]) for k in ("a", "b", "b0"))
        sb, sb0 = (statistics.median(batches[(k, threads)]) for k in ("b", "b0"))
        print(
            f"| {threads} | {a:,.0f} rows/s | {b:,.0f} rows/s | {b / a:.2f}× | {b0:,.0f} rows/s "
            f"| {sb:.1f} / {sb0:.1f} | {la[0]:.2f} / {la[1]:.2f} | {lb[0]:.2f} / {lb[1]:.2f} "
            f"| {lb0[0]:.2f} / {lb0[1]:.2f} |"
        )
    print(f"\nchain verified: {report.rows} rows")
    db.dispose()
    pg.close()


if __name__ == "__main__":
    main()
