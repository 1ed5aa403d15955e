"""Benchmark: signed approval receipts (Signer SPEC §5, Approvals SPEC §4).

- receipt sign per decision, pure (``ReceiptKeySigner.sign_receipt``: build + canonical + Ed25519);
- a decision on the embedded PostgreSQL with and without the receipt (``Approvals.issue`` and
  ``reject``; interleaved so both see the same machine);
- offline verify per bundle (``load_bundle`` + ``verify_bundle``, from the file's bytes, the
  process memory of proven signatures cleared each time, as in a fresh ``countersign receipts
  verify``): a purchase plan with its 2 gates decided, and one with 20 receipts.

Run: ``.venv/bin/python bench/bench_receipts.py [--n 300]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.approvals import Approvals
from countersign.kernel import Plan, Policy, content_hash, source_registry_dir, system_clock
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import load_registry
from countersign.signer import (
    PROVEN,
    KeyRing,
    ReceiptKeySigner,
    load_bundle,
    make_bundle,
    sign_plan,
    verify_bundle,
)
from countersign.storage import Database, embedded_server

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _plan(ring: KeyRing) -> dict[str, Any]:
    plan = make_plan(
        make_intent("purchase_item"), [], load_registry(source_registry_dir()), Policy()
    )
    assert isinstance(plan, Plan)
    pid, key = ring.active()
    return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()


def _chain(doc: dict[str, Any], signer: ReceiptKeySigner, n: int) -> list[dict[str, Any]]:
    out, previous = [], None
    for seq in range(1, n + 1):
        gate = "gate-A" if seq % 2 else "gate-B"
        s = signer.sign_receipt(
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id=gate,
            user_id="alice@example.com",
            choice_hash=content_hash({"item": f"cable-{seq}", "quantity": 2}),
            decision="approved",
            decided_at=T0 + timedelta(seconds=seq),
            token_id=f"{seq:012x}",
            previous_receipt_hash=previous,
            seq=seq,
        )
        previous = s.receipt_hash
        out.append(s.to_json())
    return out


def pure(n: int, ring: KeyRing) -> dict[str, tuple[float, float]]:
    signer = ReceiptKeySigner(ring)
    doc = _plan(ring)
    sign = []
    for _ in range(n):
        t0 = time.perf_counter()
        _chain(doc, signer, 1)
        sign.append(_ms(t0))
    out = {"receipt sign (build + canonical + Ed25519), per decision": summary(sign)}
    for receipts in (2, 20):
        data = json.dumps(
            make_bundle(doc, _chain(doc, signer, receipts), signer=signer, exported_at=T0)
        ).encode()
        times = []
        for _ in range(n):
            PROVEN.clear()
            t0 = time.perf_counter()
            verify_bundle(load_bundle(data))
            times.append(_ms(t0))
        out[f"offline verify, bundle of {receipts} receipts ({len(data):,} bytes)"] = summary(times)
    return out


def on_db(n: int, ring: KeyRing) -> dict[str, tuple[float, float]]:
    pg = contextlib.ExitStack()  # stops the throw-away server at the end
    with pg:
        db = Database.from_url(pg.enter_context(embedded_server(Path(tempfile.mkdtemp()) / "pg")))
        plain = Approvals(db, clock=system_clock)
        signed = Approvals(db, clock=system_clock, receipts=ReceiptKeySigner(ring))
        times: dict[str, list[float]] = {k: [] for k in ("issue", "issue+r", "reject", "reject+r")}
        for i in range(n):
            for name, a in (("issue", plain), ("issue+r", signed)):
                t0 = time.perf_counter()
                a.issue(
                    plan_id=f"01JDQ3Z{i:019d}",
                    plan_hash="a" * 64,
                    gate_id="gate-A" if name == "issue" else "gate-B",
                    user_id="alice",
                    scopes=["shop.write"],
                    ttl_s=300,
                    choice={"item": "cable-a", "quantity": 2},
                )
                times[name].append(_ms(t0))
            for name, a in (("reject", plain), ("reject+r", signed)):
                t0 = time.perf_counter()
                a.reject(
                    plan_id=f"01JDQ3Z{i:019d}",
                    plan_hash="a" * 64,
                    gate_id="gate-C" if name == "reject" else "gate-D",
                    user_id="alice",
                )
                times[name].append(_ms(t0))
        db.dispose()
    return {
        "approve (issue) without receipt": summary(times["issue"]),
        "approve (issue) with signed receipt + receipt_signed audit row": summary(times["issue+r"]),
        "reject without receipt": summary(times["reject"]),
        "reject with signed receipt + receipt_signed audit row": summary(times["reject+r"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    n = ap.parse_args().n
    ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=T0)
    rows = {**pure(n, ring), **on_db(n, ring)}
    print(
        f"machine: {machine()}; embedded PostgreSQL over a Unix socket; n={n}; "
        f"load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| operation | median ms | p95 ms |\n| --- | ---: | ---: |")
    for name, (med, p95) in rows.items():
        print(f"| {name} | {med:.3f} | {p95:.3f} |")


if __name__ == "__main__":
    main()
