"""What the person approves is exactly what is written (ARCHITECTURE §3 inv. 3), on the real stack.

Each class of the outside review's holes, as tables of variants, counted at the sandbox
providers: a gate's choice outside what the preview offered is refused at approve (HTTP, naming
the field) and again at execute (a token minted past the API), nothing written; a later gate
approved before the writes it depends on ran is refused before any token is spent; a gate decided
again with another choice leaves one line in the cart and one order; a window in the past is not
planned; the statuses after complete / cancel / stale read as what happened.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from countersign.api.testing import ALICE, BOB, ApiHarness
from countersign.approvals import Approvals
from countersign.execute import ExecuteRefusedError, Executor, StaleWorldError
from countersign.kernel import Intent, Policy, system_clock
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import ShopSandbox
from countersign.signer import KeyRing
from countersign.steps import ChoiceError, N8nTransport, StoreRecorder
from countersign.storage import Database

pytestmark = pytest.mark.slow


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _window(days: int = 1) -> tuple[datetime, datetime]:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    day += timedelta(days=days)
    return day + timedelta(hours=13), day + timedelta(hours=18)


def _meeting(start: datetime, end: datetime, minutes: int = 30) -> dict[str, Any]:
    return {
        "intent": {
            "intent": "schedule_meeting",
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": minutes,
                "title": "Bound",
                "window_start": _iso(start),
                "window_end": _iso(end),
            },
        }
    }


def _written(api: ApiHarness) -> tuple[int, int, int]:
    return len(api.radicale.events(ALICE)), len(api.radicale.events(BOB)), len(api.smtp.messages)


def _bad_slots(start: datetime, end: datetime) -> list[tuple[str, Any, str]]:
    """Choices no 13:00-18:00 window with alice busy 14:00-15:00 offers for 30 minutes."""
    busy = start + timedelta(hours=1)
    return [
        (
            "inside a busy block",
            {"start": _iso(busy), "end": _iso(busy + timedelta(minutes=30))},
            "choice.start",
        ),
        (
            "outside the signed window",
            {"start": _iso(end), "end": _iso(end + timedelta(minutes=30))},
            "choice.start",
        ),
        (
            "end before start",
            {"start": _iso(start + timedelta(minutes=30)), "end": _iso(start)},
            "choice.end",
        ),
        (
            "two days long",
            {"start": _iso(start), "end": _iso(start + timedelta(days=2))},
            "choice.end",
        ),
        (
            "20 minutes",
            {"start": _iso(start), "end": _iso(start + timedelta(minutes=20))},
            "choice.end",
        ),
        ("the whole free stretch", {"start": _iso(start), "end": _iso(busy)}, "choice.end"),
        (
            "an extra field",
            {"start": _iso(start), "end": _iso(start + timedelta(minutes=30)), "uid": "x"},
            "choice.uid",
        ),
        ("no choice", None, "choice"),
        ("a list", [_iso(start)], "choice"),
    ]


def _preview_and_busy(api: ApiHarness, c: httpx.Client, body: dict[str, Any]) -> str:
    start, _ = _window()
    busy = start + timedelta(hours=1)
    api.radicale.add_event(
        ALICE,
        "alice-busy",
        busy.strftime("%Y%m%dT%H%M%SZ"),
        (busy + timedelta(hours=1)).strftime("%Y%m%dT%H%M%SZ"),
    )
    r = c.post("/v1/intents", json=body)
    assert r.status_code == 201, r.text
    plan_id: str = r.json()["plan_id"]
    assert c.post(f"/v1/plans/{plan_id}/preview").status_code == 200
    return plan_id


def test_choices_outside_the_offer_are_refused_at_approve_and_at_execute(
    api: ApiHarness,
) -> None:
    start, end = _window()
    with api.client() as c:
        plan_id = _preview_and_busy(api, c, _meeting(start, end))
        before = _written(api)
        offered = c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]
        assert offered["takes_choice"] and offered["duration_min"] == 30
        assert offered["options"], "the card is offered slots"
        for why, choice, field in _bad_slots(start, end):
            r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": choice})
            assert r.status_code == 422, (why, r.text)
            body = r.json()
            assert body["code"] == "choice_invalid" and body["field"] == field, (why, body)
            assert body["gate_id"] == "gate-A"
            # the same choice with a token minted past the API: execute refuses it
            token = _mint(api, plan_id, choice)
            r = c.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
            assert r.status_code in (403, 409, 422), (why, r.text)
            assert r.json()["code"] == "choice_invalid", (why, r.text)
            # checked before anything was spent: the token is unspent, the gate undecided
            approvals = Approvals(api.db, clock=system_clock)
            assert approvals.offered_choice(token, plan_id=plan_id, gate_id="gate-A")[0], why
            assert approvals.decision(plan_id, "gate-A") is None, why
        assert _written(api) == before, "nothing was written for any refused choice"
        with api.db.tx() as conn:
            refused = conn.execute(
                text(
                    "SELECT count(*) FROM audit_log WHERE plan_id = :p AND reason = 'choice_invalid'"
                ),
                {"p": plan_id},
            ).scalar_one()
        assert refused == 2 * len(_bad_slots(start, end)), "every refusal is audited"
        # every slot the card offers is accepted; one of them is written, once
        pick = offered["options"][-1]["value"]
        r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": pick})
        assert r.status_code == 200, r.text
        done = c.post(
            f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": r.json()["token"]}}
        )
        assert done.status_code == 202 and done.json()["status"] == "completed", done.text
        assert _written(api) == (before[0] + 1, before[1] + 1, before[2] + 2)
        shown = c.get(f"/v1/plans/{plan_id}").json()
        assert shown["status"] == "completed"
        assert [g["status"] for g in shown["gates"]] == ["passed"]
        assert {s["step"]: s["status"] for s in shown["steps"]}[1] == "succeeded", "reads ran"
        assert all(s["status"] != "pending" for s in shown["steps"])
        # cancelling a completed plan does not pretend: 409 naming the status, nothing changes
        r = c.post(f"/v1/plans/{plan_id}/cancel")
        assert r.status_code == 409 and r.json()["code"] == "plan_finished", r.text
        assert "completed" in r.json()["detail"]
        assert c.get(f"/v1/plans/{plan_id}").json()["status"] == "completed"


def _mint(api: ApiHarness, plan_id: str, choice: Any) -> str:
    """A token issued straight by Approvals, as a compromised or buggy front end might."""
    doc = api.services.views.document(plan_id, ALICE)
    return (
        Approvals(api.db, clock=system_clock)
        .issue(
            plan_id=plan_id,
            plan_hash=doc["plan_hash"],
            gate_id="gate-A",
            user_id=doc["plan"]["intent"]["user_id"],
            scopes=doc["plan"]["constraints"]["scopes"],
            ttl_s=300,
            choice=choice,
        )
        .token
    )


def test_a_preference_that_set_the_length_holds_at_the_gate(api: ApiHarness) -> None:
    start, end = _window(2)
    with api.client() as c:
        plan_id = _preview_and_busy(api, c, _meeting(start, end, minutes=45))
        options = c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"]
        assert options and all(
            datetime.fromisoformat(o["value"]["end"].replace("Z", "+00:00"))
            - datetime.fromisoformat(o["value"]["start"].replace("Z", "+00:00"))
            == timedelta(minutes=45)
            for o in options
        )
        thirty = {"start": _iso(start), "end": _iso(start + timedelta(minutes=30))}
        r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": thirty})
        assert r.status_code == 422 and "45 minutes" in r.json()["detail"], r.text


PAST = [
    ("yesterday", -1, 13, 18, 30),
    ("earlier today", 0, -10, -5, 30),
    ("ends before it starts", 1, 18, 13, 30),
    ("slot longer than the window", 1, 13, 14, 90),
]


@pytest.mark.parametrize(("why", "days", "h0", "h1", "minutes"), PAST, ids=[p[0] for p in PAST])
def test_a_window_in_the_past_or_impossible_is_not_planned(
    api: ApiHarness, why: str, days: int, h0: int, h1: int, minutes: int
) -> None:
    now = datetime.now(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=days)
    start = (now if days == 0 else day) + timedelta(hours=h0)
    end = (now if days == 0 else day) + timedelta(hours=h1)
    with api.client() as c:
        r = c.post("/v1/intents", json=_meeting(start, end, minutes))
        assert r.status_code == 422, (why, r.text)
        assert r.json()["code"] == "planning_error", (why, r.text)
    assert _written(api) == (0, 0, 0)


# ---- two gates, on the sandbox shop -------------------------------------------------------------
LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
SHOPPER = "carol@example.com"
_n = iter(range(1, 10_000))


def _shop_plan(registry: Registry, keyring: KeyRing) -> dict[str, Any]:
    intent = Intent.model_validate(
        {
            "intent": "purchase_item",
            "intent_id": f"01JDQ3Z00000000000009{next(_n):05d}",
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "user_id": SHOPPER,
            "entities": {"query": "usb-c cable 2m", "max_price": "15.00", "quantity": 1},
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


def _tok(db: Database, doc: dict[str, Any], gate: str, choice: Any = None) -> str:
    scopes = {"gate-A": ["shopping.cart"], "gate-B": ["shopping.purchase"]}[gate]
    return (
        Approvals(db, clock=system_clock)
        .issue(
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id=gate,
            user_id=SHOPPER,
            scopes=scopes,
            ttl_s=300,
            choice=choice,
        )
        .token
    )


class _Shop:
    def __init__(
        self, n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: ShopSandbox
    ) -> None:
        self.n8n, self.db, self.registry, self.keyring, self.shop = n8n, db, registry, keyring, shop
        self.settings = {"shop_base_url": shop.base_url}

    async def preview(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        async with N8nClient(self.n8n.base_url, self.n8n.api_key) as client:
            pv = await run_preview(
                doc,
                keys=self.keyring,
                registry=self.registry,
                transport=N8nTransport(client),
                recorder=StoreRecorder(self.db, clock=system_clock),
                settings=self.settings,
                actor=SHOPPER,
                now=system_clock(),
            )
        shortlist: list[dict[str, Any]] = pv.outputs[2]["shortlist"]
        return shortlist

    async def execute(self, doc: dict[str, Any], tokens: dict[str, str]) -> Any:
        async with N8nClient(self.n8n.base_url, self.n8n.api_key) as client:
            ex = Executor(
                keys=self.keyring,
                registry=self.registry,
                transport=N8nTransport(client),
                db=self.db,
                settings=self.settings,
            )
            return await ex.execute(doc, user_id=SHOPPER, tokens=tokens)

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.shop.arrivals if m != "GET"]


def test_gate_b_approved_before_gate_a_wrote_is_refused_and_nothing_is_spent(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop_sandbox: ShopSandbox
) -> None:
    s = _Shop(n8n, db, registry, keyring, shop_sandbox)
    doc = _shop_plan(registry, keyring)

    async def go() -> None:
        shortlist = await s.preview(doc)
        a, b = _tok(db, doc, "gate-A", {"item": shortlist[0]["item"]}), _tok(db, doc, "gate-B")
        for tokens in ({"gate-A": a, "gate-B": b}, {"gate-B": b}):
            with pytest.raises(ExecuteRefusedError, match="have not run yet"):
                await s.execute(doc, tokens)
        assert s.writes() == [], "nothing reached the shop"
        # the tokens were not spent by the refusals: gate-A alone then runs and waits at gate-B
        first = await s.execute(doc, {"gate-A": a})
        assert first.status == "waiting" and first.waiting_gate == "gate-B"
        done = await s.execute(doc, {"gate-B": b})
        assert done.status == "completed"

    asyncio.run(go())
    assert s.writes() == [("POST", "/cart"), ("POST", "/checkout")]


def test_gate_a_decided_again_after_a_price_change_leaves_one_line_and_one_order(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop_sandbox: ShopSandbox
) -> None:
    s = _Shop(n8n, db, registry, keyring, shop_sandbox)
    doc = _shop_plan(registry, keyring)

    async def go() -> None:
        shortlist = await s.preview(doc)
        assert [o["item"] for o in shortlist] == ["cable-a", "cable-b"]
        first = await s.execute(doc, {"gate-A": _tok(db, doc, "gate-A", {"item": "cable-b"})})
        assert first.status == "waiting"
        shop_sandbox.prices["cable-b"] = "13.90"  # the price moves: gate-B is stale
        with pytest.raises(StaleWorldError):
            await s.execute(doc, {"gate-B": _tok(db, doc, "gate-B")})
        again = await s.preview(doc)  # the card looks again ...
        assert {o["item"] for o in again} == {"cable-a", "cable-b"}
        # ... and the person now picks cable-a at gate-A
        redo = await s.execute(doc, {"gate-A": _tok(db, doc, "gate-A", {"item": "cable-a"})})
        assert redo.status == "waiting" and redo.waiting_gate == "gate-B"
        assert [line["item"] for line in shop_sandbox.cart.values()] == ["cable-a"]
        # a choice the new preview did not offer is still refused
        with pytest.raises(ChoiceError):
            await s.execute(doc, {"gate-A": _tok(db, doc, "gate-A", {"item": "cable-c"})})
        done = await s.execute(doc, {"gate-B": _tok(db, doc, "gate-B")})
        assert done.status == "completed"

    asyncio.run(go())
    orders = list(shop_sandbox.orders.values())
    assert len(orders) == 1
    assert [line["item"] for line in orders[0]["lines"]] == ["cable-a"]
    assert orders[0]["total"] == "9.90"
    assert s.writes() == [
        ("POST", "/cart"),
        ("DELETE", "/cart/line-1"),
        ("POST", "/cart"),
        ("POST", "/checkout"),
    ]
