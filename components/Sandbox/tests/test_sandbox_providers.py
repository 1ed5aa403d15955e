"""Each sandbox provider over its real protocol (HTTP, SMTP, CalDAV): the contract the registry's
connectors bind to, the sandbox label on every answer, and the demo busy time."""

from __future__ import annotations

import itertools
import smtplib
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

import httpx
import icalendar
import pytest

from countersign.sandbox import (
    DEMO_PEOPLE,
    Radicale,
    ShopSandbox,
    SmtpSink,
    VisaSandbox,
    demo_busy,
    free_port,
    seed_demo_calendars,
    serve_mailbox,
    serve_radicale,
    serve_shop,
    serve_smtp,
    serve_visa,
)

MONDAY = date(2026, 11, 23)


# ---- demo busy time (pure) ---------------------------------------------------------------------
def test_demo_busy_is_deterministic_and_plausible() -> None:
    blocks = demo_busy(MONDAY)
    assert blocks == demo_busy(MONDAY)  # a function of (seed, first day) only
    assert blocks != demo_busy(MONDAY + timedelta(days=7))
    assert blocks != demo_busy(MONDAY, seed="another seed")
    assert {b.person for b in blocks} == set(DEMO_PEOPLE)  # everyone is busy some time
    for b in blocks:
        assert b.start.tzinfo is UTC and b.start < b.end
        assert b.start.weekday() < 5  # weekends stay free
        assert b.start.hour >= 9 and (b.end.hour, b.end.minute) <= (18, 0)
        assert MONDAY <= b.start.date() < MONDAY + timedelta(days=7)  # the coming (5 working) days
    for person in DEMO_PEOPLE:
        mine = sorted((b for b in blocks if b.person == person), key=lambda b: b.start)
        assert all(a.end <= b.start for a, b in itertools.pairwise(mine)), person
        assert len({b.uid for b in mine}) == len(mine)


# ---- CalDAV --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def caldav(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    with serve_radicale(tmp_path_factory.mktemp("sandbox-caldav")) as server:
        yield server


def _busy_over_caldav(server: Radicale, person: str) -> set[tuple[str, datetime, datetime]]:
    r = httpx.get(server.calendar_url(person), timeout=10)
    assert r.status_code == 200, r.text[:200]
    cal = icalendar.Calendar.from_ical(r.text)
    return {
        (str(ev["UID"]), ev.decoded("DTSTART"), ev.decoded("DTEND")) for ev in cal.walk("VEVENT")
    }


@pytest.mark.slow
def test_demo_calendars_hold_the_demo_busy_time_over_caldav(caldav: Radicale) -> None:
    put = seed_demo_calendars(caldav, MONDAY)
    assert put == demo_busy(MONDAY)
    seed_demo_calendars(caldav, MONDAY)  # idempotent: the same UIDs are put again
    for person in DEMO_PEOPLE:
        want = {(b.uid, b.start, b.end) for b in put if b.person == person}
        assert _busy_over_caldav(caldav, person) == want
        assert len(caldav.events(person)) == len(want)
    # the calendar says it is a sandbox (its display name)
    r = httpx.request(
        "PROPFIND", caldav.calendar_url(DEMO_PEOPLE[0]), headers={"Depth": "0"}, timeout=10
    )
    assert r.status_code == 207 and "Countersign sandbox" in r.text


# ---- SMTP + mailbox ------------------------------------------------------------------------------
def _send(sink: SmtpSink, to: str, subject: str, body: str) -> None:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "countersign@example.com", to, subject
    msg.set_content(body)
    with smtplib.SMTP(sink.host, sink.port, timeout=10) as s:
        s.send_message(msg)


@pytest.mark.slow
def test_mailbox_lists_received_mail_and_keeps_it_across_a_restart(tmp_path: Path) -> None:
    with (
        serve_smtp(SmtpSink(host="127.0.0.1", port=free_port(), folder=tmp_path)) as sink,
        serve_mailbox(sink) as url,
    ):
        _send(sink, "bob@example.com", "Sync <b>Tuesday</b>", "See you at 10.")
        _send(sink, "carol@example.com", "Lunch", "Noon?")
        assert [str(m["To"]) for m in sink.to("bob@example.com")] == ["bob@example.com"]
        box = httpx.get(url + "/messages", timeout=10).json()
        assert box["sandbox"] is True and "not a real mail server" in box["notice"]
        assert box["count"] == 2
        assert [m["subject"] for m in box["messages"]] == ["Lunch", "Sync <b>Tuesday</b>"]
        assert box["messages"][1]["body"].strip() == "See you at 10."
        only = httpx.get(url + "/messages", params={"to": "carol@example.com"}, timeout=10).json()
        assert [m["n"] for m in only["messages"]] == [2]
        one = httpx.get(url + "/messages/1", timeout=10).json()
        assert one["to"] == "bob@example.com" and one["sandbox"] is True
        assert httpx.get(url + "/messages/9", timeout=10).status_code == 404
        page = httpx.get(url + "/", timeout=10)
        assert page.headers["content-type"].startswith("text/html")
        assert "Countersign sandbox — not a real mail server" in page.text
        assert "Sync &lt;b&gt;Tuesday&lt;/b&gt;" in page.text and "<b>Tuesday" not in page.text
        assert httpx.post(url + "/messages", timeout=10).status_code == 405
    again = SmtpSink(host="127.0.0.1", port=free_port(), folder=tmp_path)
    assert [str(m["Subject"]) for m in again.messages] == ["Sync <b>Tuesday</b>", "Lunch"]


