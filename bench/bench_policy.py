"""Benchmark: the policy's gate rules per plan (issue 26, Measure: aim ≤ 100 µs per plan for 20
rules), in process, no I/O.

A policy of 20 rules: the 6 default ones and 14 more — tests on constants (numbers, globs, lists),
on references, and set tests over the person's facts (``not_in_set: [contacts, self]`` on the
recipients, ``not_in_set: self`` on the calendar, a list-valued ``attendees``). Plans: the meeting
(Alice and Bob: 4 writes), the shopping plan with a notice (3 writes, two gates), the visa watcher
with a notice (2 writes), and a meeting of 10 people (20 writes).

Two parts, timed separately, each per plan, many repetitions (median and p95):

* the Planner's evaluation: ``plan_facts`` (the facts from the plan's inputs) and ``_with_reasons``
  (every write against every rule, the gates' ``because``) — the part of ``make_plan`` the rules
  add; ``make_plan`` whole with these rules and with none, for scale;
* the executor's re-check: for each gate, ``write_facts`` and ``check_policy`` over its writes
  (each write's references resolved, then every rule, and the gate's named rules compared) — what
  the interactive executor and, per write, the durable ``write_step`` run before sending; the
  facts source is an in-memory function (the live store's one read is not in it).

Run: ``.venv/bin/python bench/bench_policy.py [--reps 3000]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.execute.policy import check_policy, write_facts
from countersign.kernel import DEFAULT_RULES, Evidence, GateRule, Plan, Policy
from countersign.kernel.rules import RuleFacts, person_facts
from countersign.kernel.settings import source_registry_dir
from countersign.planner import make_plan
from countersign.planner.core import _with_reasons
from countersign.planner.facts import contact_evidence, plan_facts
from countersign.planner.testing import make_intent
from countersign.registry import Registry, load_registry

ME = "alice@example.com"
PEOPLE = [ME, *(f"p{i}@example.com" for i in range(1, 10))]
CONTACTS = ["bob@example.com", *PEOPLE[1:6], *(f"c{i}@example.org" for i in range(200))]


def _r(rid: str, op: str, then: str = "gate", **where: Any) -> GateRule:
    return GateRule.model_validate(
        {"id": rid, "op": op, "then": then, "because": rid, "where": where}
    )


EXTRA = (
    _r("mail-outside", "*.send", to={"not_in_set": ["contacts", "self"]}),
    _r("others-calendar", "*.create_event", user={"not_in_set": "self"}),
    _r("guests-outside", "*.create_event", attendees={"not_in_set": ["contacts", "self"]}),
    _r("no-mail-outside", "*.send", "deny", to={"not_in_set": "contacts"}, subject={"eq": "x"}),
    _r("over-20", "*.purchase", max_total={"gt": 20}),
    _r("over-500", "*.purchase", "deny", max_total={"gt": 500}),
    _r("many", "*.add_to_cart", quantity={"ge": 10}),
    _r("own-cart", "*.add_to_cart", customer={"in_set": "self"}),
    _r("lisbon", "visa.*", consulate={"in": ["lisbon", "porto", "madrid"]}),
    _r("not-home", "visa.*", consulate={"not_in": ["berlin"]}),
    _r("night", "*.create_event", "deny", start={"matches": "*T2[2-3]:*"}),
    _r("weekend-title", "*.create_event", title={"not_matches": "*sync*"}),
    _r("to-domain", "*.send", to={"matches": "*@example.com"}),
    _r("slot-early", "*.book_slot", slot={"matches": "*T08:*"}),
)
POLICY = Policy(rules=(*DEFAULT_RULES, *EXTRA))


def _plans(registry: Registry) -> dict[str, tuple[Plan, list[Evidence], dict[str, Any]]]:
    """name → (plan, its evidence, the choices at its gates)."""
    cases: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
        "meeting (4 writes)": (
            "schedule_meeting",
            {},
            {"gate-A": {"start": "2026-11-23T14:00:00Z", "end": "2026-11-23T14:30:00Z"}},
        ),
        "shopping + notice (3 writes, 2 gates)": (
            "purchase_item",
            {"notify_to": ME},
            {"gate-A": {"item": {"sku": "c-1", "price": "9.00"}}, "gate-B": True},
        ),
        "visa + notice (2 writes)": (
            "watch_visa_slots",
            {"notify_to": ME},
            {"gate-A": {"slot": "2027-03-02T09:00:00Z"}},
        ),
        "meeting of 10 (20 writes)": (
            "schedule_meeting",
            {"participants": PEOPLE},
            {"gate-A": {"start": "2026-11-23T14:00:00Z", "end": "2026-11-23T14:30:00Z"}},
        ),
    }
    out = {}
    for name, (intent_name, entities, choices) in cases.items():
        base = make_intent(intent_name)
        intent = make_intent(intent_name, user_id=ME, entities={**base.entities, **entities})
        evidence = contact_evidence(CONTACTS[:6])
        plan = make_plan(intent, evidence, registry, POLICY)
        if not isinstance(plan, Plan):
            raise SystemExit(f"{name}: no plan ({plan})")
        out[name] = (plan, evidence, choices)
    return out


def _time(fn: Callable[[], object], reps: int) -> list[float]:
    """Wall µs per call, one sample per call (GC off while timing)."""
    return _timed(fn, reps)[0]


def _timed(fn: Callable[[], object], reps: int) -> tuple[list[float], list[float]]:
    """Wall and this thread's CPU µs per call, one sample each per call (GC off): on a shared
    machine the wall p95 holds the waits for a CPU, the CPU time does not."""
    for _ in range(min(200, reps)):
        fn()
    wall, cpu = [], []
    gc.disable()
    try:
        for _ in range(reps):
            t, c = time.perf_counter_ns(), time.thread_time_ns()
            fn()
            cpu.append((time.thread_time_ns() - c) / 1000)
            wall.append((time.perf_counter_ns() - t) / 1000)
    finally:
        gc.enable()
    return wall, cpu


def _calibration() -> float:
    """ms of CPU for 1M iterations of an empty loop (how fast this machine runs Python now)."""
    c = time.thread_time_ns()
    for _ in range(1_000_000):
        pass
    return (time.thread_time_ns() - c) / 1e6


def _planner(plan: Plan, evidence: list[Evidence], registry: Registry) -> Callable[[], object]:
    bare = [
        s.model_copy(update={"args": {k: v for k, v in s.args.items() if k != "because"}})
        for s in plan.graph
    ]
    writes = {s.step for s in plan.graph if registry.op(s.uses, s.call).safety == "write"}
    return lambda: _with_reasons(bare, writes, POLICY, plan_facts(plan.intent, evidence))


def _executor(plan: Plan, registry: Registry, choices: dict[str, Any]) -> Callable[[], object]:
    live = person_facts(ME, CONTACTS)
    source: Callable[[str], RuleFacts] = lambda _user: live  # noqa: E731
    gates: dict[str, list[int]] = {}
    for s in plan.graph:
        if registry.op(s.uses, s.call).safety == "write":
            gate = next(g for g in reversed(plan.graph[: s.step - 1]) if g.gate_id)
            gates.setdefault(str(gate.gate_id), []).append(s.step)
    outputs: dict[int, Any] = {}

    def refused(why: str, step: int, op: str) -> None:
        raise SystemExit(f"refused: {why}")

    def run() -> None:
        for gate, steps in gates.items():
            facts = write_facts(POLICY, plan.intent.user_id, source)
            check_policy(
                plan, gate, steps, outputs, choices, policy=POLICY, refused=refused, facts=facts
            )

    return run


def _make(
    plan: Plan, evidence: list[Evidence], registry: Registry, policy: Policy
) -> Callable[[], object]:
    return lambda: make_plan(plan.intent, evidence, registry, policy)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3000)
    a = ap.parse_args()
    registry = load_registry(source_registry_dir())
    print(f"machine: {machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"policy: {len(POLICY.rules)} rules; {a.reps} repetitions per line (µs per plan); "
        f"an empty loop of 1M: {_calibration():.0f} ms CPU"
    )
    print(
        "| plan | writes | Planner: facts + rules, wall median / p95 (CPU median) "
        "| executor re-check, wall median / p95 (CPU median) "
        "| make_plan with 20 rules / none, wall median |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    no_rules = Policy(rules=())
    for name, (plan, evidence, choices) in _plans(registry).items():
        n = sum(registry.op(s.uses, s.call).safety == "write" for s in plan.graph)
        pw, pc = _timed(_planner(plan, evidence, registry), a.reps)
        ew, ec = _timed(_executor(plan, registry, choices), a.reps)
        (pm, pp), (em, ep) = summary(pw), summary(ew)
        pcpu, ecpu = summary(pc)[0], summary(ec)[0]
        few = max(200, a.reps // 10)
        full, _ = summary(_time(_make(plan, evidence, registry, POLICY), few))
        bare, _ = summary(_time(_make(plan, evidence, registry, no_rules), few))
        print(
            f"| {name} | {n} | {pm:.1f} / {pp:.1f} ({pcpu:.1f}) "
            f"| {em:.1f} / {ep:.1f} ({ecpu:.1f}) "
            f"| {full:.0f} / {bare:.0f} |"
        )


if __name__ == "__main__":
    main()
