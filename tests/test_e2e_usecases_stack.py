"""The use cases end to end from chat text, on the stack ``countersign up --detach`` starts,
through the public HTTP API only (the way a front-end drives it), counting every effect in the
sandbox providers: exactly one per approved write, nothing without its gate, the audit chain
verifying, each plan's event stream complete. Shopping's two gates also in the browser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from countersign.api import fold_events
from countersign.api.testing import chromium, sign_in
from countersign.kernel.process import free_port
from countersign.planner.testing import until

pytestmark = pytest.mark.slow
ALICE, BOB = "alice@example.com", "bob@example.com"
SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"


@dataclass
class Stack:
    home: Path
    env: dict[str, str]
    base: str
    key: str
    login: str
    urls: dict[str, str]

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {self.key}"}, timeout=60
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "countersign.cli", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=600,
            check=False,
        )

    def mails(self, to: str | None = None) -> list[dict[str, Any]]:
        params = {"to": to} if to else {}
        out: list[dict[str, Any]] = (
            httpx.get(f"{self.urls['mailbox']}/messages", params=params, timeout=10)
            .json()
            .get("messages", [])
        )
        return out

    def events_of(self, user: str) -> int:
        """How many events ``user``'s sandbox calendar holds (CalDAV PROPFIND)."""
        r = httpx.request(
            "PROPFIND",
            f"{self.urls['caldav']}/{user}/calendar/",
            headers={"Depth": "1"},
            timeout=10,
        )
        return len(re.findall(r"\.ics</", r.text))

    def sandbox(self, name: str) -> dict[str, Any]:
        state: dict[str, Any] = httpx.get(f"{self.urls[name]}/_sandbox/state", timeout=10).json()
        return state


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("stack") / "home"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COUNTERSIGN_") and k != "DATABASE_URL"
    }
    if cache := os.environ.get("COUNTERSIGN_CACHE_DIR"):
        env["COUNTERSIGN_CACHE_DIR"] = cache
    port = free_port()
    env |= {
        "COUNTERSIGN_HOME": str(home),
        "COUNTERSIGN_N8N_PORT": str(free_port()),
        "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "COUNTERSIGN_SANDBOX_PORTS": "free",
    }
    s = Stack(home, env, f"http://127.0.0.1:{port}", "", "", {})
    up = s.cli("up", "--detach", "--port", str(port))
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        said = up.stdout + up.stderr
        line = re.search(r"sandbox ok: (.*)", said)
        assert line, said
        s.urls = dict(part.split(" ", 1) for part in line.group(1).split(", "))
        login = re.search(r"sign in \(once\)\s+(\S+)", said)
        assert login, said
        s.login = login.group(1)
        added = s.cli("users", "add", ALICE)
        assert added.returncode == 0, added.stderr
        s.key = added.stdout.strip().splitlines()[-1]
        yield s
    finally:
        down = s.cli("down")
        assert down.returncode == 0, down.stderr


def _stream(alice: httpx.Client, plan_id: str) -> list[dict[str, Any]]:
    """The plan's event stream as it stands (SSE, not followed)."""
    events = []
    with alice.stream("GET", f"/v1/plans/{plan_id}/events", params={"follow": "false"}) as r:
        current: dict[str, Any] = {}
        for line in r.iter_lines():
            if line.startswith("id:"):
                current["seq"] = int(line[3:])
            elif line.startswith("data:"):
                current |= json.loads(line[5:])
            elif line == "" and current:
                events.append(current)
                current = {}
    return events


