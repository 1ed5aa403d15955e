"""Benchmark: approval token issue + redeem, idempotency claim + complete, audit append rate,
on the embedded PostgreSQL (a fresh one in a temp folder).

Run: ``.venv/bin/python bench/bench_storage.py [--n 500]``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

from countersign.kernel import system_clock

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.storage import Database, IdempotencyLedger, embedded_server

PLAN = "01JDQ3Z0000000000000000001"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    n = ap.parse_args().n
    pg = contextlib.ExitStack()  # stops the throw-away server at the end
    db = Database.from_url(pg.enter_context(embedded_server(Path(tempfile.mkdtemp()) / "pg")))
    approvals = Approvals(db, clock=system_clock)
    ledger = IdempotencyLedger(db, clock=system_clock, audit=AuditLog(clock=system_clock))
    audit = AuditLog(clock=system_clock)

    issue, redeem = [], []
    for i in range(n):
        t0 = time.perf_counter()
        tok = approvals.issue(
            plan_id=PLAN,
            plan_hash=f"{i:064x}",
            gate_id="gate-A",
            user_id="alice",
            scopes=["calendar.write"],
            ttl_s=300,
        ).token
        t1 = time.perf_counter()
        approvals.redeem(
            tok,
            plan_id=PLAN,
            plan_hash=f"{i:064x}",
            gate_id="gate-A",
            user_id="alice",
            required_scopes=["calendar.write"],
        )
        t2 = time.perf_counter()
        issue.append((t1 - t0) * 1000)
        redeem.append((t2 - t1) * 1000)

    claim, full = [], []
    for i in range(n):
        key = f"{PLAN}:5:{i:064x}"
        t0 = time.perf_counter()
        ledger.claim(key, f"{i:064x}", owner="bench")
        t1 = time.perf_counter()
        ledger.mark_sent(key, owner="bench")
        ledger.complete(key, {"status": 201}, owner="bench")
        t2 = time.perf_counter()
        claim.append((t1 - t0) * 1000)
        full.append((t2 - t0) * 1000)

    def append_rate(threads: int, per_thread: int) -> float:
        def work() -> None:
            for _ in range(per_thread):
                with db.tx() as c:
                    audit.append(
                        c,
                        {
                            "kind": "step_finished",
                            "status": "ok",
                            "actor": "bench",
                            "plan_id": PLAN,
                            "step": 1,
                            "latency_ms": 3,
                        },
                    )

        ts = [threading.Thread(target=work) for _ in range(threads)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return threads * per_thread / (time.perf_counter() - t0)

    rate1 = append_rate(1, 2 * n)
    rate4 = append_rate(4, n)

    def batch_rate(rows: int) -> float:
        t0 = time.perf_counter()
        with db.tx() as c:
            for _ in range(rows):
                audit.append(
                    c, {"kind": "step_finished", "status": "ok", "actor": "bench", "plan_id": PLAN}
                )
        return rows / (time.perf_counter() - t0)

    rate_batch = batch_rate(2 * n)

    def many_rate(rows: int, burst: int) -> float:
        t0 = time.perf_counter()
        for _ in range(rows // burst):
            with db.tx() as c:
                audit.append_many(
                    c,
                    [{"kind": "step_finished", "status": "ok", "actor": "bench", "plan_id": PLAN}]
                    * burst,
                )
        return rows / (time.perf_counter() - t0)

    rate_many10 = many_rate(2 * n, 10)
    rate_many100 = many_rate(10 * n, 100)
    with db.tx() as c:
        t0 = time.perf_counter()
        report = audit.verify(c)
        verify_s = time.perf_counter() - t0
    assert report.ok

    print(f"machine: {machine()}; embedded PostgreSQL 18 over a Unix socket; n={n}\n")
    print("| operation | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    for name, xs in [
        ("token issue (insert + audit row)", issue),
        ("token redeem (atomic UPDATE + decision + audit row)", redeem),
        ("idempotency claim", claim),
        ("idempotency claim + mark_sent + complete", full),
    ]:
        med, p95 = summary(xs)
        print(f"| {name} | {med:.2f} | {p95:.2f} |")
    print()
    print("| audit append | rows/s |")
    print("| --- | ---: |")
    print(f"| one transaction per row, 1 writer | {rate1:,.0f} |")
    print(f"| one transaction per row, 4 writers | {rate4:,.0f} |")
    print(f"| many single appends in one transaction | {rate_batch:,.0f} |")
    print(f"| append_many, bursts of 10 (one transaction each) | {rate_many10:,.0f} |")
    print(f"| append_many, bursts of 100 (one transaction each) | {rate_many100:,.0f} |")
    print(f"| verify the whole chain ({report.rows} rows) | {report.rows / verify_s:,.0f} |")
    db.dispose()
    pg.close()


if __name__ == "__main__":
    main()
