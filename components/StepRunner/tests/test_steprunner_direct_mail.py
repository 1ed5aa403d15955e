"""Mail the direct runtime sends, parsed where it lands (the aiosmtpd sink): the headers a mail
client expects and what was done (issue 25)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import parsedate_to_datetime

import httpx
import icalendar

from countersign.kernel import PlanStep
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.steps import DirectSender, Write

SENT = datetime(2026, 11, 26, 6, 0, 5, tzinfo=UTC)


def test_a_direct_mail_has_the_headers_a_client_expects(
    registry: Registry, smtp_server: SmtpSink
) -> None:
    settings = {
        "smtp_from": "countersign@example.com",
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
    }
    sender = DirectSender(registry, settings, clock=lambda: SENT)
    step = PlanStep(
        step=7,
        mode="durable",
        role="Notifier",
        uses="smtp",
        call="send",
        args={
            "to": "ana@example.com",
            "subject": "Visa appointment booked",
            "body": "Your appointment was booked.",
            "details": {"id": "booking-1", "slot": {"start": "2027-03-02T09:00:00Z"}},
        },
        dry_run=False,
    )
    smtp_server.messages.clear()
    send = asyncio.run(sender.prepare_write(Write("P1", step, step.args), "P1:7:" + "a" * 64))
    attempt = send()
    assert attempt.kind == "answered", attempt
    (msg,) = smtp_server.messages
    assert parsedate_to_datetime(str(msg["Date"])) == SENT
    assert str(msg["From"]) == "countersign@example.com"
    assert str(msg["To"]) == "ana@example.com"
    assert str(msg["Subject"]) == "Visa appointment booked"
    assert str(msg["Message-ID"]).startswith("<") and str(msg["Message-ID"]).endswith(">")
    assert str(msg["Message-ID"]) == attempt.output["id"]
    # which appointment was booked: the booking's details follow the body
    assert msg.get_content_type() == "text/plain"
    assert isinstance(msg, EmailMessage)  # the sink parses with policy.default
    assert msg.get_content().splitlines() == [
        "Your appointment was booked.",
        "",
        "id: booking-1",
        "slot.start: 2027-03-02T09:00:00Z",
    ]


MEETING = {
    "uid": "01jdq3z0000000000000000001-5",
    "title": "Planning; Q1\nreview",
    "start": "2037-11-23T13:00:00Z",
    "end": "2037-11-23T13:30:00Z",
    "organizer": "alice@example.com",
    "attendees": ["alice@example.com", "bob@example.com"],
}


def test_a_direct_invitation_carries_the_event_it_promised(
    registry: Registry, smtp_server: SmtpSink
) -> None:
    """An invitation (a mail step with ``event``) is multipart/mixed: the text the card promised,
    then ``invite.ics`` as ``text/calendar; method=REQUEST`` (RFC 6047) whose one VEVENT is the
    meeting the calendars hold — UID, ORGANIZER, ATTENDEEs, DTSTART/DTEND, SUMMARY — stamped
    when the mail was built; read back with ``email`` (policy.default) and ``icalendar``."""
    settings = {
        "smtp_from": "countersign@example.com",
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
    }
    sender = DirectSender(registry, settings, clock=lambda: SENT)
    args = {"to": "bob@example.com", "subject": "Planning", "body": "You are invited."}
    step = PlanStep(
        step=8,
        mode="durable",
        role="Notifier",
        uses="smtp",
        call="send",
        args={**args, "event": MEETING},
        dry_run=False,
    )
    smtp_server.messages.clear()
    attempt = asyncio.run(sender.prepare_write(Write("P1", step, step.args), "P1:8:" + "b" * 64))()
    assert attempt.kind == "answered", attempt
    (msg,) = smtp_server.messages
    assert isinstance(msg, EmailMessage)
    assert parsedate_to_datetime(str(msg["Date"])) == SENT
    assert [str(msg[h]) for h in ("From", "To", "Subject")] == [
        "countersign@example.com",
        "bob@example.com",
        "Planning",
    ]
    assert msg.get_content_type() == "multipart/mixed"
    body = msg.get_body(("plain",))
    assert body is not None and body.get_content().splitlines() == ["You are invited."]
    (part,) = list(msg.iter_attachments())
    assert part.get_content_type() == "text/calendar"
    assert part.get_param("method") == "REQUEST"
    assert part.get_filename() == "invite.ics"
    cal = icalendar.Calendar.from_ical(part.get_content())
    assert str(cal["METHOD"]) == "REQUEST"
    (event,) = cal.walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    assert event.uid == MEETING["uid"] and event.summary == MEETING["title"]
    assert str(event.organizer) == "mailto:alice@example.com"
    assert sorted(str(a) for a in event.attendees) == [
        "mailto:alice@example.com",
        "mailto:bob@example.com",
    ]
    assert event.start == datetime(2037, 11, 23, 13, 0, tzinfo=UTC)
    assert event.end == datetime(2037, 11, 23, 13, 30, tzinfo=UTC)
    assert event.DTSTAMP == SENT
    # the step's idempotency key does not depend on when it was sent: the stamp is no argument
    assert "stamp" not in step.args and "event" in step.args


def test_a_mail_without_event_attaches_nothing(registry: Registry, smtp_server: SmtpSink) -> None:
    settings = {
        "smtp_from": "countersign@example.com",
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
    }
    step = PlanStep(
        step=9,
        mode="durable",
        role="Notifier",
        uses="smtp",
        call="send",
        args={"to": "bob@example.com", "subject": "Hi", "body": "Hello."},
        dry_run=False,
    )
    smtp_server.messages.clear()
    sender = DirectSender(registry, settings, clock=lambda: SENT)
    send = asyncio.run(sender.prepare_write(Write("P1", step, step.args), "P1:9:" + "c" * 64))
    assert send().kind == "answered"
    (msg,) = smtp_server.messages
    assert isinstance(msg, EmailMessage)
    assert msg.get_content_type() == "text/plain" and not list(msg.iter_attachments())


def test_direct_invitations_are_the_event_the_calendars_hold(
    registry: Registry, radicale: Radicale, smtp_server: SmtpSink
) -> None:
    """The direct runtime writes the meeting into each attendee's calendar at Radicale and mails
    each attendee: the VEVENT attached to every mail is the one Radicale stores — the same UID,
    ORGANIZER, ATTENDEEs, DTSTART/DTEND, SUMMARY — read back with ``email`` and ``icalendar``."""
    settings = {
        "caldav_base_url": radicale.base_url,
        "smtp_from": "countersign@example.com",
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
    }
    meeting = {**MEETING, "uid": "01jdq3z0000000000000000002-5"}
    people = list(MEETING["attendees"])
    sender = DirectSender(registry, settings, clock=lambda: SENT)
    smtp_server.messages.clear()
    for n, who in enumerate(people, start=5):
        radicale.make_calendar(who)
        create = {"user": who, **meeting}
        step = PlanStep(
            step=n,
            mode="durable",
            role="Booker",
            uses="caldav",
            call="create_event",
            args=create,
            dry_run=False,
        )
        key = f"P2:{n}:" + "d" * 64
        assert asyncio.run(sender.prepare_write(Write("P2", step, create), key))().status == 201
    for n, who in enumerate(people, start=7):
        mail = {"to": who, "subject": "Planning", "body": "You are invited.", "event": meeting}
        step = PlanStep(
            step=n,
            mode="durable",
            role="Notifier",
            uses="smtp",
            call="send",
            args=mail,
            dry_run=False,
        )
        attempt = asyncio.run(
            sender.prepare_write(Write("P2", step, mail), f"P2:{n}:" + "e" * 64)
        )()
        assert attempt.kind == "answered", attempt
    assert sorted(str(m["To"]) for m in smtp_server.messages) == sorted(people)
    for msg in smtp_server.messages:
        assert isinstance(msg, EmailMessage)
        (name,) = radicale.events(str(msg["To"]))
        r = httpx.get(radicale.calendar_url(str(msg["To"])) + name, timeout=5)
        (kept,) = icalendar.Calendar.from_ical(r.text).walk("VEVENT")
        (part,) = list(msg.iter_attachments())
        (event,) = icalendar.Calendar.from_ical(part.get_content()).walk("VEVENT")
        assert isinstance(event, icalendar.Event) and isinstance(kept, icalendar.Event)
        assert event.uid == kept.uid == meeting["uid"]
        assert event.summary == kept.summary == meeting["title"]
        assert str(event.organizer) == str(kept.organizer) == "mailto:alice@example.com"
        assert [str(a) for a in event.attendees] == [str(a) for a in kept.attendees]
        assert event.start == kept.start and event.end == kept.end
        assert event.DTSTAMP == kept.DTSTAMP == SENT