def _complete_and_chained(stack: Stack, alice: httpx.Client, plan_id: str) -> list[str]:
    """The plan's event stream: numbered 1…n without a gap, folding to the status GET reports;
    the whole audit chain verifies. Returns the event kinds in order."""
    events = _stream(alice, plan_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert fold_events(events).status == alice.get(f"/v1/plans/{plan_id}").json()["status"]
    verified = stack.cli("audit", "verify", "--plan-id", plan_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    return [str(e["kind"]) for e in events]


def test_meeting_from_a_sentence(stack: Stack) -> None:
    events_before, mails_before = stack.events_of(ALICE), len(stack.mails())
    bobs_before = stack.events_of(BOB)
    with stack.client() as alice:
        first = alice.post(
            "/v1/intents", json={"text": "set up a meeting with Alice and Bob tomorrow afternoon"}
        ).json()
        assert first["intent"] == "schedule_meeting" and first["needs"], first
        body = alice.post(
            "/v1/intents",
            json={
                "text": "30 minutes, called Planning",
                "conversation_id": first["conversation_id"],
            },
        ).json()
        plan_id = body["plan_id"]
        slots = body["preview"]["normalized"]["steps"]["3"]["slots"]
        assert slots, body["preview"]
        # the preview wrote nothing; execute without the gate's token writes nothing either
        assert stack.events_of(ALICE) == events_before and len(stack.mails()) == mails_before
        assert stack.events_of(BOB) == bobs_before
        refused = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
        assert refused.status_code == 409 and refused.json()["code"] == "execute_refused"
        assert stack.events_of(ALICE) == events_before and stack.events_of(BOB) == bobs_before
        assert len(stack.mails()) == mails_before
        start = slots[0]["start"]
        end = (
            datetime.fromisoformat(start.replace("Z", "+00:00")) + timedelta(minutes=30)
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        token = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve",
            json={"choice": {"start": start, "end": end}},
        ).json()["token"]
        done = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert done.status_code == 202 and done.json()["status"] == "completed", done.text
        # one event in each attendee's calendar, one mail each; the same token again adds nothing
        again = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert again.status_code == 403
        assert stack.events_of(ALICE) == events_before + 1
        assert stack.events_of(BOB) == bobs_before + 1
        sent = [m for m in stack.mails() if m["subject"] == "Planning"]
        assert sorted(m["to"] for m in sent) == [ALICE, BOB]
        kinds = _complete_and_chained(stack, alice, plan_id)
        assert kinds[0] == "plan_signed" and kinds[-2:] == ["execute_finished", "token_refused"]
        assert kinds.count("step_finished") >= 3


def test_the_parallel_example_from_a_sentence(stack: Stack) -> None:
    """The parallel example (``find_meeting_time``): free/busy of Alice ‖ Bob (steps 1 and 2,
    no dependency between them) → overlap (3) → gate-A (4) → the event in the organizer's
    calendar (5), from chat text over the API. One approved write, one effect: one event in
    Alice's calendar, none in Bob's (the plan writes only the organizer's), no mail."""
    alices, bobs, mails = stack.events_of(ALICE), stack.events_of(BOB), len(stack.mails())
    with stack.client() as alice:
        first = alice.post("/v1/intents", json={"text": "find a time with Alice and Bob"}).json()
        assert first["intent"] == "find_meeting_time", first
        assert first["entities"]["participants"] == [ALICE, BOB], first
        asked = {n["entity"] for n in first["needs"]}
        assert asked == {"duration_min", "window_start", "window_end", "title"}, first
        body = alice.post(
            "/v1/intents",
            json={
                "text": "30 minutes tomorrow afternoon, called Parallel sync",
                "conversation_id": first["conversation_id"],
            },
        ).json()
        plan_id = body["plan_id"]
        assert body["gates"] == ["gate-A"], body
        shown = alice.get(f"/v1/plans/{plan_id}").json()
        graph = {s["step"]: s for s in shown["plan"]["graph"]}
        assert {n: (s["uses"], s["call"], s["after"]) for n, s in graph.items()} == {
            1: ("caldav", "list_free_busy", []),
            2: ("caldav", "list_free_busy", []),
            3: ("system.analyze", "find_overlap", [1, 2]),
            4: ("system.approval", "confirm", [3]),
            5: ("caldav", "create_event", [4]),
        }
        assert {graph[1]["args"]["user"], graph[2]["args"]["user"]} == {ALICE, BOB}
        steps = body["preview"]["normalized"]["steps"]
        assert set(steps) == {"1", "2", "3"}  # the three reads, nothing else
        slots = steps["3"]["slots"]
        assert slots, body["preview"]
        # the preview wrote nothing; execute without the gate's token writes nothing either
        refused = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
        assert refused.status_code == 409 and refused.json()["code"] == "execute_refused"
        assert (stack.events_of(ALICE), stack.events_of(BOB)) == (alices, bobs)
        start = slots[0]["start"]
        end = (
            datetime.fromisoformat(start.replace("Z", "+00:00")) + timedelta(minutes=30)
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        token = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve",
            json={"choice": {"start": start, "end": end}},
        ).json()["token"]
        assert (stack.events_of(ALICE), stack.events_of(BOB)) == (alices, bobs)  # approve ≠ run
        done = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert done.status_code == 202 and done.json()["status"] == "completed", done.text
        again = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert again.status_code == 403
        assert stack.events_of(ALICE) == alices + 1 and stack.events_of(BOB) == bobs
        assert len(stack.mails()) == mails
        kinds = _complete_and_chained(stack, alice, plan_id)
        assert kinds[0] == "plan_signed" and kinds[-2:] == ["execute_finished", "token_refused"]
        writes = [(e["kind"], e.get("step")) for e in _stream(alice, plan_id)]
        assert writes.count(("step_started", 5)) == 1 and ("step_finished", 5) in writes
        assert not [w for w in writes if w[0] == "step_started" and w[1] != 5]


def test_shopping_two_gates_budget_and_a_price_change(stack: Stack) -> None:
    with stack.client() as alice:
        body = alice.post(
            "/v1/intents",
            json={
                "text": "buy 2 usb cables under 30 euros and mail the receipt to alice@example.com"
            },
        ).json()
        plan_id = body["plan_id"]
        assert body["gates"] == ["gate-A", "gate-B"], body
        shortlist = body["preview"]["normalized"]["steps"]["2"]["shortlist"]
        assert shortlist and all(float(o["price"]) <= 30 for o in shortlist)
        before = stack.sandbox("shop")
        assert before["cart"] == [], before  # the preview put nothing in the cart
        orders_before = len(before["orders"])
        pick = shortlist[0]
        token = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": {"item": pick["item"]}}
        ).json()["token"]
        first = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert first.status_code == 202, first.text
        waiting = first.json()
        assert waiting["status"] == "waiting" and waiting["waiting_gate"] == "gate-B", waiting
        line = waiting["gate_preview"]["done"]["4"]
        assert line["quantity"] == 2 and line["cart_total"] == f"{2 * float(pick['price']):.2f}"
        shop = stack.sandbox("shop")
        assert len(shop["cart"]) == 1 and len(shop["orders"]) == orders_before  # gate-B guards it
        # the price moves between gate-A and gate-B: the purchase is refused as stale, naming it
        new_price = f"{float(pick['price']) + 1:.2f}"
        httpx.put(
            f"{stack.urls['shop']}/_sandbox/prices/{pick['item']}",
            json={"price": new_price},
            timeout=10,
        )
        token = alice.post(f"/v1/plans/{plan_id}/gates/gate-B/approve", json={}).json()["token"]
        stale = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-B": token}})
        assert stale.status_code == 409 and stale.json()["code"] == "stale_world", stale.text
        assert new_price in json.dumps(stale.json()["changes"])
        assert len(stack.sandbox("shop")["orders"]) == orders_before
        # look again, approve again: one purchase, one receipt
        assert alice.post(f"/v1/plans/{plan_id}/preview").status_code == 200
        token = alice.post(f"/v1/plans/{plan_id}/gates/gate-B/approve", json={}).json()["token"]
        done = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-B": token}})
        assert done.status_code == 202 and done.json()["status"] == "completed", done.text
        orders = stack.sandbox("shop")["orders"]
        assert len(orders) == orders_before + 1, orders
        assert stack.sandbox("shop")["cart"] == []
        receipts = [m for m in stack.mails(ALICE) if m["subject"] == "Your order"]
        assert len(receipts) == 1
        kinds = _complete_and_chained(stack, alice, plan_id)
        assert "gate_waiting" in kinds and kinds[-1] == "execute_finished"


def test_shopping_over_the_budget_is_refused_before_gate_b(stack: Stack) -> None:
    """The cart already holds a line Alice put there on the shop's own site; the plan's shortlist
    keeps within "under 15 euros", but after gate-A's cart write the cart totals more than that:
    gate-B's approval is refused (``over_budget``, naming the total and the limit) and nothing is
    bought. The stray lines are taken out at the shop afterwards (the shop's own contract)."""
    shop = stack.urls["shop"]
    orders_before = len(stack.sandbox("shop")["orders"])
    receipts_before = len([m for m in stack.mails(ALICE) if m["subject"] == "Your order"])
    assert stack.sandbox("shop")["cart"] == []
    there = httpx.post(
        f"{shop}/cart", json={"item": "cable-c", "quantity": 1, "customer": ALICE}, timeout=10
    )
    assert there.status_code == 200, there.text
    try:
        with stack.client() as alice:
            body = alice.post(
                "/v1/intents",
                json={"text": "buy 1 usb cable under 15 euros and mail the receipt to "
                      "alice@example.com"},
            ).json()  # fmt: skip
            plan_id = body["plan_id"]
            assert body["gates"] == ["gate-A", "gate-B"], body
            shortlist = body["preview"]["normalized"]["steps"]["2"]["shortlist"]
            assert shortlist and all(float(o["total"]) <= 15 for o in shortlist), shortlist
            pick = shortlist[0]
            token = alice.post(
                f"/v1/plans/{plan_id}/gates/gate-A/approve",
                json={"choice": {"item": pick["item"]}},
            ).json()["token"]
            first = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
            assert first.status_code == 202 and first.json()["waiting_gate"] == "gate-B"
            total = first.json()["gate_preview"]["done"]["4"]["cart_total"]
            assert float(total) > 15, total
            over = alice.post(f"/v1/plans/{plan_id}/gates/gate-B/approve", json={})
            assert over.status_code == 409 and over.json()["code"] == "over_budget", over.text
            graph = alice.get(f"/v1/plans/{plan_id}").json()["plan"]["graph"]
            buy = next(s["step"] for s in graph if s["call"] == "purchase")
            assert over.json()["budget"] == {"step": buy, "limit": "15.00", "total": total}
            assert total in over.json()["detail"] and "15.00" in over.json()["detail"]
            # no token was issued: the plan still waits at gate-B and nothing runs the purchase
            nothing = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
            assert nothing.status_code == 202, nothing.text
            assert (nothing.json()["status"], nothing.json()["waiting_gate"]) == (
                "waiting",
                "gate-B",
            )
            assert len(stack.sandbox("shop")["orders"]) == orders_before
            receipts = [m for m in stack.mails(ALICE) if m["subject"] == "Your order"]
            assert len(receipts) == receipts_before
            refusals = [
                e
                for e in alice.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
                if e["kind"] == "approval_refused"
            ]
            assert [e["reason"] for e in refusals] == ["over_budget"], refusals
            kinds = _complete_and_chained(stack, alice, plan_id)
            assert "gate_waiting" in kinds
            started = [
                e.get("step") for e in _stream(alice, plan_id) if e["kind"] == "step_started"
            ]
            assert buy not in started and buy + 1 not in started  # neither purchase nor receipt
    finally:
        for line in stack.sandbox("shop")["cart"]:
            httpx.delete(f"{shop}/cart/{line['id']}", timeout=10)
    assert stack.sandbox("shop")["cart"] == []
    assert len(stack.sandbox("shop")["orders"]) == orders_before


def test_visa_watcher_from_a_sentence(stack: Stack) -> None:
    with stack.client() as alice:
        body = alice.post(
            "/v1/intents",
            json={
                "text": "watch the lisbon consulate for a visa slot in march "
                "and mail me at alice@example.com"
            },
        ).json()
        plan_id = body["plan_id"]
        assert body["gates"] == ["gate-A"], body
        booked = "Visa appointment booked"
        confirmations = len([m for m in stack.mails(ALICE) if m["subject"] == booked])
        httpx.post(f"{stack.urls['visa']}/_sandbox/slots", timeout=10)  # a slot is there now
        started = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
        assert started.status_code == 202 and started.json()["status"] == "handed_off"
        wid = started.json()["workflow_id"]
        assert alice.get(f"/v1/plans/{plan_id}").json()["workflow_id"] == wid
        assert stack.sandbox("visa")["bookings"] == []  # nothing booked before gate-A

        def slot() -> str | None:
            found = [
                e
                for e in alice.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
                if e["kind"] == "watcher_polled" and e["status"] == "found"
            ]
            return str(found[-1]["details"]["found"]["slots"][0]["id"]) if found else None

        slot_id = until(slot, 60)
        assert slot_id, alice.get(f"/v1/plans/{plan_id}").json()
        ok = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": {"slot": {"id": slot_id}}}
        )
        assert ok.status_code == 200, ok.text
        assert until(lambda: len(stack.sandbox("visa")["bookings"]) == 1, 60)
        assert until(
            lambda: [m for m in stack.mails(ALICE) if m["subject"] == booked][confirmations:], 60
        )
        assert until(
            lambda: alice.get(f"/v1/plans/{plan_id}").json()["status"] == "completed", 60
        ), alice.get(f"/v1/plans/{plan_id}").json()["status"]
        # the run has ended: exactly one booking and exactly one confirmation mail
        assert len(stack.sandbox("visa")["bookings"]) == 1
        sent = [m for m in stack.mails(ALICE) if m["subject"] == booked]
        assert len(sent) == confirmations + 1, sent
        kinds = _complete_and_chained(stack, alice, plan_id)
        assert "handed_off" in kinds and "gate_approved" in kinds


