"""Chaos, the shopping use case: n8n SIGKILLed at a random point of one of a purchase plan's two
executes (gate-A's cart add, or gate-B's checkout), started again; the interactive reconciler
settles the plan (or it asks the person, who finishes or undoes), and at the shop nothing is
added or ordered twice, no order holds a dropped item or a changed price, no plan stays
``running`` (``tests/chaos/shopping.py`` lists the invariants).

A bounded run is part of the normal suite (``COUNTERSIGN_CHAOS_RUNS``, default 1 run); a long one
sets it higher and prints runs, kills, violations, endings and the seed of every failing run
(``COUNTERSIGN_CHAOS_SEED`` with ``COUNTERSIGN_CHAOS_WINDOW_MS`` replays one).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from countersign.kernel import Settings
from countersign.n8n.runtime import install, stop
from countersign.registry import Registry
from countersign.sandbox import ShopSandbox
from countersign.signer import KeyRing
from countersign.steps import N8nTransport
from countersign.storage import Database
from tests.chaos.harness import KillableN8n
from tests.chaos.shopping import ShopRun, ShopWorld, execute, shop_run

RUNS = int(os.environ.get("COUNTERSIGN_CHAOS_RUNS", "1"))
SEED = os.environ.get("COUNTERSIGN_CHAOS_SEED")
#: the kill falls in 0..this many ms of the phase's execute (default: 1.2 x a clean one); a
#: failing run replays with its seed and the window printed with it
WINDOW_MS = os.environ.get("COUNTERSIGN_CHAOS_WINDOW_MS")


@pytest.fixture
def world(
    db: Database, registry: Registry, keyring: KeyRing, shop_sandbox: ShopSandbox, tmp_path: Path
) -> Iterator[ShopWorld]:
    """The shop's world on an n8n of the test's own (the session's n8n is never killed)."""
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    data = tmp_path / "n8n"
    n8n = KillableN8n.start(install(cache), data)
    try:
        yield ShopWorld(n8n, db, registry, keyring, shop_sandbox)
    finally:
        stop(data)


async def _calibrate(w: ShopWorld) -> dict[str, float]:
    """A clean plan's two executes (ms) once n8n holds the workflows: kills fall within them."""
    doc = w.signed(0)
    out: dict[str, float] = {}
    async with w.n8n.client() as client:
        choice = await w.preview_and_choose(doc, N8nTransport(client))
    for gate, phase, want in (("gate-A", "A", "waiting"), ("gate-B", "B", "completed")):
        tokens = w.approve(doc, gate, choice if gate == "gate-A" else None)
        t0 = time.perf_counter()
        status = await execute(w, doc, tokens, 30.0)
        out[phase] = (time.perf_counter() - t0) * 1000
        assert status == want, (gate, status)
    return out


def test_shopping_survives_n8n_sigkill(world: ShopWorld) -> None:
    """Each run: n8n SIGKILLed 0..(a clean execute's duration) into gate-A's or gate-B's
    execute, restarted, the plan settled and finished or undone: no invariant broken."""
    asyncio.run(_calibrate(world))  # the first one deploys the op workflows
    clean = asyncio.run(_calibrate(world))
    windows = {p: int(WINDOW_MS or ms * 1.2) for p, ms in clean.items()}
    seeds = [int(SEED)] if SEED else [random.randrange(10**6) for _ in range(RUNS)]
    runs: list[ShopRun] = []
    t0 = time.monotonic()
    for seed in seeds:
        run = asyncio.run(shop_run(world, seed, windows_ms=windows))
        print(run.line())
        runs.append(run)
    bad = [r for r in runs if r.violations]
    print(
        f"\nchaos shopping: {len(runs)} runs in {time.monotonic() - t0:.0f} s, clean executes "
        f"{ {p: round(ms) for p, ms in clean.items()} } ms, kills n8n {world.n8n.kills} "
        f"(by phase {dict(Counter(r.phase for r in runs))}), "
        f"violations {sum(len(r.violations) for r in bad)}, "
        f"settled {dict(Counter(r.settled for r in runs))}, "
        f"endings {dict(Counter(r.final for r in runs))}"
        + (f", failing seeds {[r.seed for r in bad]} (windows {windows} ms)" if bad else "")
    )
    assert not bad, "\n".join(r.line() for r in bad)
