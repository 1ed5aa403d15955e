"""The card's "What was read", "What will be written" and "What changed since you looked" in a
real browser (Playwright driving Debian's chromium, in Berlin's clock and a British locale): each
calendar read names whose calendar it is with its busy stretches in the person's clock and a day
strip with a text alternative; each write is a sentence; a stale preview shows old → new in the
person's clock — never JSON nor a Python repr. Screenshots: ``artifacts/screenshots/card-reads-*``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page

from countersign.api import UserStore
from countersign.api.shown_reads import shown_plan
from countersign.api.testing import ALICE, BOB, ApiHarness, chromium, sign_in
from countersign.execute.core import Change
from countersign.registry import Registry

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
SHOTS = ROOT / "artifacts" / "screenshots"
BERLIN = ZoneInfo("Europe/Berlin")
#: the card's own sections (the evidence and the plan picture are other helpers' parts)
MINE = "section.card ul.reads, section.card ul.writes, section.card ul.changes"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


def _signed_in(browser: Browser, api: ApiHarness, user: str) -> Page:
    link = UserStore(api.db, clock=lambda: datetime.now(UTC)).login_link(user)
    page = browser.new_context(timezone_id="Europe/Berlin", locale="en-GB").new_page()
    sign_in(page, f"{api.base}/login?token={link}")
    page.wait_for_selector("#text")
    return page


def _ask(page: Page, text: str) -> None:
    page.fill("#text", text)
    page.press("#text", "Enter")


def _ics(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _mine(page: Page) -> str:
    return " ".join(page.locator(MINE).all_inner_texts())


def test_the_card_says_whose_calendar_is_busy_when_in_the_persons_clock(
    browser: Browser, api: ApiHarness
) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    tomorrow = (datetime.now(BERLIN) + timedelta(days=1)).replace(
        hour=14, minute=0, second=0, microsecond=0
    )
    api.radicale.add_event(
        BOB, "card-reads-busy", _ics(tomorrow), _ics(tomorrow + timedelta(minutes=45))
    )
    page = _signed_in(browser, api, ALICE)
    _ask(page, "schedule a 30 minute meeting with Alice and Bob tomorrow afternoon called Sync")
    page.wait_for_selector("section.card ul.reads")
    page.screenshot(path=str(SHOTS / "card-reads-meeting.png"), full_page=True)
    lines = page.locator("section.card ul.reads li.busy .line").all_inner_texts()
    bob = [t for t in lines if re.search(r"\bBob\b|bob@example\.com", t)]
    alice = [t for t in lines if t.startswith("You:")]  # the person asking: her own calendar
    # Bob's 14:00–14:45 in Berlin's clock (13:00Z), not UTC and not JSON
    assert bob and "busy 14:00–14:45" in bob[0], lines
    assert alice and "free the whole time" in alice[0], lines
    strip = page.locator("section.card ul.reads li.busy .strip").first
    assert "busy 14:00–14:45" in (
        page.locator(
            "section.card ul.reads li.busy .strip[aria-label*='14:00–14:45']"
        ).first.get_attribute("aria-label")
        or ""
    )
    assert strip.get_attribute("role") == "img"
    free = page.locator("section.card ul.reads li.free .line").inner_text()
    assert free.startswith("Free for everyone, at least 30 min:"), free
    writes = page.locator("section.card ul.writes li").all_inner_texts()
    assert any(
        w.startswith("Create the event “Sync” in ") and "at the time you pick below" in w
        for w in writes
    ), writes
    assert any(w.startswith("Mail ") and "“Sync”" in w for w in writes), writes
    _named_by_contacts(page, api)
    text = _mine(page)
    assert '{"' not in text and "{'" not in text and "$ref" not in text, text
    assert api.events_in_calendar() == []  # the card wrote nothing
    # the card at its own URL (GET /v1/plans/{id} carries shown too) says the same
    plan_id = page.locator("section.card").first.get_attribute("data-plan")
    with api.client(ALICE) as c:
        body = c.get(f"/v1/plans/{plan_id}").json()
    assert body["shown"]["writes"][0]["text"].startswith("Create the event “Sync” in your ")
    page.goto(f"{api.base}/plans/{plan_id}")
    page.wait_for_selector("section.card ul.reads li.busy")
    assert any("busy 14:00–14:45" in t for t in page.locator("ul.reads .line").all_inner_texts())


def _named_by_contacts(page: Page, api: ApiHarness) -> None:
    """With the caller's contacts given to the previews (``Runs.people``, as ``build_services``
    wires ``Chat.people`` in), Bob is named: "Bob: busy …", "your and Bob's calendars"."""
    runs = api.services.runs
    before = runs.people
    runs.people = before or (lambda user: api.services.chat.people(user).known)
    try:
        _ask(
            page, "schedule a 30 minute meeting with Alice and Bob tomorrow afternoon called Named"
        )
        page.wait_for_function("document.querySelectorAll('section.card ul.reads').length >= 2")
        card = page.locator("section.card").last
        lines = card.locator("ul.reads li.busy .line").all_inner_texts()
        assert "Bob: busy 14:00–14:45" in lines and "You: free the whole time" in lines, lines
        writes = card.locator("ul.writes li").all_inner_texts()
        assert writes[0].startswith("Create the event “Named” in your and Bob's calendars"), writes
        assert writes[1].startswith("Mail you and Bob “Named”"), writes
    finally:
        runs.people = before


def test_a_stale_card_shows_old_to_new_in_the_persons_clock(
    browser: Browser, api: ApiHarness
) -> None:
    page = _signed_in(browser, api, ALICE)
    _ask(page, "schedule a 30 minute meeting with Alice and Bob tomorrow afternoon called Moved")
    page.wait_for_selector("section.card ul.reads")
    picked = json.loads(
        page.locator("section.card fieldset input").first.get_attribute("data-choice") or ""
    )
    start, end = (
        datetime.fromisoformat(picked[k].replace("Z", "+00:00")) for k in ("start", "end")
    )
    api.radicale.add_event(BOB, "card-reads-moved", _ics(start), _ics(end), "dentist")
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("text=What changed since you looked")
    page.screenshot(path=str(SHOTS / "card-reads-stale.png"), full_page=True)
    rows = page.locator("section.card ul.changes li").all_inner_texts()
    local = f"{start.astimezone(BERLIN):%H:%M}–{end.astimezone(BERLIN):%H:%M}"
    assert any("busy:" in r and "→" in r and local in r.split("→")[1] for r in rows), (rows, local)
    assert any(re.search(r"Bob's calendar|calendar of bob@example\.com", r) for r in rows), rows
    text = _mine(page)
    assert "{'" not in text and '{"' not in text and "..." not in text, text
    assert api.events_in_calendar() == []


def test_offers_read_as_a_table_and_a_moved_price_as_old_to_new_in_euros(
    browser: Browser, api: ApiHarness, registry: Registry
) -> None:
    """The shopping card's reads as the page draws them from ``shown`` (the API harness has no
    shop: the preview reply is built here from the use case's plan and the sandbox shop's
    answers), and a stale preview's moved price, named by item, in the intent's currency."""
    doc = json.loads((ROOT / "usecases/shopping/plans/default.plan.json").read_text())
    plan = doc.get("plan", doc)
    offers = [
        {"item": "cable-a", "title": "usb-c cable 2m (cable-a)", "price": "9.90"},
        {"item": "cable-b", "title": "usb-c cable 2m (cable-b)", "price": "12.50"},
    ]
    moved = [{**offers[0], "price": "14.00"}, offers[1]]
    outputs = {1: {"query": "usb-c cable 2m", "offers": moved}}
    preview = {"shown": shown_plan(plan, outputs, registry, (), me=plan["intent"]["user_id"])}
    changes = [Change(step=1, before={"offers": offers}, after={"offers": moved}).summary()]
    page = _signed_in(browser, api, ALICE)
    page.evaluate(
        """([plan, preview, changes]) => {
          const box = el("section", { class: "card", "data-plan": plan.plan_id });
          box.append(...changesView(changes), ...readsView({ plan }, preview, {}), ...writesView(plan));
          document.getElementById("log").append(box);
        }""",
        [plan, preview, changes],
    )
    page.screenshot(path=str(SHOTS / "card-reads-offers.png"), full_page=True)
    table = page.locator("section.card ul.reads table.offers")
    assert table.locator("caption").inner_text() == "Offers for “usb-c cable 2m”"
    assert table.locator("th").all_inner_texts() == ["Item", "Price", "Quantity", "Total"]
    assert table.locator("tbody tr").first.locator("td").all_inner_texts() == [
        "usb-c cable 2m (cable-a)",
        "€14.00",
        "1",
        "€14.00",
    ]
    [row] = page.locator("section.card ul.changes li").all_inner_texts()
    assert row == "Offers for “usb-c cable 2m” · usb-c cable 2m (cable-a) · price: €9.90 → €14.00"
    writes = page.locator("section.card ul.writes li").all_inner_texts()
    assert writes[:2] == [
        "Add 2 × the offer you pick below to your cart",
        "Buy what is in your cart, only if its total is at most 15.00 EUR",
    ]
    assert page.locator("text=Times in your clock").count() == 0  # no time was read
    text = _mine(page)
    assert "{" not in text and "'" not in text.replace("’", ""), text
    # a watcher's find: the appointment times in the person's clock (09:00Z is 10:00 in Berlin)
    visa = json.loads((ROOT / "usecases/visa/plans/default.plan.json").read_text())
    visa = visa.get("plan", visa)
    found = {1: {"slots": [{"id": "slot-1", "at": "2027-03-14T09:00:00Z"}]}}
    page.evaluate(
        """([plan, preview]) => {
          const box = el("section", { class: "card visa", "data-plan": plan.plan_id });
          box.append(...readsView({ plan }, preview, {}), ...writesView(plan));
          document.getElementById("log").append(box);
        }""",
        [visa, {"shown": shown_plan(visa, found, registry, ())}],
    )
    read = page.locator("section.card.visa ul.reads li.times")
    assert read.locator(".line").inner_text() == (
        "Free appointments at Lisbon (between Mon 1 Mar and Wed 31 Mar):"
    )
    assert read.locator("ul li").all_inner_texts() == ["Sun 14 Mar, 10:00"]
    assert page.locator("section.card.visa ul.writes li").first.inner_text() == (
        "Book the appointment at Lisbon: the slot you pick below"
    )