def test_shopping_two_gates_in_the_browser(stack: Stack) -> None:
    orders_before = len(stack.sandbox("shop")["orders"])
    with chromium() as browser:
        page = browser.new_page()
        sign_in(page, stack.login)
        page.fill("#text", "buy 1 usb cable under 20 euros")
        page.press("#text", "Enter")
        page.wait_for_selector("section.card fieldset[data-gate=gate-A] input[type=radio]")
        assert page.locator("fieldset[data-gate=gate-B][disabled]").count() == 1
        page.get_by_role("button", name="Approve").first.click()
        page.wait_for_selector("fieldset[data-gate=gate-B]:not([disabled])", timeout=60_000)
        page.wait_for_selector("text=cart_total")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "shopping-gate-b.png"), full_page=True)
        assert len(stack.sandbox("shop")["orders"]) == orders_before  # not before gate-B
        page.locator("fieldset[data-gate=gate-B]").get_by_role("button", name="Approve").click()
        page.wait_for_selector("text=finished: completed", timeout=60_000)
        page.screenshot(path=str(SHOTS / "shopping-done.png"), full_page=True)
    assert len(stack.sandbox("shop")["orders"]) == orders_before + 1


def test_visa_watcher_in_the_browser(stack: Stack) -> None:
    """Start watching from the card; the found slot opens gate-A; Approve books it on Temporal;
    the card links the run in the Temporal UI."""
    bookings_before = len(stack.sandbox("visa")["bookings"])
    with chromium() as browser:
        page = browser.new_page()
        login = stack.cli("login-link", "--port", stack.base.rsplit(":", 1)[1])
        assert login.returncode == 0, login.stderr
        sign_in(page, login.stdout.strip().splitlines()[-1])
        page.fill("#text", "watch the paris consulate for a visa slot in april")
        page.press("#text", "Enter")
        page.wait_for_selector("fieldset[data-gate=gate-A][disabled]")
        httpx.post(f"{stack.urls['visa']}/_sandbox/slots", timeout=10)
        page.get_by_role("button", name="Start watching").click()
        link = page.wait_for_selector("a:has-text('in the Temporal UI')", timeout=30_000)
        assert link is not None and "/workflows/watch-" in (link.get_attribute("href") or "")
        page.wait_for_selector(
            "fieldset[data-gate=gate-A]:not([disabled]) input[type=radio]", timeout=60_000
        )
        page.screenshot(path=str(SHOTS / "visa-found.png"), full_page=True)
        assert len(stack.sandbox("visa")["bookings"]) == bookings_before
        page.locator("fieldset[data-gate=gate-A]").get_by_role("button", name="Approve").click()
        try:
            page.wait_for_selector("text=/finished: (completed|booked)/", timeout=60_000)
        finally:
            page.screenshot(path=str(SHOTS / "visa-booked.png"), full_page=True)
    assert len(stack.sandbox("visa")["bookings"]) == bookings_before + 1


