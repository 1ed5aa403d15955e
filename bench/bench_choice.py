"""Benchmark: binding a gate's choice to what the preview offered (StepRunner SPEC, "The choice at
a gate"; GLOBAL_SPEC §8).

- pure: ``gate_offer`` + ``check_choice`` for the meeting's slot (range) and the shop's item
  (option), and ``offered_choices`` (what the card shows);
- the approve call on the embedded PostgreSQL (``Gates.issue_token``: verify, registry and
  TTL, budget, token + audit row) with the choice checks (the gate in view, the outputs seen,
  the check) and with them switched off, interleaved so both see the same machine. The aim: the
  checks add at most 5 ms to the approve's p95.

Run: ``.venv/bin/python bench/bench_choice.py [--n 300]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.api import build_services
from countersign.api.services import Gates
from countersign.kernel import Intent, Plan, Policy, content_hash, source_registry_dir, system_clock
from countersign.planner import make_plan
from countersign.registry import Registry, load_registry
from countersign.signer import KeyRing, sign_plan, verify_signed_plan
from countersign.steps import StoreRecorder, check_choice, gate_offer, offered_choices
from countersign.storage import Database, embedded_server

USER = "alice@example.com"


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _meeting(registry: Registry, ring: KeyRing) -> tuple[dict[str, Any], dict[int, Any]]:
    now = datetime.now(UTC).replace(microsecond=0)
    day = now.replace(hour=0, minute=0, second=0) + timedelta(days=1)
    start, end = day + timedelta(hours=13), day + timedelta(hours=18)
    intent = Intent.model_validate(
        {
            "intent": "schedule_meeting",
            "intent_id": "01JDQ3Z0000000000000000B01",
            "received_at": now.isoformat(),
            "user_id": USER,
            "entities": {
                "participants": [USER, "bob@example.com"],
                "duration_min": 30,
                "title": "Bench",
                "window_start": start.isoformat(),
                "window_end": end.isoformat(),
            },
        }
    )
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    pid, key = ring.active()
    doc = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()
    busy = [[z(start + timedelta(hours=1)), z(start + timedelta(hours=2))]]
    outputs = {
        1: {"busy": busy},
        2: {"busy": []},
        3: {
            "slots": [
                {"start": z(start), "end": z(start + timedelta(hours=1))},
                {"start": z(start + timedelta(hours=2)), "end": z(end)},
            ]
        },
    }
    return doc, outputs


def z(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def pure(n: int, registry: Registry, ring: KeyRing) -> dict[str, tuple[float, float]]:
    doc, outputs = _meeting(registry, ring)
    plan = verify_signed_plan(doc, keys=ring).plan
    now = datetime.now(UTC)
    slot = offered_choices(gate_offer(plan, registry, "gate-A", outputs), now=now)[3]["value"]
    times: dict[str, list[float]] = {"offer + check (slot)": [], "offered_choices (card)": []}
    for _ in range(n):
        t0 = time.perf_counter()
        check_choice(gate_offer(plan, registry, "gate-A", outputs), slot, now=now)
        times["offer + check (slot)"].append(_ms(t0))
        t0 = time.perf_counter()
        offered_choices(gate_offer(plan, registry, "gate-A", outputs), now=now)
        times["offered_choices (card)"].append(_ms(t0))
    return {k: summary(v) for k, v in times.items()}


def on_db(n: int, registry: Registry, ring: KeyRing) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as home, embedded_server(Path(home) / "pg") as url:
        db = Database.from_url(url)
        kw: dict[str, Any] = {
            "db": db,
            "registry": registry,
            "keyring": ring,
            "policy": Policy(),
            "connector_settings": {},
            "clock": system_clock,
        }
        services = build_services(**kw)
        service = services.gates
        plain = _Unchecked(**{f.name: getattr(service, f.name) for f in fields(service)})
        doc, outputs = _meeting(registry, ring)
        verified = verify_signed_plan(doc, keys=ring)
        prints = {k: content_hash(v) for k, v in outputs.items()}
        StoreRecorder(db, clock=system_clock).preview_done(
            verified, prints, actor=USER, latency_ms=1, status="ok", reason=None, outputs=outputs
        )
        plan_id = verified.plan.plan_id
        slot = services.views.gate_choices(verified.plan)["gate-A"]["options"][2]["value"]
        runs: dict[str, Callable[..., Any]] = {
            "approve with the checks": service.issue_token,
            "approve without them": plain.issue_token,
        }
        times: dict[str, list[float]] = {k: [] for k in runs}
        for i in range(n):
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for name in order:
                t0 = time.perf_counter()
                runs[name](plan_id, "gate-A", USER, choice=slot)
                times[name].append(_ms(t0))
        db.dispose()
    return {k: summary(v) for k, v in times.items()}


class _Unchecked(Gates):
    """The same service with the gate-in-view and choice checks switched off (today's approve)."""

    def _in_view(self, plan: Plan, gate_id: str, user_id: str, row: Any) -> None:
        return None

    def _offered(self, plan: Plan, gate_id: str, user_id: str, choice: Any, row: Any) -> Any:
        return choice


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    n = ap.parse_args().n
    registry = load_registry(source_registry_dir())
    ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=datetime.now(UTC))
    print(machine(), f"n={n}", f"load {os.getloadavg()[0]:.1f}")
    for name, (p50, p95) in {**pure(n, registry, ring), **on_db(n, registry, ring)}.items():
        print(f"{name:40s} median {p50:7.3f} ms   p95 {p95:7.3f} ms")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
