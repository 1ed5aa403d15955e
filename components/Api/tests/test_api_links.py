"""Links a mail scanner cannot press (issue 26 §5). Scanners and link previews fetch every link in a
mail. The one-time login link opens a page whose button does the act (POST): fetching it any
number of times spends nothing and signs nobody in; the person's POST then signs in, once. The
card a watcher's mail links to needs a session and decides nothing on GET."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from countersign.api import UserStore
from countersign.api.testing import ALICE, ApiHarness, meeting_body

pytestmark = pytest.mark.slow

SCANNERS = [
    {"User-Agent": "Mozilla/5.0 (compatible; SafeLinks)"},
    {"User-Agent": "Slackbot-LinkExpanding 1.0"},
    {"User-Agent": "curl/8", "Accept": "*/*"},
]

#: what fetches a mailed link before (or instead of) the person: scanners and link previewers
MANY_SCANNERS = [
    *SCANNERS,
    {
        "User-Agent": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like "
        "Gecko) Chrome/120.0 Safari/537.36 Mimecast"
    },
    {"User-Agent": "Proofpoint URL Defense/1.0", "Accept": "text/html,*/*;q=0.8"},
    {"User-Agent": "Barracuda Sentinel (EE)"},
    {"User-Agent": "Mozilla/5.0 (compatible; Google-Safety; +http://www.google.com/bot.html)"},
    {"User-Agent": "Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0; Pro)"},
    {"User-Agent": "TelegramBot (like TwitterBot)"},
    {"User-Agent": "WhatsApp/2.23.20.0", "Range": "bytes=0-524287"},
]


def _link(api: ApiHarness) -> str:
    return UserStore(api.db, clock=lambda: datetime.now(UTC)).login_link(ALICE)


def test_fetching_a_login_link_spends_nothing_and_the_button_signs_in_once(
    api: ApiHarness,
) -> None:
    link = _link(api)
    for headers in SCANNERS:
        for method in ("GET", "HEAD"):
            r = httpx.request(method, f"{api.base}/login", params={"token": link}, headers=headers)
            assert r.status_code == (200 if method == "GET" else 405), (method, r.text)
            assert "set-cookie" not in r.headers, "a fetch signs nobody in"
            if method == "GET":
                assert r.headers["cache-control"] == "no-store"
    page = httpx.get(f"{api.base}/login", params={"token": link}).text
    assert "<form method='post' action='/login'>" in page and "Sign in" in page
    with httpx.Client(base_url=api.base, timeout=30) as browser:
        r = browser.post("/login", data={"token": link})
        assert r.status_code == 303 and r.headers["location"] == "/", r.text
        assert browser.get("/v1/me").json()["user_id"] == ALICE
    # the act happened once: a second press is refused
    r = httpx.post(f"{api.base}/login", data={"token": link})
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"", {"content-type": "application/x-www-form-urlencoded"}),
        (b"token=short", {"content-type": "application/x-www-form-urlencoded"}),
        (b"token=" + b"x" * 2000, {"content-type": "application/x-www-form-urlencoded"}),
        (b"\xff\xfe", {"content-type": "application/x-www-form-urlencoded"}),
    ],
)
def test_a_bad_sign_in_form_is_refused_clearly(
    api: ApiHarness, body: bytes, headers: dict[str, str]
) -> None:
    r = httpx.post(f"{api.base}/login", content=body, headers=headers)
    assert r.status_code == 401 and "sign-in form" in r.json()["detail"], r.text


def test_a_sign_in_posted_from_another_site_is_refused(api: ApiHarness) -> None:
    link = _link(api)
    r = httpx.post(
        f"{api.base}/login", data={"token": link}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert r.status_code == 401 and "set-cookie" not in r.headers
    # the link is still good for the person
    assert httpx.post(f"{api.base}/login", data={"token": link}).status_code == 303


def test_the_card_link_decides_nothing_on_get(api: ApiHarness) -> None:
    with api.client() as c:
        plan_id = c.post(
            "/v1/intents",
            json={
                "intent": {
                    "intent": "schedule_meeting",
                    "entities": {
                        "participants": [ALICE],
                        "duration_min": 30,
                        "title": "Scanned",
                        "window_start": "2030-01-07T13:00:00Z",
                        "window_end": "2030-01-07T17:00:00Z",
                    },
                }
            },
        ).json()["plan_id"]

    def events() -> int:
        with api.db.tx() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM plan_events WHERE plan_id = :p"), {"p": plan_id}
                ).scalar_one()
            )

    before = events()
    for headers in SCANNERS:
        r = httpx.get(f"{api.base}/plans/{plan_id}", headers=headers)
        assert r.status_code == 401 and "Not signed in" in r.text
    with httpx.Client(base_url=api.base, timeout=30) as browser:
        browser.post("/login", data={"token": _link(api)})
        for _ in range(3):
            assert browser.get(f"/plans/{plan_id}").status_code == 200
    assert events() == before, "opening the card decided nothing"


def _plan_state(c: httpx.Client, plan_id: str) -> dict[str, Any]:
    """What the API says of a plan: its view, its event stream and its audit rows (read through
    the API, not the tables)."""
    view = c.get(f"/v1/plans/{plan_id}")
    assert view.status_code == 200, view.text
    with c.stream("GET", f"/v1/plans/{plan_id}/events", params={"follow": "false"}) as r:
        assert r.status_code == 200
        events = [line for line in r.iter_lines() if line.startswith("event:")]
    audit = c.get("/v1/audit", params={"plan_id": plan_id})
    assert audit.status_code == 200, audit.text
    return {"view": view.json(), "events": events, "audit": audit.json()["items"]}


def test_a_hundred_scanner_fetches_of_both_links_decide_and_spend_nothing(
    api: ApiHarness,
) -> None:
    """100 GETs (and 20 HEADs) of a mailed login link and 100 of the card link of a plan waiting
    at its gate, by an anonymous client that keeps cookies and follows redirects, with scanner and
    previewer user agents: no session is made, the plan is still at its gate with its gate
    undecided, its events and audit rows are as they were, and the login link still signs the
    person in once when its button POSTs it."""
    with api.client() as c:
        made = c.post("/v1/intents", json=meeting_body("Scanned a hundred times", day=4))
        assert made.status_code == 201, made.text
        plan_id = made.json()["plan_id"]
        before = _plan_state(c, plan_id)
    gate = before["view"]["gates"][0]
    assert gate["gate_id"] == "gate-A" and before["view"]["status"] == "previewed", before["view"]
    link = _link(api)
    urls = [(f"/login?token={link}", 200), (f"/plans/{plan_id}", 401)]
    seen: dict[str, int] = {}
    with httpx.Client(base_url=api.base, follow_redirects=True, timeout=30) as scanner:
        for i in range(100):
            for url, status in urls:
                r = scanner.get(url, headers=MANY_SCANNERS[i % len(MANY_SCANNERS)])
                assert r.status_code == status, (url, r.status_code, r.text[:200])
                assert "set-cookie" not in r.headers, url
                seen[url] = seen.get(url, 0) + 1
                if i % 5 == 0:
                    h = scanner.head(url, headers=MANY_SCANNERS[i % len(MANY_SCANNERS)])
                    assert h.status_code in (401, 405), (url, h.status_code)
        assert not scanner.cookies, "a fetch signed the scanner in"
        assert scanner.get("/v1/me").status_code == 401
    assert set(seen.values()) == {100}
    with api.client() as c:
        after = _plan_state(c, plan_id)
    assert after == before, "a fetch of the card link changed the plan, its events or its audit"
    assert after["view"]["status"] == "previewed"
    # the link was spent by none of the fetches: the person's button signs in, once
    with httpx.Client(base_url=api.base, timeout=30) as browser:
        r = browser.post("/login", data={"token": link})
        assert r.status_code == 303, r.text
        assert browser.get("/v1/me").json()["user_id"] == ALICE
        assert browser.get(f"/plans/{plan_id}").status_code == 200
    assert httpx.post(f"{api.base}/login", data={"token": link}).status_code == 401
