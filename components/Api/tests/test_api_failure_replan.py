"""The failure taxonomy through the served API (issue 26 §3): a step failure whose class the
policy re-plans (a conflict: the sandbox shop answers the cart write 409; a stale world: Bob's
calendar changed) makes a new revision, visible in ``GET
/v1/plans/{id}/revisions`` with the failure as its reason; the class and the action are on the
plan's event stream (``step_failure``); an approval of the failed plan is refused on the revision,
which is approved on its own and writes once. A class the policy asks about (401 from CalDAV,
through the fault proxy in front of Radicale) makes none. (A 409 to CalDAV's PUT with
If-None-Match is the natural key's "already there": deduplicated, not a failure.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from countersign.api import UserStore
from countersign.api.testing import ALICE, BOB, ApiHarness, chromium, harness, meeting_body, sign_in
from countersign.n8n import N8nHandle
from countersign.registry import Registry
from countersign.sandbox.caldav import Radicale
from countersign.sandbox.faultproxy import FaultProxy, serve_fault_proxy
from countersign.sandbox.http import Served
from countersign.sandbox.mailbox import SmtpSink
from countersign.sandbox.shop import ShopSandbox, serve_shop
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

pytestmark = pytest.mark.slow

SHOTS = Path(__file__).resolve().parents[3] / "artifacts" / "screenshots"


PURCHASE = {
    "intent": {
        "intent": "purchase_item",
        "entities": {"query": "usb-c cable 2m", "max_price": "15.00", "quantity": 1},
    }
}


@pytest.fixture
def shopped(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
) -> Iterator[tuple[ApiHarness, Served[ShopSandbox]]]:
    """The API over the real stack with a sandbox shop (its fault switch armed by the test)."""
    shop = serve_shop()
    try:
        with harness(
            n8n,
            db,
            registry,
            keyring,
            radicale,
            smtp_server,
            api_smtp_credential,
            settings={"shop_base_url": shop.url},
        ) as h:
            yield h, shop
    finally:
        shop.shutdown()


@pytest.fixture
def proxied(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
) -> Iterator[tuple[ApiHarness, Served[FaultProxy]]]:
    """The API over the real stack, its CalDAV connector pointed at a fault proxy before
    Radicale."""
    proxy = serve_fault_proxy(radicale.base_url)
    try:
        with harness(
            n8n,
            db,
            registry,
            keyring,
            radicale,
            smtp_server,
            api_smtp_credential,
            settings={"caldav_base_url": proxy.url},
        ) as h:
            yield h, proxy
    finally:
        proxy.shutdown()


def _slot(preview: dict[str, Any]) -> dict[str, str]:
    slot = preview["normalized"]["steps"]["3"]["slots"][0]
    start = datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
    end = (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
    return {"start": slot["start"], "end": end}


def _events(api: ApiHarness, plan_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with httpx.stream(
        "GET",
        f"{api.base}/v1/plans/{plan_id}/events",
        params={"follow": "false"},
        headers={"Authorization": f"Bearer {api.keys[ALICE]}"},
        timeout=30,
    ) as r:
        assert r.status_code == 200
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                out.append({"event": kind, **json.loads(line[5:].strip())})
    return out


def _approve(c: httpx.Client, plan_id: str, slot: Any) -> str:
    r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": slot})
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def _revision(c: httpx.Client, plan_id: str) -> dict[str, Any]:
    tree = c.get(f"/v1/plans/{plan_id}/revisions")
    assert tree.status_code == 200, tree.text
    root = tree.json()["root"]
    assert root["plan_id"] == plan_id
    (child,) = root["revisions"]
    return dict(child)


def _refused_then_written(
    api: ApiHarness, c: httpx.Client, old: str, child: dict[str, Any]
) -> None:
    """An approval of the old plan is refused on the revision; its own approval writes once."""
    new = child["plan_id"]
    slot = _option(c, new)
    old_token = _approve(c, old, slot)
    r = c.post(f"/v1/plans/{new}/execute", json={"tokens": {"gate-A": old_token}})
    assert r.status_code in (403, 409, 422), r.text
    assert r.json()["code"].startswith(("approval_", "token_")), r.text
    assert api.events_in_calendar() == []
    done = c.post(f"/v1/plans/{new}/execute", json={"tokens": {"gate-A": _approve(c, new, slot)}})
    assert done.status_code == 202 and done.json()["status"] == "completed", done.text
    assert len(api.events_in_calendar()) == 1


def _option(c: httpx.Client, plan_id: str) -> Any:
    return c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"][0]["value"]


def test_a_conflict_from_the_shop_replans_and_the_old_approval_is_refused(
    shopped: tuple[ApiHarness, Served[ShopSandbox]],
) -> None:
    """The shop answers the cart write 409: a conflict, not sent again; the plan is re-planned
    as a revision whose reason is the failure; the old plan's approval is refused on it."""
    api, shop = shopped
    with api.client() as c:
        made = c.post("/v1/intents", json=PURCHASE)
        assert made.status_code == 201, made.text
        old = made.json()["plan_id"]
        token = _approve(c, old, _option(c, old))
        fault = {"status": 409, "method": "POST", "path": "/cart"}
        r = httpx.post(f"{shop.url}/_sandbox/faults", json={"faults": [fault]}, timeout=5)
        assert r.status_code == 200
        failed = c.post(f"/v1/plans/{old}/execute", json={"tokens": {"gate-A": token}})
        assert failed.status_code == 202 and failed.json()["status"] == "failed", failed.text
        said = failed.json()["failure"]  # the answer says it too, not only the event stream
        assert said["class"] == "conflict" and said["action"] == "replan", said
        assert shop.faults.count("POST", "/cart") == 1, "a conflict is not sent again"
        assert shop.state.cart == {}
        child = _revision(c, old)
        assert child["reason"] == "failure" and child["failure"]["class"] == "conflict"
        assert child["failure"]["reason"] and "{" not in child["failure"]["reason"]
        seen = _events(api, old)
        (failure,) = [e for e in seen if e["event"] == "step_failure"]
        assert failure["status"] == "replan" and failure["details"]["class"] == "conflict"
        revised = [e for e in seen if e["event"] == "plan_revised"]
        assert revised and revised[0]["details"]["revised_by"] == child["plan_id"]
        new = child["plan_id"]
        choice = _option(c, new)
        stale_token = _approve(c, old, choice)
        r = c.post(f"/v1/plans/{new}/execute", json={"tokens": {"gate-A": stale_token}})
        assert r.status_code in (403, 409, 422), r.text
        assert r.json()["code"].startswith(("approval_", "token_")), r.text
        assert shop.state.cart == {}
        done = c.post(
            f"/v1/plans/{new}/execute", json={"tokens": {"gate-A": _approve(c, new, choice)}}
        )
        assert done.status_code == 202 and done.json()["status"] == "waiting", done.text
        assert len(shop.state.cart) == 1 and shop.faults.count("POST", "/cart") == 2


