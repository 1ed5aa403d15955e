"""Links a mail scanner cannot press (issue 26 §5). Scanners and link previews fetch every link in a
mail. The one-time login link opens a page whose button does the act (POST): fetching it any
number of times spends nothing and signs nobody in; the person's POST then signs in, once. The
card a watcher's mail links to needs a session and decides nothing on GET."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import text

from countersign.api import UserStore
from countersign.api.testing import ALICE, ApiHarness

pytestmark = pytest.mark.slow

SCANNERS = [
    {"User-Agent": "Mozilla/5.0 (compatible; SafeLinks)"},
    {"User-Agent": "Slackbot-LinkExpanding 1.0"},
    {"User-Agent": "curl/8", "Accept": "*/*"},
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
