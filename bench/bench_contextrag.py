"""Benchmark: ContextRAG evidence selection at 10,000 items per user (issue 15 item 2).

Run: ``.venv/bin/python bench/bench_contextrag.py [--n 300] [--users 10] [--items 10000]``.
A generator fills an embedded PostgreSQL with synthetic memory for ``--users`` people, each with
``--items`` facts (T2–T5, a quarter of them expired, T5 under two purposes, one granted) and
``--items`` outcome-history rows, plus 40 preferences and 200 contacts. Rows of the table:

- *store + select*: ``MemoryStore.evidence`` for one Intent (budget 5): the bounded per-tier SQL
  reads and the pure selection — what the API pays per plan;
- *all rows + select*: every one of the person's rows read and ranked (the unbounded design the
  bounded reads replace), in the same run for a ratio;
- *core only*: ``select_evidence`` over 10,000 in-memory items (no database).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import machine, summary
from sqlalchemy import text

from countersign.contextrag import MemoryItem, MemoryStore, history_items, select_evidence
from countersign.kernel import Intent
from countersign.storage import Database, embedded_server

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def generate(db: Database, users: int, items: int) -> None:
    with db.tx() as c:
        for u in range(users):
            p = {"u": f"user{u}@example.com", "n": items, "now": NOW}
            c.execute(
                text(
                    "INSERT INTO memory_facts (fact_id, user_id, tier, type, key, value, subject, "
                    "purpose, confidence, source_ref, ttl_days, created_at) "
                    "SELECT lpad(CAST(:u AS text) || i::text, 26, '0'), CAST(:u AS text), "
                    "(ARRAY['T2','T3','T4','T5'])[1 + i % 4], 'preference', 'k' || (i % 500), "
                    "to_jsonb('value ' || i), NULL, "
                    "CASE WHEN i % 4 = 3 THEN (ARRAY['mail','health'])[1 + i % 2] END, "
                    "(i % 100) / 100.0, 'fact:' || CAST(:u AS text) || i, "
                    "CASE WHEN i % 4 = 0 THEN 1 WHEN i % 2 = 1 THEN 30 END, "
                    "CAST(:now AS timestamptz) - make_interval(mins => i) "
                    "FROM generate_series(1, :n) AS i"
                ),
                p,
            )
            c.execute(
                text(
                    "INSERT INTO history_facts (user_id, plan_id, step, intent, key, value, "
                    "status, created_at) SELECT CAST(:u AS text), lpad(i::text || 'H' || md5(CAST(:u AS text)), 26, 'x'), "
                    "i % 5, (ARRAY['schedule_meeting','purchase_item'])[1 + i % 2], "
                    "'duration_min', to_jsonb(30 + (i % 3) * 15), "
                    "CASE WHEN i % 10 = 0 THEN 'error' ELSE 'created' END, "
                    "CAST(:now AS timestamptz) - make_interval(mins => i) "
                    "FROM generate_series(1, :n) AS i"
                ),
                p,
            )
            for sql in (
                "INSERT INTO profile_prefs (user_id, key, value, updated_at) "
                "SELECT CAST(:u AS text), 'pref_' || i, to_jsonb(i), :now "
                "FROM generate_series(1, 40) i",
                "INSERT INTO contacts (contact_id, user_id, name, email, created_at) "
                "SELECT lpad('C' || i || md5(CAST(:u AS text)), 26, '0'), CAST(:u AS text), "
                "'Person ' || i, 'p' || i || '@example.com', :now FROM generate_series(1, 200) i",
                "INSERT INTO consents (user_id, purpose, granted, granted_at) "
                "VALUES (:u, 'mail', true, :now)",
            ):
                c.execute(text(sql), {"u": p["u"], "now": NOW})
        c.execute(text("ANALYZE"))


def unbounded(db: Database, intent: Intent) -> int:
    """Every row of the person read and ranked (the design the bounded reads replace)."""
    with db.tx() as c:
        granted = set(
            c.execute(
                text("SELECT purpose FROM consents WHERE user_id = :u AND granted"),
                {"u": intent.user_id},
            ).scalars()
        )
        facts = c.execute(
            text("SELECT * FROM memory_facts WHERE user_id = :u"), {"u": intent.user_id}
        ).all()
        hist = c.execute(
            text("SELECT * FROM history_facts WHERE user_id = :u"), {"u": intent.user_id}
        ).mappings()
        items = [
            MemoryItem(
                r.tier,
                r.type,
                r.key,
                r.value,
                r.confidence,
                r.source_ref,
                r.created_at,
                r.ttl_days,
                r.purpose,
            )
            for r in facts
        ]
        items += history_items([dict(h) for h in hist], intent.intent)
    return len(select_evidence(items, budget=5, now=NOW, consents=granted))


def timed(fn: object, n: int) -> tuple[float, float]:
    samples = []
    for i in range(n + 20):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        if i >= 20:
            samples.append((time.perf_counter() - t) * 1000)
    return summary(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--items", type=int, default=10_000)
    a = ap.parse_args()
    with ExitStack() as stack:
        url = stack.enter_context(embedded_server(Path(tempfile.mkdtemp()) / "pg"))
        db = Database.from_url(url)
        started = time.perf_counter()
        generate(db, a.users, a.items)
        gen_s = time.perf_counter() - started
        store = MemoryStore(db, clock=lambda: NOW)
        intent = Intent(
            intent="schedule_meeting",
            intent_id="01JDR8Z9Y0000000000000000B",
            received_at=NOW,
            user_id="user3@example.com",
            entities={"title": "sync"},
            context_budget=5,
        )
        got = store.evidence(intent, relevant={"duration_min", "k7"})
        mem = [
            MemoryItem(
                ("T2", "T3", "T4", "T5")[i % 4],
                "preference",
                f"k{i % 500}",
                f"v{i}",
                (i % 100) / 100,
                f"fact:{i}",
                NOW - timedelta(minutes=i),
                1 if i % 4 == 0 else 30,
                "mail" if i % 4 == 3 else None,
            )
            for i in range(a.items)
        ]
        rows = [
            (
                "store + select (bounded SQL, what the API pays)",
                timed(lambda: store.evidence(intent, relevant={"duration_min"}), a.n),
            ),
            (
                "all rows + select (unbounded)",
                timed(lambda: unbounded(db, intent), max(20, a.n // 10)),
            ),
            (
                f"core only, {a.items:,} in-memory items",
                timed(lambda: select_evidence(mem, budget=5, now=NOW, consents={"mail"}), a.n),
            ),
        ]
        db.dispose()
    print(
        f"machine: {machine()}; embedded PostgreSQL; {a.users} users × {a.items:,} facts + "
        f"{a.items:,} history rows each (generated in {gen_s:.1f} s); n={a.n}; "
        f"{len(got)} evidence items chosen"
    )
    print()
    print("| selection | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    for name, (med, p95) in rows:
        print(f"| {name} | {med:.2f} | {p95:.2f} |")


if __name__ == "__main__":
    main()
