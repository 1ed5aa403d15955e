"""Chaos on the whole stack (issue 27 §1): ``countersign up --detach --scale`` (two APIs, two
durable workers, n8n main + two queue workers, the Temporal dev server, PostgreSQL), a use case
driven through the HTTP API, one process SIGKILLed at a random moment — an API (the request dies
with it), a durable worker, n8n's main process or a queue worker, the Temporal dev server,
PostgreSQL — started again as ``up`` started it, the plan let to finish, and the invariants
checked at the providers (``tests/chaos/stack.py``).

A bounded run is part of the normal suite (``COUNTERSIGN_CHAOS_RUNS``, default 1); a long one sets
it higher and prints runs, kills by process, violations, endings and the failing seeds
(``COUNTERSIGN_CHAOS_SEED`` replays one, with ``COUNTERSIGN_CHAOS_WINDOW_MS`` as printed;
``COUNTERSIGN_CHAOS_USECASES`` picks ``meeting``, ``visa`` or both).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from tests.chaos.stack import ChaosStack, StackRun, wait_settled
from tests.chaos.stack_runs import (
    approve_watcher,
    execute_meeting,
    meeting_run,
    plan_meeting,
    start_watcher,
    visa_run,
)

pytestmark = pytest.mark.slow
RUNS = int(os.environ.get("COUNTERSIGN_CHAOS_RUNS", "1"))
SEED = os.environ.get("COUNTERSIGN_CHAOS_SEED")
WINDOW_MS = os.environ.get("COUNTERSIGN_CHAOS_WINDOW_MS")
#: the use cases the runs pick from (a run's seed picks one: seed % their number)
USECASES = os.environ.get("COUNTERSIGN_CHAOS_USECASES", "meeting,visa").split(",")
USER, PARTNER = "chaos-a@example.com", "chaos-b@example.com"
#: the meetings' pairs, one more per 20 runs (each is "tomorrow": one pair's day fills up)
PAIRS = [(USER, PARTNER)] + [
    (f"chaos-{i}a@example.com", f"chaos-{i}b@example.com") for i in range(1, (RUNS - 1) // 20 + 1)
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosStack]:
    with ChaosStack.up(tmp_path_factory.mktemp("chaos-stack") / "home") as s:
        for user, partner in PAIRS:
            s.user(user, partner)
        yield s


def _calibrate(s: ChaosStack) -> int:
    """A clean meeting's execute (ms) once n8n holds the workflows: the kills fall within it."""
    m = plan_meeting(s, 0, USER, PARTNER, f"Calibrate {time.time_ns()}")
    t0 = time.perf_counter()
    said = execute_meeting(s, 0, m).join(120)
    assert said == "202:completed", said
    return int((time.perf_counter() - t0) * 1000)


def _report(runs: list[StackRun], seconds: float, windows: dict[str, int]) -> None:
    bad = [r for r in runs if r.violations]
    print(
        f"\nchaos on the stack: {len(runs)} runs ({dict(Counter(r.usecase for r in runs))}) in {seconds / 60:.1f} min, kills "
        f"{dict(Counter(r.process for r in runs))}, violations "
        f"{sum(len(r.violations) for r in bad)}, endings {dict(Counter(r.final for r in runs))}"
        + (f", failing seeds {[r.seed for r in bad]} (windows {windows} ms)" if bad else "")
    )


def _calibrate_visa(s: ChaosStack) -> int:
    """A clean watcher's approval until its run completed (ms): the kills fall within it."""
    w = start_watcher(s, 0, USER)
    t0 = time.perf_counter()
    said = approve_watcher(s, 0, w).join(60)
    assert said.startswith("200"), said
    state = wait_settled(s, USER, w.plan_id, 120)
    assert state.get("status") == "completed", state.get("status")
    return int((time.perf_counter() - t0) * 1000)


def _one(s: ChaosStack, seed: int, usecase: str, windows: dict[str, int]) -> StackRun:
    """One run; one that could not be driven at all is a run with that as its violation."""
    try:
        if usecase == "visa":
            return visa_run(s, seed, window_ms=windows["visa"], user=USER)
        user, partner = PAIRS[seed // 2 % len(PAIRS)]
        return meeting_run(s, seed, window_ms=windows["meeting"], user=user, partner=partner)
    except (RuntimeError, httpx.HTTPError, ValueError, KeyError) as e:
        run = StackRun(seed, usecase, "?", 0, final="?")
        run.violations.append(f"harness: {type(e).__name__}: {str(e)[:300]}")
        return run


@pytest.mark.timeout(600 + 420 * RUNS)  # `up`, then up to ~7 min a run (a cut plan's settling)
def test_use_cases_survive_a_sigkill_anywhere_in_the_stack(stack: ChaosStack) -> None:
    """Each run (its seed picks the use case, the process and the moment): one process of the
    stack SIGKILLed, started again, the plan let to end: no invariant broken."""
    usecases = [u for u in USECASES if u in ("meeting", "visa")]
    seeds = [int(SEED)] if SEED else [random.randrange(10**6) for _ in range(RUNS)]
    picked = {usecases[seed % len(usecases)] for seed in seeds}
    windows = {}
    if "meeting" in picked:  # a use case no run picks is not calibrated
        _calibrate(stack)  # the first one deploys the op workflows
        windows["meeting"] = int(WINDOW_MS or _calibrate(stack) * 1.2)
    if "visa" in picked:
        windows["visa"] = int(WINDOW_MS or _calibrate_visa(stack) * 1.2)
    runs: list[StackRun] = []
    t0 = time.monotonic()
    for seed in seeds:
        run = _one(stack, seed, usecases[seed % len(usecases)], windows)
        print(run.line(), flush=True)
        runs.append(run)
    _report(runs, time.monotonic() - t0, windows)
    bad = [r for r in runs if r.violations]
    assert not bad, "\n".join(r.line() for r in bad)