# ---- shop ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_shop_contract_over_http() -> None:
    with serve_shop() as shop, httpx.Client(base_url=shop.base_url, timeout=10) as c:
        found = c.get("/search", params={"q": "usb-c cable"}).json()
        assert found["sandbox"] is True and "not a real shop" in found["notice"]
        assert found["offers"][0] == {
            "item": "cable-a",
            "title": "usb-c cable (cable-a)",
            "price": "9.90",
        }
        line = c.post(
            "/cart", json={"item": "cable-b", "quantity": 2}, headers={"Idempotency-Key": "k1"}
        )
        assert line.status_code == 200
        assert {
            k: line.json()[k] for k in ("id", "item", "quantity", "unit_price", "cart_total")
        } == {
            "id": "line-1",
            "item": "cable-b",
            "quantity": 2,
            "unit_price": "12.50",
            "cart_total": "25.00",
        }
        # a replayed key: the first answer, nothing added
        again = c.post(
            "/cart", json={"item": "cable-b", "quantity": 2}, headers={"Idempotency-Key": "k1"}
        )
        assert again.json()["id"] == "line-1" and len(shop.cart) == 1
        assert c.post("/cart", json={"item": "nope", "quantity": 1}).status_code == 404
        assert c.get("/cart").json()["total"] == "25.00"
        # the price a test changes, over HTTP (a shop in another process)
        assert c.put("/_sandbox/prices/cable-b", json={"price": "30"}).json()["price"] == "30.00"
        assert c.put("/_sandbox/prices/cable-b", json={"price": "x"}).status_code == 422
        refused = c.post(
            "/checkout", json={"max_total": "50.00"}, headers={"Idempotency-Key": "k2"}
        )
        assert refused.status_code == 409 and refused.json()["total"] == "60.00"
        order = c.post("/checkout", json={"max_total": "60.00"}, headers={"Idempotency-Key": "k3"})
        assert order.status_code == 200 and order.json()["id"] == "order-1"
        assert order.json()["total"] == "60.00" and shop.cart == {}
        assert c.post("/orders/order-1/cancel").json()["cancelled"] is True
        assert c.post("/orders/order-9/cancel").status_code == 404
        line2 = c.post("/cart", json={"item": "cable-a", "quantity": 1}).json()
        assert c.delete(f"/cart/{line2['id']}").json()["cart_total"] == "0.00"
        page = c.get("/")
        assert "Countersign sandbox — not a real shop" in page.text and "cable-b" in page.text
        assert c.get("/healthz").json() == {
            "ok": True,
            "service": "shop",
            "sandbox": True,
            "notice": page.text.split("<header class='banner'>")[1].split("</header>")[0],
        }
    assert [a[:2] for a in shop.arrivals][:2] == [("GET", "/search"), ("POST", "/cart")]


@pytest.mark.slow
def test_shop_state_changes_between_gates_are_seen_in_process() -> None:
    shop = ShopSandbox()
    with serve_shop(shop) as same:
        assert same is shop
        shop.prices["cable-a"] = "14.00"  # what tests do to exercise the staleness check
        offers = httpx.get(shop.base_url + "/search", params={"q": "x"}, timeout=10).json()
        assert offers["offers"][0]["price"] == "14.00"


