"""Mail the direct runtime sends, parsed where it lands (the aiosmtpd sink): the headers a mail
client expects and what was done (issue 25)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import parsedate_to_datetime

from countersign.kernel import PlanStep
from countersign.registry import Registry
from countersign.sandbox import SmtpSink
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
