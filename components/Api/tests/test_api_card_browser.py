"""The preview card's picture, focus and state in a real browser (Playwright driving Debian's
chromium, as test_api_chat_browser.py): the plan drawn as a DAG (gates as diamonds, writes
marked, arrows, stacked at 360 px with no horizontal scroll); after a stale preview the focus is
on the gate; the status line never goes back from a final state whatever order the event stream
and the approve reply arrive in; a reload brings back the open question; an empty shortlist (and
a meeting with no free time) says why and offers the change. Screenshots go to
``artifacts/screenshots/card-*.png``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, Route

from countersign.api import UserStore
from countersign.api.testing import ALICE, BOB, ApiHarness, chromium, harness, sign_in
from countersign.n8n import N8nHandle
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.sandbox.shop import ShopSandbox
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

pytestmark = pytest.mark.slow

SHOTS = Path(__file__).resolve().parents[3] / "artifacts" / "screenshots"
MEETING = "schedule a 30 minute meeting with Alice and Bob tomorrow afternoon called {}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as b:
        yield b


@pytest.fixture
def shop_api(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
    shop_sandbox: ShopSandbox,
) -> Iterator[ApiHarness]:
    """The API over the real stack with the sandbox shop."""
    with harness(
        n8n,
        db,
        registry,
        keyring,
        radicale,
        smtp_server,
        api_smtp_credential,
        settings={"shop_base_url": shop_sandbox.base_url},
    ) as h:
        yield h


def _signed_in(browser: Browser, api: ApiHarness, width: int = 1000) -> Page:
    link = UserStore(api.db, clock=lambda: datetime.now(UTC)).login_link(ALICE)
    page = browser.new_page(viewport={"width": width, "height": 900})
    sign_in(page, f"{api.base}/login?token={link}")
    page.wait_for_selector("#text")
    return page


def _ask(page: Page, text: str) -> None:
    page.fill("#text", text)
    page.press("#text", "Enter")


def _card(page: Page, text: str) -> str:
    """Ask for a plan; the id of its card (the last one), once its choices are shown."""
    n = page.locator("section.card").count()
    _ask(page, text)
    page.wait_for_selector(f"section.card >> nth={n}")
    card = page.locator("section.card").nth(n)
    card.locator("fieldset[data-gate] input[type=radio]").first.wait_for()
    return card.get_attribute("data-plan") or ""


def _edges(page: Page, plan_id: str) -> list[dict[str, Any]]:
    """The arrows drawn, with the boxes of the steps they join (page coordinates)."""
    out: list[dict[str, Any]] = page.evaluate(
        """(id) => [...document.querySelectorAll(`section.card[data-plan="${id}"] path.edge`)]
        .map((p) => { const b = p.getBoundingClientRect();
          return {from: p.dataset.from, to: p.dataset.to, w: b.width, h: b.height}; })""",
        plan_id,
    )
    return out


def test_the_plan_is_drawn_as_a_dag_and_stacks_at_phone_width(
    browser: Browser, api: ApiHarness
) -> None:
    page = _signed_in(browser, api)
    plan_id = _card(page, MEETING.format("Picture"))
    card = page.locator(f"section.card[data-plan='{plan_id}']")
    graph = api.client().get(f"/v1/plans/{plan_id}").json()["plan"]["graph"]

    def step(n: int) -> Locator:
        return card.locator(f"#step-{plan_id}-{n}")

    # words, not calls: whose calendar is read, the gate, what is written
    assert "Read your calendar" in step(1).inner_text()
    assert "Read Bob's calendar" in step(2).inner_text()
    gates = [s["step"] for s in graph if s.get("gate_id")]
    writes = [s["step"] for s in graph if s["role"] in ("Booker", "Notifier")]
    assert len(gates) == 1 and len(writes) == 4
    gate = step(gates[0])
    assert "Gate A: you approve" in gate.inner_text()
    # the gate is a diamond (an SVG polygon with four corners filling its box, no box border)
    shape = gate.evaluate(
        """(g) => { const p = g.querySelector(':scope > svg.shape polygon');
        const b = g.getBoundingClientRect(), s = g.querySelector('svg.shape').getBoundingClientRect();
        return {points: p && p.getAttribute('points').trim().split(/\\s+/).length,
          border: getComputedStyle(g).borderTopStyle, fills: Math.abs(b.width - s.width) < 2 }; }"""
    )
    assert shape == {"points": 4, "border": "none", "fills": True}
    # writes marked (a badge in words and a double border), reads distinct (dashed)
    for n in writes:
        assert step(n).get_attribute("data-kind") == "write"
        assert "✎ writes" in step(n).inner_text()
        assert step(n).evaluate("s => getComputedStyle(s).borderTopStyle") == "double"
    assert step(1).evaluate("s => getComputedStyle(s).borderTopStyle") == "dashed"
    # side by side: the two reads on one row, the two calendar writes on one row
    tops = {n: step(n).bounding_box() for n in (1, 2, writes[0], writes[1])}
    assert abs(tops[1]["y"] - tops[2]["y"]) < 2 and tops[1]["x"] != tops[2]["x"]  # type: ignore[index]
    # every edge of the graph is an arrow, and each has a size
    want = sorted((str(a), str(s["step"])) for s in graph for a in s["after"])
    drawn = _edges(page, plan_id)
    assert sorted((e["from"], e["to"]) for e in drawn) == want
    assert all(e["w"] + e["h"] > 10 for e in drawn)
    # the text alternative: each step says what it waits for and its status in words
    waits = step(writes[0]).locator(".sr-only").inner_text()
    assert f"waits for step {gates[0]} (Gate A: you approve)" in waits
    assert step(1).locator(".state").inner_text() == "not started"
    card.screenshot(path=str(SHOTS / "card-dag.png"))

    # phone width: one column, nothing scrolls sideways, the arrows are still there
    page.set_viewport_size({"width": 360, "height": 800})
    page.wait_for_function(
        f"document.querySelector('section.card[data-plan=\"{plan_id}\"] figure.dag')"
        ".classList.contains('stacked')"
    )
    lefts = {round((step(s["step"]).bounding_box() or {"x": -1})["x"]) for s in graph}
    assert len(lefts) == 1, lefts
    wide = page.evaluate(
        """[...document.querySelectorAll('body *')].filter((e) =>
        e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
        .map((e) => `${e.tagName}.${e.className}: ${Math.round(e.getBoundingClientRect().right)}`)"""
    )
    assert page.evaluate(
        "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    ), wide
    assert len(_edges(page, plan_id)) == len(want)
    page.screenshot(path=str(SHOTS / "card-dag-360.png"), full_page=True)
    card.locator("figure.dag").screenshot(path=str(SHOTS / "card-dag-360-steps.png"))

    page.set_viewport_size({"width": 1000, "height": 900})
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("text=finished: completed", timeout=60_000)
    page.wait_for_function("document.querySelectorAll('.step[data-status=succeeded]').length >= 3")
    done = card.locator(".step[data-status=succeeded] .state").first.inner_text()
    assert done == "✓ done"  # the status in words, not only the colour
    card.screenshot(path=str(SHOTS / "card-dag-done.png"))


def test_after_a_stale_preview_the_focus_is_on_the_gate(browser: Browser, api: ApiHarness) -> None:
    with api.client() as alice:  # a preference: the card shows evidence (checkboxes) first
        alice.put("/v1/memory/prefs", json={"prefs": {"default_meeting_length": 30}})
    page = _signed_in(browser, api)
    _card(page, MEETING.format("Moved"))
    assert page.locator("section.card fieldset.evidence input[type=checkbox]").count() >= 1
    picked = json.loads(
        page.locator("section.card fieldset[data-gate] input").first.get_attribute("data-choice")
        or ""
    )
    start, end = (
        datetime.fromisoformat(picked[k].replace("Z", "+00:00")).strftime("%Y%m%dT%H%M%SZ")
        for k in ("start", "end")
    )
    api.radicale.add_event(BOB, "moved-busy", start, end, "dentist")
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("text=What changed since you looked")
    page.wait_for_function(
        "document.activeElement && document.activeElement.closest('fieldset[data-gate]')"
    )
    focused = page.evaluate(
        "({tag: document.activeElement.tagName, type: document.activeElement.type,"
        " checked: document.activeElement.checked})"
    )
    assert focused == {"tag": "INPUT", "type": "radio", "checked": True}
    page.screenshot(path=str(SHOTS / "card-stale-focus.png"), full_page=True)


def _follow(page: Page, api: ApiHarness, plan_id: str) -> None:
    """Open the plan's own page: it follows the plan's event stream from the start."""
    page.goto(f"{api.base}/plans/{plan_id}")
    page.locator("fieldset[data-gate] input[type=radio]").first.wait_for()


def _execute(api: ApiHarness, plan_id: str, token: str) -> None:
    with api.client() as alice:
        r = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert r.is_success, r.text


def test_the_status_line_never_goes_back_from_a_final_state(
    browser: Browser, api: ApiHarness
) -> None:
    """The approve reply says "sent to watch-…" (as a durable plan's does); force both orders:
    the event stream's result first, then the reply (it must not overwrite it); and the reply
    first, then the result (the result replaces it)."""
    page = _signed_in(browser, api)
    first = _card(page, MEETING.format("Race one"))
    second = _card(page, MEETING.format("Race two"))
    status = page.locator("p[role=status][id^=status-]")

    # the event stream first: the plan runs and finishes before the approve reply arrives
    def stream_first(route: Route) -> None:
        got = route.fetch()
        body = got.json()
        _execute(api, first, body["token"])
        time.sleep(2.0)  # the page hears execute_finished meanwhile
        route.fulfill(response=got, json={**body, "durable": {"workflow_id": "watch-late"}})

    _follow(page, api, first)
    page.route(f"**/v1/plans/{first}/gates/gate-A/approve", stream_first)
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("text=durable run watch-late", timeout=60_000)  # the reply was read
    page.wait_for_timeout(300)
    assert status.inner_text() == "finished: completed"
    assert status.get_attribute("data-state") == "final"
    page.screenshot(path=str(SHOTS / "card-status-stream-first.png"), full_page=True)

    # the approve reply first, then the result
    held: dict[str, str] = {}

    def reply_first(route: Route) -> None:
        got = route.fetch()
        body = got.json()
        held["token"] = body["token"]
        route.fulfill(response=got, json={**body, "durable": {"workflow_id": "watch-early"}})

    _follow(page, api, second)
    page.route(f"**/v1/plans/{second}/gates/gate-A/approve", reply_first)
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("text=sent to watch-early")
    assert status.get_attribute("data-state") == "progress"
    _execute(api, second, held["token"])
    page.wait_for_selector("text=finished: completed", timeout=60_000)
    assert status.get_attribute("data-state") == "final"
    # and the order itself: a later progress note never replaces a final one
    said = page.evaluate(
        f"[note('{second}', 'sent to watch-again'), note('{second}', 'cancelled: test')]"
    )
    assert said == [False, True] and status.inner_text() == "cancelled: test"


def test_a_reload_brings_back_the_open_question(browser: Browser, api: ApiHarness) -> None:
    page = _signed_in(browser, api)
    _ask(page, "schedule a meeting with Alice and Bob tomorrow afternoon")
    page.wait_for_selector("text=How long should the meeting be")
    page.reload()
    page.wait_for_selector("text=How long should the meeting be")
    assert "schedule a meeting with Alice and Bob" in page.inner_text("#log")
    page.screenshot(path=str(SHOTS / "card-reload-question.png"), full_page=True)
    _ask(page, "30 minutes, called Sync")
    page.wait_for_selector("section.card")
    assert "Title: Sync" in page.inner_text("section.card section.understood")
    page.reload()  # the question was answered: nothing comes back
    page.wait_for_selector("#text")
    page.wait_for_timeout(500)
    assert page.locator(".msg").count() == 0


def test_an_empty_shortlist_names_the_budget_and_offers_to_change_it(
    browser: Browser, shop_api: ApiHarness
) -> None:
    page = _signed_in(browser, shop_api)
    _ask(page, "buy 1 usb-c cable 2m, max 5 euros")
    page.wait_for_selector("section.card fieldset[data-gate] .nothing")
    gate = page.locator("section.card fieldset[data-gate]").first
    said = gate.locator(".nothing").inner_text()
    assert "within your budget of 5.00 EUR" in said, said
    assert gate.get_by_role("button", name="Approve").is_disabled()
    page.screenshot(path=str(SHOTS / "card-empty-shortlist.png"), full_page=True)
    gate.get_by_role("button", name="Change the budget").click()
    field = page.get_by_role("textbox", name="Budget")
    assert field.evaluate("f => f === document.activeElement")  # the same edit as the card's
    field.fill("20")
    page.get_by_role("button", name="Make a new plan").click()
    page.wait_for_selector("section.card >> nth=1")
    revised = page.locator("section.card").nth(1)
    assert "Budget: 20.00 EUR — changed by you" in revised.inner_text()
    revised.locator("fieldset[data-gate] input[type=radio]").first.wait_for()
    assert revised.locator("fieldset[data-gate] .nothing").count() == 0
    page.screenshot(path=str(SHOTS / "card-budget-revised.png"), full_page=True)


def test_a_meeting_with_no_free_time_says_so_and_offers_the_window(
    browser: Browser, api: ApiHarness
) -> None:
    day = datetime.now(UTC) + timedelta(days=1)
    for d in (day - timedelta(days=1), day, day + timedelta(days=1)):
        api.radicale.add_event(
            BOB, f"full-{d:%Y%m%d}", f"{d:%Y%m%d}T000000Z", f"{d:%Y%m%d}T235900Z", "away"
        )
    page = _signed_in(browser, api)
    _ask(page, MEETING.format("Nowhere"))
    page.wait_for_selector("section.card fieldset[data-gate] .nothing")
    gate = page.locator("section.card fieldset[data-gate]").first
    assert "There is no free 30-minute time for everyone" in gate.inner_text()
    assert gate.get_by_role("button", name="Approve").is_disabled()
    for name in ("Change the window's start", "Change the window's end", "Change the duration"):
        assert gate.get_by_role("button", name=name).count() == 1
    gate.get_by_role("button", name="Change the duration").click()
    assert page.get_by_label("Duration (minutes)").evaluate("f => f === document.activeElement")
    page.screenshot(path=str(SHOTS / "card-no-free-time.png"), full_page=True)
