"""Rendering data values and normalizing outputs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import icalendar
import pytest
from hypothesis import given
from hypothesis import strategies as st

from countersign.binding import (
    ics_busy,
    ics_event,
    mail_text,
    normalize_output,
    render_data,
    resolve_step,
)
from countersign.binding.render import INVITE_TYPE
from countersign.kernel import BindingError, PlanStep
from countersign.registry import Registry

BASE = {"caldav_base_url": "http://127.0.0.1:5232"}
AT = datetime(2026, 11, 20, 9, 15, tzinfo=UTC)  # when a write is rendered to be sent


def _create(**args: Any) -> PlanStep:
    a = {
        "user": "alice@example.com",
        "uid": "01abc-5",
        "title": "Sync",
        "start": "2026-11-23T13:00:00Z",
        "end": "2026-11-23T13:30:00+00:00",
        **args,
    }
    return PlanStep(
        step=5,
        mode="interactive",
        role="Booker",
        uses="caldav",
        call="create_event",
        args=a,
        dry_run=False,
    )


def test_caldav_put_renders_url_and_ics(registry: Registry) -> None:
    s = _create()
    data = render_data(resolve_step(s, registry), s.args, BASE, written_at=AT)
    assert data["url"] == "http://127.0.0.1:5232/alice@example.com/calendar/01abc-5.ics"
    assert "DTSTART:20261123T130000Z\r\nDTEND:20261123T133000Z" in data["body"]
    assert "DTSTAMP:20261120T091500Z" in data["body"]
    assert "ORGANIZER" not in data["body"] and "ATTENDEE" not in data["body"]


def test_caldav_put_names_the_organizer_and_attendees(registry: Registry) -> None:
    people = ["alice@example.com", "bob@example.com"]
    s = _create(organizer="alice@example.com", attendees=people)
    data = render_data(resolve_step(s, registry), s.args, BASE, written_at=AT)
    (event,) = icalendar.Calendar.from_ical(data["body"]).walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    assert str(event.organizer) == "mailto:alice@example.com"
    assert [str(a) for a in event.attendees] == [f"mailto:{p}" for p in people]
    stamp = event.DTSTAMP
    assert stamp == AT


def test_an_event_is_not_rendered_without_the_time_it_is_written(registry: Registry) -> None:
    s = _create()
    with pytest.raises(BindingError, match="written_at"):
        render_data(resolve_step(s, registry), s.args, BASE)
    with pytest.raises(BindingError, match="list of addresses"):
        s = _create(attendees="bob@example.com")
        render_data(resolve_step(s, registry), s.args, BASE, written_at=AT)


@given(st.text(max_size=40))
def test_ics_summary_cannot_inject_properties(title: str) -> None:
    text = ics_event(
        uid="u1", summary=title, start="2026-11-23T13:00:00Z", end="2026-11-23T14:00:00Z", stamp=AT
    )
    lines = text.replace("\r\n ", "").split("\r\n")  # logical lines (RFC 5545 folds at 75 octets)
    assert lines[-1] == "" and lines[-2] == "END:VCALENDAR"
    assert sum(1 for line in lines if line.startswith("SUMMARY:")) == 1
    assert len(lines) == 12


def test_url_segments_are_encoded_and_dot_segments_refused(registry: Registry) -> None:
    s = _create(user="a/b c")
    assert render_data(resolve_step(s, registry), s.args, BASE, written_at=AT)["url"].startswith(
        "http://127.0.0.1:5232/a%2Fb%20c/"
    )
    s = _create(user="..")
    with pytest.raises(BindingError, match="may not be"):
        render_data(resolve_step(s, registry), s.args, BASE, written_at=AT)


def test_bad_uid_and_missing_setting(registry: Registry) -> None:
    s = _create(uid="x\r\nATTENDEE:evil")
    with pytest.raises(BindingError, match="uid"):
        render_data(resolve_step(s, registry), s.args, BASE, written_at=AT)
    with pytest.raises(BindingError, match="caldav_base_url"):
        render_data(resolve_step(_create(), registry), _create().args, {}, written_at=AT)


def test_header_idempotency_key_is_rendered(registry: Registry) -> None:
    s = PlanStep(
        step=4,
        mode="interactive",
        role="Booker",
        uses="shop.sandbox",
        call="add_to_cart",
        args={"item": {"sku": "A1"}, "quantity": 2},
        dry_run=False,
    )
    node = resolve_step(s, registry)
    with pytest.raises(BindingError, match="needs its key"):
        render_data(node, s.args, {"shop_base_url": "http://x"})
    data = render_data(node, s.args, {"shop_base_url": "http://x"}, idempotency_key="P:4:abc")
    assert data["headerParameters.parameters[0].value"] == "P:4:abc"
    assert json.loads(data["jsonBody"]) == {"item": {"sku": "A1"}, "quantity": 2}


def test_ics_busy_parses_folded_lines_and_window() -> None:
    cal = (
        "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:a\r\nDTSTART:20261123T140000Z\r\nDTEND:20261123T\r\n 150000Z\r\nEND:VEVENT\r\n"
        "BEGIN:VEVENT\r\nUID:b\r\nDTSTART;TZID=UTC:20261125T090000\r\nDTEND:20261125T100000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    assert ics_busy(cal) == [
        ["2026-11-23T14:00:00Z", "2026-11-23T15:00:00Z"],
        ["2026-11-25T09:00:00Z", "2026-11-25T10:00:00Z"],
    ]
    assert ics_busy(cal, time_min="2026-11-23T00:00:00Z", time_max="2026-11-24T00:00:00Z") == [
        ["2026-11-23T14:00:00Z", "2026-11-23T15:00:00Z"]
    ]


def test_normalize_output_kinds() -> None:
    assert normalize_output("status", {"statusCode": 201, "body": ""}, {}) == {"status": 201}
    assert normalize_output("json", {"statusCode": 200, "body": '{"a": 1}'}, {}) == {"a": 1}
    assert normalize_output("json", {"slots": []}, {}) == {"slots": []}
    out = normalize_output(
        "ics_busy", {"statusCode": 200, "body": "BEGIN:VCALENDAR\nEND:VCALENDAR"}, {}
    )
    assert out == {"status": 200, "busy": []}


def test_resolve_refs() -> None:
    from countersign.binding import referenced_steps, resolve_refs

    args = {
        "inputs": [{"$ref": "steps.1.output"}, {"$ref": "steps.2.output.busy"}],
        "start": {"$ref": "gates.gate-A.choice.start"},
        "n": 3,
    }
    out = resolve_refs(
        args, {1: {"busy": []}, 2: {"busy": [["a", "b"]]}}, {"gate-A": {"start": "S"}}
    )
    assert out == {"inputs": [{"busy": []}, [["a", "b"]]], "start": "S", "n": 3}
    assert referenced_steps(args) == {1, 2}
    with pytest.raises(BindingError, match="step 2 has no output"):
        resolve_refs(args, {1: {}}, {"gate-A": {"start": "S"}})
    with pytest.raises(BindingError, match="no choice"):
        resolve_refs(args, {1: {}, 2: {"busy": 1}}, {})
    with pytest.raises(BindingError, match="no 'start'"):
        resolve_refs(args, {1: {}, 2: {"busy": 1}}, {"gate-A": {}})


def test_an_organizer_named_without_an_address_is_shown_on_the_sender_address(
    registry: Registry,
) -> None:
    """The person asking may be a user name (``local``): the event names them as CN on the
    deployment's sender address; with no sender configured it has no ORGANIZER, and the booking
    is still written."""
    s = _create(organizer="local", attendees=["bob@example.com"])
    node = resolve_step(s, registry)
    data = render_data(node, s.args, {**BASE, "smtp_from": "cs@example.com"}, written_at=AT)
    (event,) = icalendar.Calendar.from_ical(data["body"]).walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    assert str(event.organizer) == "mailto:cs@example.com"
    assert event.organizer is not None and event.organizer.params["CN"] == "local"
    (event,) = icalendar.Calendar.from_ical(
        render_data(node, s.args, BASE, written_at=AT)["body"]
    ).walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    assert event.organizer is None
    assert [str(a) for a in event.attendees] == ["mailto:bob@example.com"]


def test_mail_text_says_what_was_done_one_line_per_detail() -> None:
    booking = {"id": "booking-1", "slot": {"id": "s-1", "start": "2027-03-02T09:00:00Z"}}
    assert mail_text("Your appointment was booked.", booking) == (
        "Your appointment was booked.\n\n"
        "id: booking-1\nslot.id: s-1\nslot.start: 2027-03-02T09:00:00Z"
    )
    assert mail_text("Hi.") == "Hi." and mail_text("Hi.", {}) == "Hi."
    assert mail_text("Hi.", {"note": "two\nlines", "tags": ["a", "b"]}) == (
        "Hi.\n\nnote: two lines\ntags.0: a\ntags.1: b"
    )


def test_smtp_text_is_rendered_with_its_details(registry: Registry) -> None:
    s = PlanStep(
        step=6,
        mode="durable",
        role="Notifier",
        uses="smtp",
        call="send",
        args={"to": "a@example.com", "subject": "Booked", "body": "Booked.", "details": {"id": 7}},
        dry_run=False,
    )
    data = render_data(resolve_step(s, registry), s.args, {"smtp_from": "cs@example.com"})
    assert data["text"] == "Booked.\n\nid: 7"


def _mail(**args: Any) -> PlanStep:
    return PlanStep(
        step=8,
        mode="interactive",
        role="Notifier",
        uses="smtp",
        call="send",
        args={"to": "bob@example.com", "subject": "Sync", "body": "You are invited.", **args},
        dry_run=False,
    )


def test_an_invitation_attaches_the_event_the_calendars_hold(registry: Registry) -> None:
    """The mail's ``event`` (the create step's args) renders as ``invite.ics``: the VEVENT the
    calendar write stores, property for property (the organizer by user name made the same
    way), in a ``METHOD:REQUEST`` calendar; a mail without event attaches nothing."""
    people = ["alice@example.com", "bob@example.com"]
    meeting = {"uid": "01abc-5", "title": "Sync", "organizer": "alice", "attendees": people}
    times = {"start": "2026-11-23T13:00:00Z", "end": "2026-11-23T13:30:00+00:00"}
    settings = {**BASE, "smtp_from": "countersign@example.com"}
    create = _create(**{k: v for k, v in meeting.items() if k != "uid"}, **times)
    stored = render_data(resolve_step(create, registry), create.args, settings, written_at=AT)
    mail = _mail(event={**meeting, **times})
    sent = AT.replace(minute=16)
    data = render_data(resolve_step(mail, registry), mail.args, settings, written_at=sent)
    invite = data["binary.invite"]
    assert (invite["fileName"], invite["mimeType"]) == ("invite.ics", INVITE_TYPE)
    cal = icalendar.Calendar.from_ical(invite["text"])
    assert str(cal["METHOD"]) == "REQUEST"
    assert "METHOD" not in icalendar.Calendar.from_ical(stored["body"])
    (event,) = cal.walk("VEVENT")
    (kept,) = icalendar.Calendar.from_ical(stored["body"]).walk("VEVENT")
    assert sent == event.DTSTAMP and kept.DTSTAMP == AT
    assert _lines(event) == _lines(kept) and len(_lines(event)) == 9
    assert event["ORGANIZER"].params["CN"] == "alice"
    plain = render_data(resolve_step(_mail(), registry), _mail().args, settings)
    assert "binary.invite" in plain and plain["binary.invite"] is None


def _lines(event: Any) -> list[str]:
    """The event's content lines but its DTSTAMP, unfolded."""
    text = bytes(event.to_ical()).decode().replace("\r\n ", "")
    return [line for line in text.split("\r\n") if line and not line.startswith("DTSTAMP")]


def test_an_invitation_without_its_time_or_with_a_partial_event_is_refused(
    registry: Registry,
) -> None:
    settings = {"smtp_from": "countersign@example.com"}
    full = {
        "uid": "u-1",
        "title": "T",
        "start": "2026-11-23T13:00:00Z",
        "end": "2026-11-23T14:00:00Z",
    }
    with pytest.raises(BindingError, match="written_at"):
        render_data(
            resolve_step(_mail(event=full), registry), {**_mail().args, "event": full}, settings
        )
    for bad in ({k: v for k, v in full.items() if k != "uid"}, {**full, "rrule": "x"}, "u-1"):
        s = _mail(event=bad)
        with pytest.raises(BindingError, match="invitation"):
            render_data(resolve_step(s, registry), s.args, settings, written_at=AT)
