"""The interactive gate path's Postgres traffic (issue 28 §2): from an approval to the first write's
webhook call, an execute of the meeting's find-a-time plan opens at most ``MAX_CHECKOUTS``
connections and sends at most ``MAX_STATEMENTS`` statements (counted with SQLAlchemy events on the
executor's engine, on real n8n, Radicale and Postgres), so a change that adds a transaction to
the path fails here with the list of what ran.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from countersign.approvals import Approvals
from countersign.execute import Executor
from countersign.kernel import Intent, Policy, system_clock
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import Radicale
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ORG, ALICE, BOB = "trips-org@example.com", "trips-alice@example.com", "trips-bob@example.com"

#: connections taken from the pool (each one a pre-ping) between the approval and the first
#: write's webhook call (issue 28 §2: it was 11): the plan stored and read with the token's
#: choice (1), the token redeemed with its audit row (1), the resource lock — on whose connection
#: the ledger is asked whether the write was claimed before and the gate passes: its step done
#: and the plan executing in one statement (1), the claim with its audit row and the step
#: running (1), the key marked sent (1)
MAX_CHECKOUTS = 5
#: statements sent on them (it was 16; BEGIN and COMMIT not counted: psycopg sends them apart)
MAX_STATEMENTS = 14


class Traffic:
    """Checkouts and statements on one engine while ``on``, each with where it came from."""

    def __init__(self, db: Database) -> None:
        self.on = False
        self.checkouts: list[str] = []
        self.statements: list[str] = []
        event.listen(db.engine, "checkout", self._checkout)
        event.listen(db.engine, "before_cursor_execute", self._statement)

    @staticmethod
    def _where() -> str:
        frames = [
            f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}"
            for f in traceback.extract_stack()
            if "/countersign/" in f.filename
        ]
        return " < ".join(reversed(frames[-3:]))

    def _checkout(self, *_: Any) -> None:
        if self.on:
            self.checkouts.append(self._where())

    def _statement(self, _c: Any, _cur: Any, sql: str, *_: Any) -> None:
        if self.on:
            self.statements.append(" ".join(sql.split())[:70] + " @ " + self._where())


class StopAtFirstWrite(N8nTransport):
    """Stops counting when the first write's webhook is called."""

    traffic: Traffic

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        if write:
            self.traffic.on = False
        return await super().call(path, body, write=write)


def _signed(registry: Registry, keyring: KeyRing) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    intent = Intent.model_validate(
        {
            "intent": "find_meeting_time",
            "intent_id": "01JDQ3Z0000000000000T00001",
            "received_at": now,
            "user_id": ORG,
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": "round trips",
                "window_start": "2037-12-23T13:00:00Z",
                "window_end": "2037-12-23T18:00:00Z",
            },
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


@pytest.fixture
def calendars(radicale: Radicale) -> Radicale:
    for user in (ORG, ALICE, BOB):
        radicale.make_calendar(user)
        for name in radicale.events(user):
            httpx.delete(radicale.calendar_url(user) + name, timeout=5)
    return radicale


def test_the_gate_path_stays_within_its_round_trips(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, calendars: Radicale
) -> None:
    settings = {"caldav_base_url": calendars.base_url, "smtp_from": "cs@example.com"}
    doc = _signed(registry, keyring)
    traffic = Traffic(db)

    async def go() -> str:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            transport = StopAtFirstWrite(client)
            transport.traffic = traffic
            pv = await run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=transport,
                recorder=StoreRecorder(db, clock=system_clock),
                settings=settings,
                actor=ORG,
                now=system_clock(),
            )
            start = datetime.fromisoformat(pv.outputs[3]["slots"][0]["start"])
            end = (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
            token = (
                Approvals(db, clock=system_clock)
                .issue(
                    plan_id=doc["plan"]["plan_id"],
                    plan_hash=doc["plan_hash"],
                    gate_id="gate-A",
                    user_id=ORG,
                    scopes=["calendar.write"],
                    ttl_s=300,
                    choice={"start": pv.outputs[3]["slots"][0]["start"], "end": end},
                )
                .token
            )
            executor = Executor(
                keys=keyring,
                registry=registry,
                transport=transport,
                db=db,
                settings=settings,
                policy=LOCAL,
            )
            traffic.on = True
            report = await executor.execute(doc, user_id=ORG, tokens={"gate-A": token})
            return report.status

    assert asyncio.run(go()) == "completed"
    assert len(calendars.events(ORG)) == 1
    trace = "\n".join(["checkouts:", *traffic.checkouts, "statements:", *traffic.statements])
    assert traffic.checkouts, "nothing counted: the counter is not on the executor's engine"
    assert len(traffic.checkouts) <= MAX_CHECKOUTS, trace
    assert len(traffic.statements) <= MAX_STATEMENTS, trace