def test_a_watcher_that_holds_in_the_browser_then_a_rejection_releases_it(stack: Stack) -> None:
    """Asked to hold: "Start watching" approves gate-A (the hold and the mail with the card's
    link), the found slot is held and mailed, gate-B opens with it; Reject releases the hold and
    books nothing."""
    bookings_before = len(stack.sandbox("visa")["bookings"])
    with chromium() as browser:
        page = browser.new_page()
        login = stack.cli("login-link", "--port", stack.base.rsplit(":", 1)[1])
        assert login.returncode == 0, login.stderr
        sign_in(page, login.stdout.strip().splitlines()[-1])
        page.fill(
            "#text",
            "watch the rome consulate for a visa slot in may, hold it and mail me at "
            "alice@example.com",
        )
        page.press("#text", "Enter")
        page.wait_for_selector("fieldset[data-gate=gate-B][disabled]")
        assert page.locator("fieldset[data-start-gate=gate-A]").count() == 1
        assert page.locator("fieldset[data-gate=gate-A]").count() == 0  # approved by starting
        httpx.post(f"{stack.urls['visa']}/_sandbox/slots", timeout=10)
        page.get_by_role("button", name="Start watching").click()
        page.wait_for_selector(
            "fieldset[data-gate=gate-B]:not([disabled]) input[type=radio]", timeout=60_000
        )
        page.screenshot(path=str(SHOTS / "visa-held.png"), full_page=True)
        held = stack.sandbox("visa")["holds"]
        assert held, "the found slot is held while the person decides"
        notice = until(
            lambda: [
                m for m in stack.mails(ALICE) if m["subject"].startswith("A visa slot is held")
            ],
            30,
        )
        assert notice and "/plans/" in notice[-1].get("body", "")
        page.locator("fieldset[data-gate=gate-B]").get_by_role("button", name="Reject").click()
        assert until(lambda: set(held) <= set(stack.sandbox("visa")["released"]), 60), (
            stack.sandbox("visa")
        )
    assert len(stack.sandbox("visa")["bookings"]) == bookings_before
    assert not set(held) & set(stack.sandbox("visa")["holds"])


