"""Benchmark: PlanRetrieval at 100,000 stored plans, and vector top-10 at up to 1,000,000.

Run: ``.venv/bin/python bench/bench_retrieval.py [--plans 100000] [--vectors 100000,250000,500000]
[--queries 200]`` (a fresh embedded PostgreSQL in a temp folder; synthetic data from a seeded
generator; embeddings from the offline default, wordllama, padded to the column's 384 dims).

Part 1 — retrieval end to end (``PlanLibrary.retrieve``: embed the request, full-text and HNSW
candidates, hybrid rank) over 100,000 plans: one user holding half of them (the worst case) and
a user holding 1,000 of them; next to it the in-memory rank-bm25 alternative over the heavy
user's plans. Part 2 — pgvector HNSW top-10 (cosine, ef_search 40) in a bare table at each N,
with the index build time, for the extrapolation to 1,000,000.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary
from pgvector import Vector

from countersign.kernel import RetrievalWeights
from countersign.planlibrary import (
    Bm25Index,
    LibraryEntry,
    PlanLibrary,
    WordLlamaEmbedder,
    fit_dim,
)
from countersign.storage import Database, embedded_server

NOW = datetime(2026, 11, 25, tzinfo=UTC)
FIRST = [
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "mallory",
    "oscar",
    "peggy",
    "trent",
    "victor",
    "wendy",
    "yara",
    "zoe",
    "liam",
    "noah",
    "emma",
    "olivia",
    "ava",
    "mia",
    "lucas",
    "mateo",
    "sofia",
    "leo",
    "nina",
    "omar",
]
CITIES = [
    "lisbon",
    "porto",
    "madrid",
    "barcelona",
    "paris",
    "lyon",
    "berlin",
    "munich",
    "rome",
    "milan",
    "vienna",
    "prague",
    "warsaw",
    "krakow",
    "dublin",
    "cork",
    "oslo",
    "bergen",
    "athens",
    "sofia",
    "budapest",
    "zagreb",
    "riga",
    "tallinn",
    "vilnius",
    "brussels",
]
ITEMS = [
    "laptop",
    "headphones",
    "monitor",
    "keyboard",
    "printer",
    "backpack",
    "sneakers",
    "umbrella",
    "coffee beans",
    "desk lamp",
    "water bottle",
    "phone charger",
    "office chair",
    "notebook",
    "bicycle",
    "tent",
    "blender",
    "kettle",
    "camera",
    "tripod",
    "speaker",
]
TOPICS = [
    "budget review",
    "roadmap",
    "hiring plan",
    "quarterly report",
    "design critique",
    "launch checklist",
    "onboarding",
    "security audit",
    "pricing",
    "customer feedback",
]


def synthetic(rng: random.Random) -> tuple[str, str]:
    """(intent, plan text) in the shape ``plan_text`` writes."""
    kind = rng.randrange(5)
    if kind == 0:
        a, b = rng.sample(FIRST, 2)
        t = rng.choice(TOPICS)
        return "schedule_meeting", (
            f"schedule meeting with {a} and {b} about {t} {a} {b} {t} "
            "calendar freebusy query calendar create event mail send"
        )
    if kind == 1:
        a, b = rng.sample(FIRST, 2)
        return "find_meeting_time", f"find meeting time {a} {b} calendar freebusy query"
    c = rng.choice(CITIES)
    if kind == 2:
        return "book_visa_slot", f"book visa slot consulate {c} visa sandbox search slots book slot"
    if kind == 3:
        return "watch_visa_slots", f"watch visa slots {c} visa sandbox watch slots hold slot"
    i = rng.choice(ITEMS)
    return "purchase_item", f"purchase item {i} shop search items place order"


def requests(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        k = rng.randrange(4)
        if k == 0:
            a, b = rng.sample(FIRST, 2)
            out.append(f"arrange a call with {a} and {b} to discuss {rng.choice(TOPICS)}")
        elif k == 1:
            out.append(f"get me a visa interview at the {rng.choice(CITIES)} consulate")
        elif k == 2:
            out.append(f"alert me once {rng.choice(CITIES)} appointments free up")
        else:
            out.append(f"order a new {rng.choice(ITEMS)}")
    return out


def load_library(
    db: Database, embedder: WordLlamaEmbedder, n: int, heavy: str
) -> list[LibraryEntry]:
    """n plans: half owned by ``heavy``, the rest by users of 1,000 plans each. COPY with the
    indexes dropped, then the indexes rebuilt (as a restore would)."""
    rng = random.Random(15)
    rows = []
    heavy_entries: list[LibraryEntry] = []
    for i in range(n):
        intent, text = synthetic(rng)
        user = heavy if i % 2 == 0 else f"u{(i // 2) // 1000:03d}"
        rows.append(
            (
                f"01J{i:023d}",
                user,
                intent,
                text,
                rng.randint(0, 9),
                rng.randint(0, 3),
                NOW - timedelta(days=rng.randint(0, 365)),
            )
        )
    t0 = time.perf_counter()
    vectors = []
    for start in range(0, n, 2000):
        vectors += embedder.embed([r[3] for r in rows[start : start + 2000]])
    t_embed = time.perf_counter() - t0
    with db.tx() as c:
        c.exec_driver_sql(
            "DROP INDEX IF EXISTS plan_library_tsv, plan_library_embedding, plan_library_user"
        )
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        t0 = time.perf_counter()
        with cur.copy(
            "COPY plan_library (plan_id, user_id, intent, text, embedding, success_count, "
            "failure_count, last_used_at, created_at) FROM STDIN"
        ) as cp:
            for r, v in zip(rows, vectors, strict=True):
                cp.write_row(
                    (
                        *r[:4],
                        Vector(fit_dim(v, 384)),
                        r[4],
                        r[5],
                        r[6],
                        NOW - timedelta(days=400),
                    )
                )
        raw.commit()
        t_copy = time.perf_counter() - t0
        t0 = time.perf_counter()
        cur.execute("SET maintenance_work_mem = '2GB'")
        cur.execute("CREATE INDEX plan_library_tsv ON plan_library USING gin (tsv)")
        cur.execute("CREATE INDEX plan_library_user ON plan_library (user_id, intent)")
        t_btree = time.perf_counter() - t0
        t0 = time.perf_counter()
        cur.execute(
            "CREATE INDEX plan_library_embedding ON plan_library USING hnsw (embedding vector_cosine_ops)"
        )
        t_hnsw = time.perf_counter() - t0
        cur.execute("ANALYZE plan_library")
        raw.commit()
    finally:
        raw.close()
    print(
        f"  loaded {n:,} plans: embed {t_embed:.1f} s, COPY {t_copy:.1f} s, GIN+btree {t_btree:.1f} s, "
        f"HNSW {t_hnsw:.1f} s",
        flush=True,
    )
    for r in rows:
        if r[1] == heavy and len(heavy_entries) < n:
            heavy_entries.append(
                LibraryEntry(
                    plan_id=r[0],
                    user_id=r[1],
                    intent=r[2],
                    text=r[3],
                    success_count=r[4],
                    failure_count=r[5],
                    last_used_at=r[6],
                    created_at=NOW - timedelta(days=400),
                )
            )
    return heavy_entries


def timed(fn: object, items: list[str]) -> list[float]:
    out = []
    for q in items:
        t = time.perf_counter()
        fn(q)  # type: ignore[operator]
        out.append((time.perf_counter() - t) * 1000)
    return out


def part1(db: Database, n: int, nq: int) -> None:
    embedder = WordLlamaEmbedder()
    heavy = "u-heavy"
    heavy_entries = load_library(db, embedder, n, heavy)
    lib = PlanLibrary(db, embedder=embedder, clock=lambda: NOW)
    qs = requests(random.Random(7), nq)
    w = RetrievalWeights()
    for q in qs[:20]:  # warm caches and the model
        lib.retrieve(heavy, q, weights=w)
    rows = []
    for label, user in (
        (f"user with {len(heavy_entries):,} of {n:,}", heavy),
        (f"user with 1,000 of {n:,}", "u007"),
    ):
        for channels in (("bm25", "vector"), ("bm25",), ("vector",)):
            s = timed(lambda q, u=user, ch=channels: lib.retrieve(u, q, weights=w, channels=ch), qs)
            med, p95 = summary(s)
            rows.append((label, "+".join(channels), med, p95))
    emb = timed(lambda q: embedder.embed([q]), qs)
    rows.append(("(embedding the request alone)", "wordllama", *summary(emb)))
    t0 = time.perf_counter()
    index = Bm25Index(heavy_entries)
    build = time.perf_counter() - t0
    s = timed(lambda q: index.search(q, 20), qs[: max(20, nq // 4)])
    rows.append(
        (
            f"rank-bm25 in memory over {len(heavy_entries):,} (index build {build:.1f} s)",
            "bm25",
            *summary(s),
        )
    )
    print(f"\nPlanRetrieval over {n:,} plans, {nq} requests (ms)\n")
    print("| library | channels | p50 | p95 |\n| --- | --- | --- | --- |")
    for label, ch, med, p95 in rows:
        print(f"| {label} | {ch} | {med:.2f} | {p95:.2f} |")


def part2(db: Database, sizes: list[int], nq: int) -> None:
    embedder = WordLlamaEmbedder()
    rng = random.Random(99)
    qvecs = [Vector(fit_dim(v, 384)) for v in embedder.embed(requests(random.Random(5), nq))]
    raw = db.engine.raw_connection()
    cur = raw.cursor()
    cur.execute("CREATE TABLE bench_vectors (id bigint PRIMARY KEY, embedding vector(384))")
    raw.commit()
    have = 0
    print("\nVector top-10 (pgvector HNSW, cosine, m 16, ef_construction 64, ef_search 40)\n")
    print("| N | HNSW build s | p50 ms | p95 ms |\n| --- | --- | --- | --- |", flush=True)
    for n in sizes:
        cur.execute("DROP INDEX IF EXISTS bench_vectors_hnsw")
        raw.commit()
        with cur.copy("COPY bench_vectors (id, embedding) FROM STDIN") as cp:
            for start in range(have, n, 5000):
                texts = [
                    synthetic(rng)[1] + f" {rng.randrange(10**6)}"
                    for _ in range(min(5000, n - start))
                ]
                for j, v in enumerate(embedder.embed(texts)):
                    cp.write_row((start + j, Vector(fit_dim(v, 384))))
        raw.commit()
        have = n
        cur.execute("SET maintenance_work_mem = '4GB'")
        t0 = time.perf_counter()
        cur.execute(
            "CREATE INDEX bench_vectors_hnsw ON bench_vectors USING hnsw (embedding vector_cosine_ops)"
        )
        build = time.perf_counter() - t0
        cur.execute("ANALYZE bench_vectors")
        raw.commit()
        sql = "SELECT id FROM bench_vectors ORDER BY embedding <=> %s::vector LIMIT 10"
        for q in qvecs[:20]:
            cur.execute(sql, (q,))
            cur.fetchall()
        s = []
        for q in qvecs:
            t = time.perf_counter()
            cur.execute(sql, (q,))
            cur.fetchall()
            s.append((time.perf_counter() - t) * 1000)
        med, p95 = summary(s)
        print(f"| {n:,} | {build:.0f} | {med:.2f} | {p95:.2f} |", flush=True)
    raw.close()


@contextlib.contextmanager
def database() -> Iterator[Database]:
    with embedded_server(Path(tempfile.mkdtemp()) / "pg") as url:
        db = Database.from_url(url)
        try:
            yield db
        finally:
            db.dispose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plans", type=int, default=100_000)
    ap.add_argument("--vectors", default="100000,250000,500000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--skip-plans", action="store_true")
    args = ap.parse_args()
    print(machine(), "(2 cores shared with other engineers' test runs)", flush=True)
    with database() as db:
        if not args.skip_plans:
            part1(db, args.plans, args.queries)
        sizes = [int(x) for x in args.vectors.split(",") if x]
        if sizes:
            part2(db, sizes, args.queries)


if __name__ == "__main__":
    main()
