"""The DAG scheduler: independent steps overlap in time, dependencies wait, failures stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

from countersign.kernel import Plan, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.preview import preview_steps
from countersign.registry import Registry
from countersign.steps import StepFailedError, run_dag


@pytest.fixture
def plan(registry: Registry) -> Plan:
    p = make_plan(make_intent("find_meeting_time"), [], registry, Policy())
    assert isinstance(p, Plan)
    return p


def test_independent_steps_run_at_the_same_time(plan: Plan) -> None:
    started: dict[int, float] = {}

    async def one(step: Any, outputs: Mapping[int, Any]) -> Any:
        started[step.step] = time.perf_counter()
        if step.step == 3:
            assert set(outputs) >= {1, 2}
        await asyncio.sleep(0.2)
        return {"n": step.step}

    t0 = time.perf_counter()
    out = asyncio.run(run_dag(plan, [1, 2, 3], one))
    wall = time.perf_counter() - t0
    assert out == {1: {"n": 1}, 2: {"n": 2}, 3: {"n": 3}}
    assert abs(started[1] - started[2]) < 0.05
    assert started[3] - started[1] >= 0.19
    assert wall < 0.55  # 2 levels of 0.2 s, not 3


def test_first_failure_stops_new_starts(plan: Plan) -> None:
    ran: list[int] = []

    async def one(step: Any, outputs: Mapping[int, Any]) -> Any:
        ran.append(step.step)
        if step.step == 1:
            raise StepFailedError(1, "provider said no")
        await asyncio.sleep(0.05)
        return {}

    with pytest.raises(StepFailedError) as info:
        asyncio.run(run_dag(plan, [1, 2, 3], one))
    assert 3 not in ran
    assert info.value.step == 1 and 2 in info.value.outputs


def test_preview_steps_are_reads_only(plan: Plan, registry: Registry) -> None:
    assert preview_steps(plan, registry) == [1, 2, 3]
