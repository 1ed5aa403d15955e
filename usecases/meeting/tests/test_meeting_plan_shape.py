"""The meeting golden plans keep the shape their SPEC describes."""

from __future__ import annotations

from pathlib import Path

from countersign.planner.testing import assert_golden_plans_gate_writes


def test_golden_plans_parse_and_gate_every_write() -> None:
    assert_golden_plans_gate_writes(Path(__file__).resolve().parents[1])
