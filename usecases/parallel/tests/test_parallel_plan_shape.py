"""The parallel golden plan keeps the shape its SPEC describes."""

from __future__ import annotations

import json
from pathlib import Path

from countersign.kernel import Plan, parse_contract

HERE = Path(__file__).resolve().parents[1]


def test_golden_plans_parse_and_gate_every_write() -> None:
    for golden in sorted((HERE / "plans").glob("*.plan.json")):
        plan = parse_contract(Plan, json.loads(golden.read_text())["plan"])
        gates = [s.step for s in plan.graph if s.gate_id]
        assert gates, golden
        first_gate = min(gates)
        for s in plan.graph:
            if s.role in {"Booker", "Notifier"}:
                assert s.step > first_gate and not s.dry_run, (golden, s.step)
