"""The direct runtime: a write sent by this process — HTTP (``steps.http``: the bytes n8n's HTTP
Request node would send) or SMTP — instead of through n8n. The durable runtime's
``WriteRuntime`` (``steps.sequence``; StepRunner LLD: why durable activities do not send through
n8n). How a send's failures become an ``Attempt``:

- HTTP: a connect error or connect timeout → ``not_sent``; anything after the request may have left
  (read timeout, dropped connection, …) → ``lost``; an answer → ``answered`` with its status (an
  answer that cannot be normalized → ``lost``: it arrived, what it did is unknown);
- SMTP: the connection could not be opened → ``not_sent``; the recipient or sender refused, or a
  5xx to DATA → ``refused``; any other failure → ``lost`` (the message may have been accepted).

The request is built in ``prepare_write`` (before ``sending``), so a missing setting or argument
is ``not_sent`` (the key abandoned), never ``unknown``.
"""

from __future__ import annotations

import smtplib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

import httpx

from countersign.binding import BINARY, BoundNode, normalize_output, render_data, resolve_step
from countersign.kernel import (
    BindingError,
    CountersignError,
    PlanStep,
    content_hash,
    system_clock,
)
from countersign.registry import Registry

from .http import HttpCall, http_call, observed, send
from .sequence import Write
from .writes import Attempt

__all__ = ["DirectSend", "DirectSender"]

#: the one send of a prepared write; reports what happened and never raises
DirectSend = Callable[[], Attempt]
_MAIL_SETTINGS = ("smtp_from", "smtp_host", "smtp_port")
_MAIL_ARGS = ("to", "subject", "body")


def _client() -> httpx.Client:
    # no keep-alive: each request opens its own connection, so "sent or not" reads exactly as a
    # connect error versus anything after it
    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


@dataclass
class DirectSender:
    """Sends writes from this process against ``registry`` with the deployment's ``settings``;
    one thread-safe HTTP ``client`` for every request (building a client per call cost ~40 ms of
    CPU for its TLS context)."""

    registry: Registry
    settings: Mapping[str, str]
    client: httpx.Client = field(default_factory=_client)
    #: opens the SMTP connection (host, port, timeout=); a test may pass another
    smtp: Callable[..., smtplib.SMTP] = smtplib.SMTP
    #: when a write is built to be sent (an event's DTSTAMP: ``render_data``'s ``written_at``)
    clock: Callable[[], datetime] = system_clock

    async def prepare_write(self, write: Write, key: str) -> DirectSend:
        """Build the request (any error here: nothing was sent); the one send."""
        return self.prepare(write.step.model_copy(update={"args": dict(write.args)}), key)

    async def send_write(self, prepared: DirectSend) -> Attempt:
        """Send once (blocking: the durable activity's own thread); what happened."""
        return prepared()

    def prepare(self, step: PlanStep, key: str) -> DirectSend:
        """The send of ``step`` (its args resolved) under idempotency ``key``.

        Raises:
            BindingError (or another CountersignError): the request cannot be built.
        """
        args: dict[str, Any] = dict(step.args)
        node = resolve_step(step, self.registry)
        if node.node_type == "n8n-nodes-base.emailSend":
            msg = self._email(node, args, key)
            return lambda: self._send_mail(msg)
        data = render_data(node, args, self.settings, idempotency_key=key, written_at=self.clock())
        req = http_call(node, data)
        output = self.registry.op(step.uses, step.call).output
        return lambda: self._send_http(req, output, args)

    def _email(self, node: BoundNode, args: Mapping[str, Any], key: str) -> EmailMessage:
        """The message n8n's Send Email node would send for these args: the same rendered values
        (``render_data``: the text, the invitation file) — text/plain, and multipart/mixed with
        each file attached when the step has one — with the headers a client expects."""
        for name in _MAIL_SETTINGS:
            if not self.settings.get(name):
                raise BindingError(f"connector setting {name!r} is not configured")
        for name in _MAIL_ARGS:
            if name not in args:
                raise BindingError(f"mail step needs the argument {name!r}")
        now = self.clock()  # one reading: the Date header and an invitation's DTSTAMP
        data = render_data(node, args, self.settings, idempotency_key=key, written_at=now)
        msg = EmailMessage()
        msg["From"] = self.settings["smtp_from"]
        msg["To"] = str(args["to"])
        msg["Subject"] = str(args["subject"])
        # RFC 5322 §3.6: Date is required (smtplib adds none); when the message is built to be sent
        msg["Date"] = format_datetime(now.astimezone(UTC))
        msg["Message-ID"] = f"<{content_hash(key)[:32]}@countersign>"
        msg.set_content(str(data["text"]))
        for path in sorted(p for p in data if p.startswith(BINARY)):
            if data[path] is not None:
                _attach(msg, data[path])
        return msg

    def _send_mail(self, msg: EmailMessage) -> Attempt:
        with observed("provider.request", method="SMTP", host=self.settings["smtp_host"]) as out:
            attempt = self._send_mail_once(msg)
            out["status"] = attempt.kind
        return attempt

    def _send_mail_once(self, msg: EmailMessage) -> Attempt:
        try:
            s = self.smtp(self.settings["smtp_host"], int(self.settings["smtp_port"]), timeout=30)
        except OSError as e:  # refused, unknown host, timeout: the message never left
            return Attempt.not_sent(f"SMTP connect failed: {type(e).__name__}")
        try:
            with s:
                s.send_message(msg)
        except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as e:
            return Attempt("refused", detail=f"SMTP refused: {type(e).__name__}")
        except smtplib.SMTPDataError as e:
            return _data_refused(e)
        except Exception as e:  # the message may have been accepted
            return Attempt.lost(f"SMTP {type(e).__name__}")
        return Attempt("answered", output={"id": msg["Message-ID"]})

    def _send_http(self, req: HttpCall, output: Any, args: Mapping[str, Any]) -> Attempt:
        try:
            r = send(req, client=self.client)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            return Attempt.not_sent(f"{type(e).__name__}")
        except Exception as e:  # read timeout, dropped connection, …: may have arrived
            return Attempt.lost(f"{type(e).__name__}")
        try:
            out = normalize_output(output, {"statusCode": r.status_code, "body": r.text}, args)
        except CountersignError as e:
            return Attempt.lost(f"provider answered {r.status_code}, unreadable: {e.code}")
        return Attempt("answered", status=r.status_code, output=out, headers=dict(r.headers))


def _attach(msg: EmailMessage, file: Mapping[str, str]) -> None:
    """Attach a rendered text file (``{"fileName", "mimeType", "text"}``) with its media type's
    parameters (an invitation: ``text/calendar; method=REQUEST``, RFC 6047 §2.4)."""
    kind, *params = (p.strip() for p in str(file["mimeType"]).split(";"))
    maintype, _, subtype = kind.partition("/")
    if maintype != "text" or not subtype:
        raise BindingError(f"a mail attaches text files, not {kind!r}")
    msg.add_attachment(
        str(file["text"]),
        subtype=subtype,
        filename=str(file["fileName"]),
        params=dict(p.partition("=")[::2] for p in params),
    )


def _data_refused(e: smtplib.SMTPDataError) -> Attempt:
    """A 5xx to DATA is a permanent refusal of the message (not accepted); anything else may have
    been accepted."""
    if 500 <= e.smtp_code < 600:
        return Attempt("refused", detail=f"SMTP answered {e.smtp_code}")
    return Attempt.lost(f"SMTP answered {e.smtp_code} to DATA")
