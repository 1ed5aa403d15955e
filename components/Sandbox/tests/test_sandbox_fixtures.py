"""The sandbox fixtures (`countersign.sandbox.testing`) themselves: Radicale stores events, aiosmtpd
keeps mails."""

from __future__ import annotations

import smtplib
from datetime import UTC, datetime
from email.message import EmailMessage

import httpx

from countersign.binding import ics_busy, ics_event
from countersign.sandbox import Radicale, SmtpSink


def test_radicale_calendar_roundtrip(radicale: Radicale) -> None:
    radicale.make_calendar("erin@example.com")
    radicale.make_calendar("erin@example.com")  # idempotent
    assert radicale.events("erin@example.com") == []
    radicale.add_event("erin@example.com", "e1", "20261123T130000Z", "20261123T140000Z")
    assert radicale.events("erin@example.com") == ["e1.ics"]
    text = httpx.get(radicale.calendar_url("erin@example.com"), timeout=5).text
    assert ics_busy(text) == [["2026-11-23T13:00:00Z", "2026-11-23T14:00:00Z"]]
    # If-None-Match: * refuses to overwrite: the natural idempotency of create_event
    ics = ics_event(
        uid="e1",
        summary="again",
        start="2026-11-24T13:00:00Z",
        end="2026-11-24T14:00:00Z",
        stamp=datetime(2026, 11, 20, 9, 0, tzinfo=UTC),
    )
    r = httpx.put(
        radicale.calendar_url("erin@example.com") + "e1.ics",
        content=ics,
        headers={"If-None-Match": "*", "Content-Type": "text/calendar"},
        timeout=5,
    )
    assert r.status_code == 412


def test_smtp_sink_keeps_messages(smtp_server: SmtpSink) -> None:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "a@example.com", "frank@example.com", "hi"
    msg.set_content("body")
    with smtplib.SMTP(smtp_server.host, smtp_server.port) as s:
        s.send_message(msg)
    assert len(smtp_server.to("frank@example.com")) == 1
