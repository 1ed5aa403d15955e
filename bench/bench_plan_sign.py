"""Benchmark: plan + sign + verify of a 5-step plan, and each part alone (µs per plan).

Run: ``.venv/bin/python bench/bench_plan_sign.py [--n 2000]``. Pinned to one core when possible.
Prints a markdown table (median, p95, n) and the machine.

A process runs Ed25519 once per (public key, message, signature): ``PROVEN`` remembers what it
signed or saw verify (Signer LLD §5). Rows marked *first verify* clear that memory before each
call, as a verifier in another process sees the document.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime

from countersign.kernel import Plan, Policy, canonical_bytes, source_registry_dir
from countersign.kernel.canonical import canonical_bytes_reference
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import load_registry
from countersign.signer import PROVEN, KeyRing, sign_plan, verify_signed_plan


def measure(fn: Callable[[], object], n: int) -> tuple[float, float]:
    for _ in range(min(200, n)):
        fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    n = ap.parse_args().n
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    registry = load_registry(source_registry_dir())
    policy = Policy()
    intent = make_intent("find_meeting_time")
    ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=datetime.now(UTC))
    pid, key = ring.active()
    plan = make_plan(intent, [], registry, policy)
    assert isinstance(plan, Plan) and len(plan.graph) == 5

    def sign_doc(p: Plan) -> dict[str, object]:
        return sign_plan(p, key=key, pubkey_id=pid, signer="planner@system").to_json()

    doc = sign_doc(plan)

    def full() -> None:
        p = make_plan(intent, [], registry, policy)
        assert isinstance(p, Plan)
        verify_signed_plan(sign_doc(p), keys=ring)

    def full_first_verify() -> None:
        p = make_plan(intent, [], registry, policy)
        assert isinstance(p, Plan)
        d = sign_doc(p)
        PROVEN.clear()
        verify_signed_plan(d, keys=ring)

    def verify_first() -> None:
        PROVEN.clear()
        verify_signed_plan(doc, keys=ring)

    rows = [
        ("plan + sign + verify (5-step plan)", full),
        ("plan + sign + first verify (Ed25519 checked, as in another process)", full_first_verify),
        ("plan only", lambda: make_plan(intent, [], registry, policy)),
        ("sign only (to_json + canonicalize + hash + Ed25519)", lambda: sign_doc(plan)),
        (
            "first verify (canonicalize + hash + Ed25519 + parse + normal-form check)",
            verify_first,
        ),
        (
            "verify again in the process (the same, Ed25519 remembered)",
            lambda: verify_signed_plan(doc, keys=ring),
        ),
        ("canonicalize plan JSON (fast path)", lambda: canonical_bytes(doc["plan"])),
        (
            "canonicalize plan JSON (rfc8785 reference)",
            lambda: canonical_bytes_reference(doc["plan"]),
        ),
        ("Ed25519 sign 64 bytes", lambda: key.sign(b"x" * 64)),
        ("Ed25519 verify", lambda: ring.verify_key(pid).verify(key.sign(b"x" * 64))),
    ]
    print(
        f"machine: {os.cpu_count()} cores, {cpu_model()}; python {platform.python_version()}; "
        f"date {datetime.now(UTC):%Y-%m-%d}; pinned to core 0; n={n}\n"
    )
    print("| operation | median µs | p95 µs |")
    print("| --- | ---: | ---: |")
    for name, fn in rows:
        med, p95 = measure(fn, n)
        print(f"| {name} | {med:.0f} | {p95:.0f} |")


if __name__ == "__main__":
    main()
