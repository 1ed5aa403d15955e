"""``system.analyze`` in-process gives exactly what n8n's Code node gives (issue 16.1).

Each case runs the same step twice on a real n8n: once as the n8n Code execution
(``in_process=False``) and once through the in-process mirror; the normalized outputs must be
equal (and, for the inputs the mirror covers, it must really have run in-process). Cases: the
use-case plans' analyze steps over the sandbox's data, and seeded generated inputs (offsets,
milliseconds, overlaps, empty calendars, ties in price, quantities, rounding at half a cent).
Inputs outside the mirror (a time without a zone, a price that is not a decimal) must fall back
to n8n and still agree.
"""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from countersign.kernel import Plan, PlanStep, parse_contract
from countersign.n8n import N8nClient, N8nHandle
from countersign.registry import Registry
from countersign.steps import N8nStepRunner, N8nTransport
from countersign.steps.analyze import IN_PROCESS, js_code_sha256, run_in_process

ROOT = Path(__file__).resolve().parents[1] / "usecases"


def _golden(uc: str, case: str) -> tuple[Plan, str]:
    doc = json.loads((ROOT / uc / "plans" / f"{case}.plan.json").read_text())
    return parse_contract(Plan, doc["plan"]), str(doc["plan_hash"])


def _iso(rng: random.Random, base: datetime) -> str:
    t = base + timedelta(minutes=rng.randrange(0, 6 * 60), milliseconds=rng.choice([0, 0, 250]))
    form = rng.choice(["z", "z", "ms", "offset"])
    if form == "offset":
        return (t + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S") + "+01:00"
    if form == "ms":
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _overlap_cases() -> list[tuple[dict[str, Any], dict[int, Any], bool]]:
    """(args overrides, outputs of steps 1 and 2, expected to run in-process)."""
    rng = random.Random(16)
    base = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    cases: list[tuple[dict[str, Any], dict[int, Any], bool]] = [
        ({}, {1: {"status": 207, "busy": []}, 2: {"status": 207, "busy": []}}, True),
        (
            {},
            {
                1: {"busy": [["2026-11-23T13:00:00Z", "2026-11-23T14:00:00Z"]]},
                2: {"busy": [["2026-11-23T13:30:00Z", "2026-11-23T15:00:00Z"]]},
            },
            True,
        ),
    ]
    for _ in range(24):
        outs = {
            n: {
                "status": 207,
                "busy": [
                    sorted([_iso(rng, base), _iso(rng, base)]) for _ in range(rng.randrange(0, 5))
                ],
            }
            for n in (1, 2)
        }
        over: dict[str, Any] = {"duration_min": rng.choice([15, 30, 45, 60, 90, 7.5])}
        if rng.random() < 0.3:
            over["window_start"] = "2026-11-23T12:30:00.500Z"
        cases.append((over, outs, True))
    # outside the mirror: n8n decides, and both paths agree
    cases.append(
        ({}, {1: {"busy": [["2026-11-23T13:00:00", "2026-11-23T14:00:00"]]}, 2: {}}, False)
    )
    cases.append(({"duration_min": "30"}, {1: {"busy": []}, 2: {"busy": []}}, False))
    return cases


def _rank_cases() -> list[tuple[dict[str, Any], dict[int, Any], bool]]:
    rng = random.Random(161)
    prices = ["7.99", "12.50", "3", "0.005", "0.015", "14.995", "7.50", "15.00", "7.995", "2.675"]
    cases: list[tuple[dict[str, Any], dict[int, Any], bool]] = [
        ({}, {1: {"query": "cable", "offers": []}}, True),
        (
            {},
            {
                1: {
                    "query": "usb-c cable 2m",
                    "offers": [
                        {"item": "a", "title": "A", "price": "7.25"},
                        {"item": "b", "title": "B", "price": "5.10"},
                        {"item": "c", "title": "C", "price": "9.99"},
                    ],
                }
            },
            True,
        ),
    ]
    for k in range(20):
        offers = [
            {"item": f"i{j}", "title": f"t{j}", "price": rng.choice(prices)}
            for j in range(rng.randrange(0, 9))
        ]
        over: dict[str, Any] = {
            "quantity": rng.choice([1, 2, 3, 2.0, 0, -1, 1.5, None]),
            "max_price": rng.choice(["15.00", "30", "0", "7.99", "25.005"]),
        }
        if k % 5 == 0 and offers:
            offers[0]["total"] = "999"  # an offer that already has a total keeps its place
        cases.append((over, {1: {"offers": offers}}, True))
    cases.append(({}, {1: {"offers": [{"item": "x", "price": "12abc"}]}}, False))
    cases.append(({}, {1: {"offers": [{"item": "x", "price": 4.2}]}}, True))
    return cases


def _with(step: PlanStep, over: dict[str, Any]) -> PlanStep:
    args = {**step.args, **{k: v for k, v in over.items() if v is not None}}
    for k, v in over.items():
        if v is None:
            args.pop(k, None)
    return step.model_copy(update={"args": args})


async def _compare(
    n8n: N8nHandle,
    registry: Registry,
    plan: Plan,
    plan_hash: str,
    n: int,
    cases: list[tuple[dict[str, Any], dict[int, Any], bool]],
) -> None:
    async with N8nClient(n8n.base_url, n8n.api_key) as client:
        transport = N8nTransport(client)
        common: dict[str, Any] = {
            "plan": plan,
            "plan_hash": plan_hash,
            "registry": registry,
            "transport": transport,
            "settings": {},
            "read_only": True,
        }
        on_n8n = N8nStepRunner(**common, in_process=False)
        here = N8nStepRunner(**common)
        for over, outputs, covered in cases:
            step = _with(plan.step(n), over)
            calls = transport.calls
            want = await on_n8n.run(step, outputs)
            assert transport.calls == calls + 1  # it did run on n8n
            got = await here.run(step, outputs)
            ran_here = transport.calls == calls + 1
            assert got == want, (over, outputs)
            assert ran_here == covered, (over, outputs)


def test_find_overlap_in_process_equals_n8n(n8n: N8nHandle, registry: Registry) -> None:
    plan, h = _golden("meeting", "local")
    asyncio.run(_compare(n8n, registry, plan, h, 3, _overlap_cases()))


def test_rank_offers_in_process_equals_n8n(n8n: N8nHandle, registry: Registry) -> None:
    plan, h = _golden("shopping", "default")
    asyncio.run(_compare(n8n, registry, plan, h, 2, _rank_cases()))


@pytest.mark.parametrize("call", ["find_overlap", "rank_offers"])
def test_a_changed_registry_code_runs_on_n8n(registry: Registry, call: str) -> None:
    """The mirror is bound to the exact JavaScript it was written from."""
    op = registry.op("system.analyze", call)
    assert js_code_sha256(op) == IN_PROCESS[("system.analyze", call)][0]
    spec = op.params["jsCode"]
    edited = op.model_copy(
        update={
            "params": {
                **op.params,
                "jsCode": spec.model_copy(update={"const": f"{spec.const}\n// changed"}),
            }
        }
    )
    args: dict[str, Any] = {
        "inputs": [],
        "duration_min": 30,
        "window_start": "2026-11-23T13:00:00Z",
        "window_end": "2026-11-23T14:00:00Z",
        "max_price": "1.00",
    }
    assert run_in_process(op, "system.analyze", call, args) is not None
    assert run_in_process(edited, "system.analyze", call, args) is None