# ---- visa ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_visa_contract_slots_appear_hold_release_book_cancel() -> None:
    with (
        serve_visa(VisaSandbox(appear_after=3)) as visa,
        httpx.Client(base_url=visa.url, timeout=10) as c,
    ):
        window = {"from": "2027-03-01T00:00:00Z", "to": "2027-03-31T00:00:00Z"}
        seen = [c.get("/consulates/lisbon/slots", params=window).json() for _ in range(3)]
        assert [s["slots"] for s in seen[:2]] == [[], []] and seen[0]["sandbox"] is True
        assert seen[2]["slots"] == [{"id": "slot-1", "at": "2027-03-14T09:00:00Z"}]
        assert visa.windows == [("2027-03-01T00:00:00Z", "2027-03-31T00:00:00Z")] * 3
        # hold: the slot is left out of searches until released
        held = c.post("/consulates/lisbon/slots/slot-1/hold")
        assert held.status_code == 201 and held.json()["slot"] == "slot-1"
        assert c.post("/consulates/lisbon/slots/slot-1/hold").status_code == 409
        assert c.get("/consulates/lisbon/slots", params=window).json()["slots"] == []
        assert c.delete("/consulates/lisbon/slots/slot-1/hold").json()["released"] is True
        assert c.get("/consulates/lisbon/slots", params=window).json()["slots"] != []
        # book (idempotent by key), then cancel
        slot = {"id": "slot-1", "at": "2027-03-14T09:00:00Z"}
        first = c.post(
            "/consulates/lisbon/bookings", json={"slot": slot}, headers={"Idempotency-Key": "b1"}
        )
        again = c.post(
            "/consulates/lisbon/bookings", json={"slot": slot}, headers={"Idempotency-Key": "b1"}
        )
        assert first.status_code == again.status_code == 201
        assert first.json()["id"] == again.json()["id"] == "booking-1"
        assert len(visa.bookings) == 1 and visa.booking_posts == 2
        assert c.delete("/consulates/lisbon/bookings/booking-1").json()["cancelled"] is True
        assert visa.cancelled == ["booking-1"]
        assert "not a real consulate appointment service" in c.get("/").text
        assert c.get("/nowhere").status_code == 404


@pytest.mark.slow
def test_visa_slots_appear_a_set_time_after_each_watch_first_asks() -> None:
    """The standalone sandbox's slot is relative to the watcher, not to the service: long after
    the service started, a new watch (consulate + window) finds nothing at first and its slot
    ``appear_after_s`` later; another window has its own clock; booking a watch's slot ends it,
    and the same window asked again waits again for the next slot of the day."""
    now = [100.0]
    visa = VisaSandbox(
        appear_after_s=30, appear_after_watch_searches=3, fixed_slot=False, clock=lambda: now[0]
    )
    with serve_visa(visa), httpx.Client(base_url=visa.url, timeout=10) as c:

        def slots(consulate: str, window: dict[str, str]) -> list[dict[str, str]]:
            found = c.get(f"/consulates/{consulate}/slots", params=window).json()["slots"]
            return list(found)

        december = {"from": "2026-12-01", "to": "2026-12-31"}
        now[0] += 3600  # the service has run for an hour: no watcher has asked yet
        assert slots("porto", december) == []  # a watcher's first poll
        now[0] += 29
        assert slots("porto", december) == []
        assert c.get("/_sandbox/state").json()["appeared"] is False
        march = {"from": "2027-03-01", "to": "2027-03-31"}
        assert slots("porto", march) == []  # another window: its own clock starts now
        now[0] += 1  # 30 s after porto/december first asked
        first = {"id": "porto-2026-12-01-0900", "at": "2026-12-01T09:00:00Z"}
        assert slots("porto", december) == [first]
        assert slots("porto", march) == []
        assert slots("lisbon", december) == []  # another consulate: its own clock too
        # booking it ends that watch: the same window asked again waits again
        booked = c.post("/consulates/porto/bookings", json={"slot": first})
        assert booked.status_code == 201
        assert slots("porto", december) == []
        now[0] += 30
        assert slots("porto", december) == [
            {"id": "porto-2026-12-01-0930", "at": "2026-12-01T09:30:00Z"}
        ]
        assert slots("porto", march) == [
            {"id": "porto-2027-03-01-0900", "at": "2027-03-01T09:00:00Z"}
        ]
    # or at a watch's own n-th search, whatever the other watches did
    counted = VisaSandbox(appear_after_watch_searches=3, fixed_slot=False, clock=lambda: 0.0)
    with serve_visa(counted), httpx.Client(base_url=counted.url, timeout=10) as c:
        window = {"from": "2027-05-01", "to": "2027-05-31"}
        for _ in range(5):
            assert c.get("/consulates/rome/slots", params={"from": "2027-04-01"}).json() is not None
        assert [
            len(c.get("/consulates/rome/slots", params=window).json()["slots"]) for _ in "abc"
        ] == [0, 0, 1]
    forced = VisaSandbox()
    with serve_visa(forced), httpx.Client(base_url=forced.url, timeout=10) as c:
        assert c.get("/consulates/porto/slots").json()["slots"] == []
        assert c.post("/_sandbox/slots").json()["appeared"] is True
        assert c.get("/consulates/porto/slots").json()["slots"] != []


@pytest.mark.slow
def test_visa_failure_knobs() -> None:
    with serve_visa(VisaSandbox(fail_before_booking=1, fail_after_booking=1)) as visa:
        url = visa.url + "/consulates/lisbon/bookings"
        body, key = {"slot": {"id": "slot-1"}}, {"Idempotency-Key": "x"}
        assert httpx.post(url, json=body, headers=key, timeout=10).status_code == 503
        assert visa.bookings == {}
        assert httpx.post(url, json=body, headers=key, timeout=10).status_code == 500
        assert len(visa.bookings) == 1  # booked, but the answer was lost
        assert httpx.post(url, json=body, headers=key, timeout=10).json()["id"] == "booking-1"
