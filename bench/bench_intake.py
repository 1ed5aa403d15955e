"""Benchmark: Intake alone per message (chat text → intent + entities + needs), no I/O.

Run: ``.venv/bin/python bench/bench_intake.py [--n 2000]``. Aim (issue 13): p95 ≤ 5 ms.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.intake import Contact, Intake
from countersign.kernel import source_registry_dir
from countersign.registry import load_registry

TEXTS = [
    "schedule a 30 minute meeting with alice@example.com and bob@example.com tomorrow afternoon called Sync",
    "schedule a meeting with Alice and Bob next week for half an hour about budget",
    "buy 2 usb-c cables under 15 euros",
    "watch the lisbon consulate for a visa slot in march",
    "what's the weather like",
]
CONTACTS = [Contact("Alice Martin", "alice@example.com"), Contact("Bob Chen", "bob@example.com")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    n = ap.parse_args().n
    t0 = time.perf_counter()
    intake = Intake(load_registry(source_registry_dir()))
    build_ms = (time.perf_counter() - t0) * 1000
    now = datetime(2026, 11, 24, 10, 15, tzinfo=UTC)
    samples = []
    for i in range(n):
        text = TEXTS[i % len(TEXTS)]
        t = time.perf_counter()
        intake.understand(text, received_at=now, contacts=CONTACTS)
        samples.append((time.perf_counter() - t) * 1000)
    p50, p95 = summary(samples)
    print(f"# bench_intake — {machine()}; n={n}")
    print(f"index build (registry → BM25): {build_ms:.1f} ms")
    print(f"understand one message: p50 {p50:.3f} ms, p95 {p95:.3f} ms (aim p95 ≤ 5 ms)")


if __name__ == "__main__":
    main()
