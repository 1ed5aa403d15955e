"""Benchmark: how well and how fast Intake understands people's sentences (issue 24).

Scores Intake on the labelled sets of components/Intake/tests/data (the development set it was
tuned on and the test set written before tuning, never tuned on) with
``countersign.intake.scoring``, and times ``understand`` per message over every sentence of both
sets with the language libraries loaded (after one warm-up pass).

Run: ``.venv/bin/python bench/bench_intake_understanding.py [--rounds 5] [--misses test]``.
Aims (issue 24): intent ≥ 95 %, entities ≥ 90 %, 0 plans from cannot-do or hostile text,
≤ 1 unnecessary question per 10 conversations, p95 ≤ 20 ms per message.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.intake import Intake
from countersign.intake.scoring import ME, contact_book, load_rows, score
from countersign.kernel import source_registry_dir
from countersign.registry import load_registry

DATA = Path(__file__).resolve().parents[1] / "components/Intake/tests/data"


def _timings(intake: Intake, rows: list[dict[str, Any]], rounds: int) -> list[float]:
    book = contact_book(rows)
    samples: list[float] = []
    for r in range(rounds + 1):
        for row in rows:
            at = datetime.fromisoformat(row["received_at"].replace("Z", "+00:00"))
            t = time.perf_counter()
            intake.understand(row["text"], received_at=at, tz=row["tz"], contacts=book, me=ME)
            if r:  # round 0 warms up
                samples.append((time.perf_counter() - t) * 1000)
    return samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--misses", choices=["dev", "test"], default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    intake = Intake(load_registry(source_registry_dir()))
    build_ms = (time.perf_counter() - t0) * 1000
    print(f"# bench_intake_understanding — {machine()}")
    print(f"Intake built (registry index; libraries load on first use): {build_ms:.0f} ms")
    t1 = time.perf_counter()
    sets = {name: load_rows(DATA / f"sentences_{name}.jsonl") for name in ("dev", "test")}
    reports = {}
    for name, rows in sets.items():
        reports[name] = score(intake, rows, contact_book(rows))
    print(f"first pass over both sets (loads the libraries): {time.perf_counter() - t1:.2f} s")
    for name, report in reports.items():
        print(f"## {name} ({len(sets[name])} sentences)")
        print(json.dumps(report.summary(), indent=1, ensure_ascii=False))
    samples = _timings(intake, sets["dev"] + sets["test"], args.rounds)
    p50, p95 = summary(samples)
    print(
        f"understand one message: p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {max(samples):.1f} ms "
        f"(n={len(samples)}; aim p95 ≤ 20 ms)"
    )
    if args.misses:
        for miss in reports[args.misses].misses:
            print(json.dumps(miss, ensure_ascii=False))


if __name__ == "__main__":
    main()
