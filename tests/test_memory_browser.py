"""The preferences page and the card's evidence in a real browser (Playwright, Debian's
chromium): set a preference and grant a consent on /memory, ask in the chat without a duration,
see the card list the preference it used, drop it and re-plan — the assistant now asks for the
duration; forget a subject from the page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from playwright.sync_api import Browser, Page

from countersign.api import UserStore
from countersign.api.testing import ALICE, ApiHarness, chromium, sign_in

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


def _signed_in(browser: Browser, api: ApiHarness, path: str) -> Page:
    link = UserStore(api.db, clock=lambda: datetime.now(UTC)).login_link(ALICE)
    page = browser.new_page()
    sign_in(page, f"{api.base}/login?token={link}")
    page.wait_for_selector("#text")
    page.goto(f"{api.base}{path}")
    return page


def test_preferences_page_and_dropping_evidence(browser: Browser, api: ApiHarness) -> None:
    page = _signed_in(browser, api, "/memory")
    page.fill("#pref-key", "default_meeting_length")
    page.fill("#pref-value", "45")
    page.get_by_role("button", name="Save preference").click()
    page.wait_for_selector("text=default_meeting_length saved")
    page.fill("#consent-purpose", "calendar_insights")
    page.get_by_role("button", name="Grant").click()
    page.wait_for_selector("text=calendar_insights: granted")
    assert page.locator("#consent-calendar_insights").is_checked()
    with api.client() as alice:
        assert alice.get("/v1/memory/prefs").json() == {
            "prefs": {"default_meeting_length": 45},
            "consent": {"calendar_insights": True},
        }
    # revoke by unticking
    page.locator("#consent-calendar_insights").uncheck()
    page.wait_for_selector("text=calendar_insights: revoked")

    page.goto(f"{api.base}/")
    page.fill("#text", "schedule a meeting with Alice and Bob tomorrow afternoon called Sync")
    page.press("#text", "Enter")
    page.wait_for_selector("section.card fieldset.evidence")
    # each item is a sentence a person reads (Evidence.why), never JSON (issue 25)
    shown = page.locator("fieldset.evidence").inner_text()
    assert "{" not in shown and "pref:" not in shown, shown
    labels = page.locator("fieldset.evidence label").all_inner_texts()
    assert len(labels) == len(set(labels)) and all(t.strip() for t in labels), labels
    page.get_by_label("You set default meeting length to 45 (your preference, set").check()
    page.get_by_role("button", name="Drop selected and re-plan").click()
    page.wait_for_selector("text=How long should the meeting be")

    page.goto(f"{api.base}/memory")
    page.fill("#subject", "default_meeting_length")
    page.get_by_role("button", name="Forget it").click()
    page.wait_for_selector("text=forgotten:")
    with api.client() as alice:
        assert alice.get("/v1/memory/prefs").json()["prefs"] == {}