def test_a_stale_world_replans(api: ApiHarness) -> None:
    with api.client() as c:
        body = c.post("/v1/intents", json=meeting_body("Stale again", day=5)).json()
        old = body["plan_id"]
        slot = _slot(body["preview"])
        token = _approve(c, old, slot)
        start, end = (
            datetime.fromisoformat(slot[k].replace("Z", "+00:00")).strftime("%Y%m%dT%H%M%SZ")
            for k in ("start", "end")
        )
        api.radicale.add_event(BOB, "late-busy-2", start, end, "dentist")
        try:
            r = c.post(f"/v1/plans/{old}/execute", json={"tokens": {"gate-A": token}})
            assert r.status_code == 409 and r.json()["code"] == "stale_world", r.text
            child = _revision(c, old)
            assert child["reason"] == "failure" and child["failure"]["class"] == "stale"
            new_slot = _option(c, child["plan_id"])
            assert new_slot["start"] != slot["start"], "the revision read the world afresh"
            _refused_then_written(api, c, old, child)
        finally:
            for name in api.radicale.events(BOB):
                httpx.delete(api.radicale.calendar_url(BOB) + name, timeout=5)


def test_an_auth_refusal_asks_and_makes_no_revision(
    proxied: tuple[ApiHarness, Served[FaultProxy]],
) -> None:
    api, proxy = proxied
    with api.client() as c:
        body = c.post("/v1/intents", json=meeting_body("Auth", day=6)).json()
        old = body["plan_id"]
        token = _approve(c, old, _slot(body["preview"]))
        httpx.post(
            f"{proxy.url}/_sandbox/faults",
            json={"faults": [{"status": 401, "method": "PUT"}]},
            timeout=5,
        )
        failed = c.post(f"/v1/plans/{old}/execute", json={"tokens": {"gate-A": token}})
        assert failed.status_code == 202 and failed.json()["status"] == "failed", failed.text
        tree = c.get(f"/v1/plans/{old}/revisions").json()
        assert tree["root"]["revisions"] == []
        (failure,) = [e for e in _events(api, old) if e["event"] == "step_failure"]
        assert failure["status"] == "ask" and failure["details"]["class"] == "auth"


def test_the_card_says_the_class_and_the_action_in_words(
    shopped: tuple[ApiHarness, Served[ShopSandbox]],
) -> None:
    """A plan whose cart write was refused 409 and re-planned, opened at its URL in a real
    browser: the card says what failed and what follows in words (no JSON) and links to the new
    plan; its revision list says why the revision exists."""
    api, shop = shopped
    with api.client() as c:
        old = c.post("/v1/intents", json=PURCHASE).json()["plan_id"]
        token = _approve(c, old, _option(c, old))
        fault = {"status": 409, "method": "POST", "path": "/cart"}
        httpx.post(f"{shop.url}/_sandbox/faults", json={"faults": [fault]}, timeout=5)
        failed = c.post(f"/v1/plans/{old}/execute", json={"tokens": {"gate-A": token}})
        assert failed.json()["status"] == "failed", failed.text
        new = _revision(c, old)["plan_id"]
    link = UserStore(api.db, clock=lambda: datetime.now(UTC)).login_link(ALICE)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        sign_in(page, f"{api.base}/login?token={link}")
        page.goto(f"{api.base}/plans/{old}")
        card = page.locator(f'section.card[data-plan="{old}"]')
        said = card.locator("p.failure")
        said.wait_for(timeout=20_000)
        text = said.inner_text()
        assert "Step 4 failed: it conflicts with something already there" in text, text
        assert "planned again" in text and "the provider answered 409" in text, text
        assert "{" not in text and "class" not in text
        again = card.locator("p.replanned a")
        again.wait_for(timeout=20_000)
        assert again.get_attribute("href") == f"/plans/{new}"
        card.locator("details.revisions summary").click()
        assert "planned again: it conflicts" in card.locator("details.revisions").inner_text()
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "card-failure-replanned.png"), full_page=True)