def test_a_watcher_cancelled_from_its_card_ends_and_books_nothing(stack: Stack) -> None:
    bookings_before = len(stack.sandbox("visa")["bookings"])
    with chromium() as browser:
        page = browser.new_page()
        login = stack.cli("login-link", "--port", stack.base.rsplit(":", 1)[1])
        sign_in(page, login.stdout.strip().splitlines()[-1])
        page.fill(
            "#text", "watch the madrid consulate for a visa slot in june, check every 5 minutes"
        )
        page.press("#text", "Enter")
        page.get_by_role("button", name="Start watching").click()
        page.wait_for_selector("a:has-text('in the Temporal UI')", timeout=30_000)
        page.get_by_role("button", name="Cancel plan").click()
        page.wait_for_selector("text=/cancelled/", timeout=30_000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "visa-cancelled.png"), full_page=True)
        plan_id = page.locator("section.card").get_attribute("data-plan")
    with stack.client() as alice:
        shown = alice.get(f"/v1/plans/{plan_id}")
        assert shown.status_code == 404  # the browser's user is not alice: her view has no card
    # the run ended through Temporal's cancellation and recorded it (the plan's log says so)
    events = stack.cli("events", str(plan_id))
    kinds = [json.loads(line)["kind"] for line in events.stdout.splitlines() if line.strip()]
    assert "plan_cancelled" in kinds
    assert until(
        lambda: (
            "durable_finished"
            in [
                json.loads(line)["kind"]
                for line in stack.cli("events", str(plan_id)).stdout.splitlines()
                if line.strip()
            ]
        ),
        30,
    )
    assert len(stack.sandbox("visa")["bookings"]) == bookings_before
    # nothing ended unrecorded: the reconciler (also run when the API starts) finds nothing
    swept = stack.cli("reconcile")
    assert swept.returncode == 0 and swept.stdout.strip() == "", swept.stdout + swept.stderr


