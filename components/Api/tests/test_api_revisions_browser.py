"""The card lists the revisions its plan belongs to (issue 26 §4): a revision's card links back
to the plan it revises and to its siblings, marks itself, and another revision opens from the
link. Playwright with Debian's chromium."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser

from countersign.api import UserStore
from countersign.api.testing import ALICE, ApiHarness, chromium, meeting_body, sign_in

pytestmark = pytest.mark.slow

SHOTS = Path(__file__).resolve().parents[3] / "artifacts" / "screenshots"


def _revise(c: httpx.Client, plan_id: str, **entities: Any) -> str:
    r = c.post(f"/v1/plans/{plan_id}/revise", json={"entities": entities})
    assert r.status_code == 201, r.text
    return str(r.json()["plan_id"])


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


def test_a_revisions_card_links_its_tree(browser: Browser, api: ApiHarness) -> None:
    with api.client() as c:
        root = c.post("/v1/intents", json=meeting_body("Tree", day=3)).json()["plan_id"]
        child = _revise(c, root, duration_min=45)
        sibling = _revise(c, root, duration_min=60)
    page = browser.new_page()
    link = UserStore(api.db, clock=lambda: datetime.now(UTC)).login_link(ALICE)
    sign_in(page, f"{api.base}/login?token={link}")
    page.wait_for_selector("#text")
    page.goto(f"{api.base}/plans/{child}")
    page.wait_for_selector("details.revisions")
    page.click("details.revisions summary")
    tree = page.locator("details.revisions")
    assert tree.locator("strong[aria-current=page]").inner_text().startswith("changed duration min")
    hrefs = [a.get_attribute("href") for a in tree.locator("a").all()]
    assert hrefs == [f"/plans/{root}", f"/plans/{sibling}"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "card-revisions.png"), full_page=True)
    tree.locator("a").first.click()
    page.wait_for_url(f"**/plans/{root}")
    page.wait_for_selector("details.revisions")
    assert (page.locator("details.revisions strong").text_content() or "").startswith("first plan")
