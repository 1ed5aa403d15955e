"""Another user's plan is not found exactly like a missing one — in its time too (Api SPEC,
"only your own plans"; issue 22.8).

The plan is looked up by id *and* owner in one statement, so a foreign plan costs what a plan
that never existed costs. Measured over HTTP as an attacker would: Alice asks for Bob's plan (a
previewed meeting: steps with outputs, events) and for an id that was never issued, interleaved
in a shuffled order on one kept-alive connection; the medians of many samples must be within 5 %
of each other. A round whose machine was busy is measured again (at most three rounds), so the
test fails on a real difference, not on one noisy round.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from countersign.api.testing import ALICE, BOB, ApiHarness, harness
from countersign.kernel import format_utc
from countersign.n8n import N8nHandle
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

SAMPLES = 400
ROUNDS = 3
BAND = 0.05
MISSING = "01JZZZZZZZZZZZZZZZZZZZZZZZ"


@pytest.fixture
def api(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
) -> Iterator[ApiHarness]:
    """The API without a rate limit (thousands of requests a minute here)."""
    peers = (n8n, db, registry, keyring, radicale, smtp_server, api_smtp_credential)
    with harness(*peers, rate_limit_per_min=0) as h:
        yield h


def _bobs_plan(api: ApiHarness) -> str:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    entities = {
        "participants": [BOB, ALICE],
        "duration_min": 30,
        "title": "Bob's sync",
        "window_start": format_utc(day + timedelta(hours=13)),
        "window_end": format_utc(day + timedelta(hours=18)),
    }
    with api.client(BOB) as c:
        r = c.post(
            "/v1/intents", json={"intent": {"intent": "schedule_meeting", "entities": entities}}
        )
    assert r.status_code == 201, r.text
    return str(r.json()["plan_id"])


def _round(c: httpx.Client, foreign: str) -> tuple[float, float]:
    times: dict[str, list[float]] = {foreign: [], MISSING: []}
    for _ in range(SAMPLES):
        pair = [foreign, MISSING]
        random.shuffle(pair)
        for plan_id in pair:
            start = time.perf_counter()
            r = c.get(f"/v1/plans/{plan_id}")
            times[plan_id].append(time.perf_counter() - start)
            assert r.status_code == 404 and r.json()["code"] == "plan_not_found"
    return statistics.median(times[foreign]) * 1000, statistics.median(times[MISSING]) * 1000


def test_a_foreign_plan_is_not_found_as_fast_as_a_missing_one(api: ApiHarness) -> None:
    foreign = _bobs_plan(api)
    with api.client(BOB) as c:
        assert c.get(f"/v1/plans/{foreign}").status_code == 200  # it exists, for Bob
    rounds: list[tuple[float, float]] = []
    with api.client(ALICE) as c:
        for _ in range(50):  # warm the connection, the pool and the plan cache
            c.get(f"/v1/plans/{foreign}")
            c.get(f"/v1/plans/{MISSING}")
        for _ in range(ROUNDS):
            foreign_ms, missing_ms = _round(c, foreign)
            rounds.append((foreign_ms, missing_ms))
            if abs(foreign_ms - missing_ms) <= BAND * missing_ms:
                break
    print(
        "404 medians (foreign ms, missing ms) per round:",
        [(round(f, 3), round(m, 3)) for f, m in rounds],
    )
    foreign_ms, missing_ms = rounds[-1]
    assert abs(foreign_ms - missing_ms) <= BAND * missing_ms, rounds