class _Holidays(BaseHTTPRequestHandler):
    """A third-party public-holiday service (a stand-in on loopback)."""

    def do_GET(self) -> None:
        country = parse_qs(urlparse(self.path).query).get("country", [""])[0]
        body = json.dumps(
            {"country": country, "holidays": [{"date": "2026-12-08", "name": "Imaculada"}]}
        ).encode()
        self.send_response(200 if urlparse(self.path).path == "/holidays" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_connector_and_an_intent_added_by_registry_edits_alone(stack: Stack) -> None:
    """A newcomer adds a read connector (a public-holiday lookup) and an intent that uses it
    through ``PUT /v1/registry/…`` — no Python, no restart — and it is planned from a sentence,
    previewed (the lookup really runs, read-only), approved and executed like the others."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Holidays)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        made = stack.cli("users", "add", "registry-admin", "--admin")
        assert made.returncode == 0, made.stderr
        admin = httpx.Client(
            base_url=stack.base,
            headers={"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"},
            timeout=60,
        )
        connector = {
            "id": "holidays.lookup",
            "title": "Public holidays",
            "description": "Public holidays of a country from a holiday service.",
            "ops": {
                "list": {
                    "node": {"type": "n8n-nodes-base.httpRequest", "type_version": 4.2},
                    "safety": "read",
                    "previewable": True,
                    "role": "Fetcher",
                    "scopes": ["holidays.read"],
                    "args": {"required": ["country"]},
                    "params": {
                        "method": {"const": "GET"},
                        "url": {"const": f"http://127.0.0.1:{server.server_port}/holidays"},
                        "sendQuery": {"const": True},
                        "queryParameters.parameters[0].name": {"const": "country"},
                        "queryParameters.parameters[0].value": {"arg": "country"},
                    },
                }
            },
        }
        r = admin.put("/v1/registry/connectors/holidays.lookup", json=connector)
        assert r.status_code == 200, r.text
        intent = {
            "name": "mail_public_holidays",
            "title": "Mail the public holidays",
            "description": "Look up the public holidays of a country and mail them after approval.",
            "required": [
                {"name": "country", "type": "string", "question": "Which country (e.g. PT)?"},
                {"name": "notify_to", "type": "email", "question": "Who should get the mail?"},
            ],
            "steps": [
                {
                    "id": "lookup",
                    "uses": "holidays.lookup",
                    "call": "list",
                    "args": {"country": "$entities.country"},
                },
                {
                    "id": "mail",
                    "uses": "@mail",
                    "call": "send",
                    "after": ["lookup"],
                    "args": {
                        "to": "$entities.notify_to",
                        "subject": "Public holidays",
                        "body": "The public holidays you asked for are in Countersign.",
                    },
                },
            ],
            "examples": ["mail me the public holidays of a country"],
        }
        r = admin.put("/v1/registry/intents/mail_public_holidays", json=intent)
        assert r.status_code == 200, r.text
        with stack.client() as alice:
            first = alice.post(
                "/v1/intents",
                json={"text": "mail the public holidays to alice@example.com"},
            ).json()
            assert first["intent"] == "mail_public_holidays", first
            assert [n["entity"] for n in first["needs"]] == ["country"], first
            body = alice.post(
                "/v1/intents",
                json={"text": "PT", "conversation_id": first["conversation_id"]},
            ).json()
            assert body.get("plan_id"), body
            plan_id = body["plan_id"]
            looked = body["preview"]["normalized"]["steps"]["1"]
            assert looked["country"] == "PT" and looked["holidays"][0]["name"] == "Imaculada"
            assert body["gates"] == ["gate-A"]
            assert not [m for m in stack.mails(ALICE) if m["subject"] == "Public holidays"]
            token = alice.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={}).json()
            done = alice.post(
                f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token["token"]}}
            )
            assert done.status_code == 202 and done.json()["status"] == "completed", done.text
            sent = [m for m in stack.mails(ALICE) if m["subject"] == "Public holidays"]
            assert len(sent) == 1
    finally:
        server.shutdown()
