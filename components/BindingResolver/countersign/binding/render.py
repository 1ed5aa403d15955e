"""Render a bound node's data parameters from concrete values, and normalize node outputs.

Pure. ``render_data`` computes, in Python, the value of every data-bound n8n parameter (templates
filled with URL-encoded path segments, iCalendar text, JSON bodies, the idempotency header). The
WorkflowBuilder hands these values to n8n as JSON in the trigger body and references them with
fixed expressions, so nothing a person typed is ever evaluated by n8n (GLOBAL_SPEC §13 inv. 8).
Reading and writing iCalendar is ``ics.py``'s job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote

from countersign.kernel import BindingError

from .caldav import CALDAV_QUERY, caldav_busy, caldav_query, is_multistatus
from .core import BoundNode, DataBinding
from .ics import CalendarError, ics_busy, ics_event, is_address

__all__ = [
    "BINARY",
    "INVITE_FILE",
    "INVITE_TYPE",
    "idempotency_header_path",
    "mail_text",
    "normalize_output",
    "render_data",
]
#: at most this many detail lines in a mail, each value cut to this many characters
_DETAIL_LINES, _DETAIL_CHARS = 40, 200

#: a data path under this prefix is no node parameter: its value (``{"fileName", "mimeType",
#: "text"}`` or None) is a file the item carries as binary property ``<name>`` (an attachment the
#: node names in a constant: the WorkflowBuilder puts it there, the direct runtime attaches it)
BINARY = "binary."
#: how an invitation's event is attached to a mail (iMIP, RFC 6047 §2.4: the part's ``method``
#: parameter is the calendar's METHOD)
INVITE_FILE, INVITE_TYPE = "invite.ics", "text/calendar; method=REQUEST"
#: the keys of a mail's ``event`` arg: the event written to the calendars (the create step's args)
_INVITE_KEYS = frozenset({"uid", "title", "start", "end", "organizer", "attendees"})

_FIELD = re.compile(r"\{(@?)([a-z][a-z0-9_.]*)\}")


def render_data(
    node: BoundNode,
    args: Mapping[str, Any],
    settings: Mapping[str, str],
    *,
    idempotency_key: str | None = None,
    written_at: datetime | None = None,
) -> dict[str, Any]:
    """Values for every data-bound parameter path of ``node``.

    Args:
        node: from ``resolve_step``.
        args: the step's args with references already resolved to values.
        settings: deployment settings (base URLs, sender address).
        idempotency_key: the write's key; required when the op sends it as a header.
        written_at: when the write is rendered to be sent (the runtime's clock, read by the
            caller: this module reads none); required by an ``ics_event`` value, whose DTSTAMP
            it is. Not an argument, so not in the idempotency key's hash.

    Raises:
        BindingError: a value is missing or unusable (names the step and the parameter).
    """
    where = f"step {node.step} ({node.uses}.{node.call})"
    out: dict[str, Any] = {}
    for path, b in node.data.items():
        if b.kind == "arg":
            out[path] = args[_required(b.name, "an argument name", where, path)]
        elif b.kind == "setting":
            out[path] = _setting(settings, _required(b.name, "a setting name", where, path), where)
        elif b.kind == "template":
            template = _required(b.template, "a template", where, path)
            out[path] = _fill(template, args, settings, url=path == "url", where=where)
        elif b.kind == "fn":
            out[path] = _formatted(b, args, settings, written_at, where)
    idem = node.idempotency
    if idem is not None and idem.via == "header":
        if not idempotency_key:
            raise BindingError(f"{where}: a write that sends {idem.field} needs its key")
        header_path = _header_value_path(node, idem.field or "")
        out[header_path] = idempotency_key
    return out


def _formatted(
    b: DataBinding,
    args: Mapping[str, Any],
    settings: Mapping[str, str],
    written_at: datetime | None,
    where: str,
) -> Any:
    """The value of a ``fn`` binding: the named built-in formatter over its ``fn_args``."""
    values = {k: args.get(src) for k, src in b.fn_args.items()}
    if b.fn == "ics_event":
        return _event(values, settings, written_at, where)
    if b.fn == "ics_invite":
        return _invite(values.get("event"), settings, written_at, where)
    if b.fn == CALDAV_QUERY:
        # the window the read asks the server for (a calendar-query REPORT's body)
        return caldav_query(values.get("time_min"), values.get("time_max"))
    if b.fn == "mail_text":
        return mail_text(str(values.get("body")), values.get("details"))
    if b.fn == "json_body":
        # an optional arg the step does not give is left out, not sent as null
        given = {k: v for k, v in values.items() if b.fn_args[k] in args}
        body = given["value"] if set(given) == {"value"} else given
        return json.dumps(body, ensure_ascii=False, sort_keys=True)
    raise BindingError(f"{where}: unknown formatter {b.fn!r}")


def idempotency_header_path(node: BoundNode) -> str | None:
    """Where the idempotency key goes among the node's parameters when the op sends it as a
    header (the builder references it there, ``render_data`` fills it); None otherwise."""
    idem = node.idempotency
    if idem is None or idem.via != "header":
        return None
    return _header_value_path(node, idem.field or "")


def _header_value_path(node: BoundNode, name: str) -> str:
    params = node.parameters.get("headerParameters", {})
    entries = params.get("parameters", []) if isinstance(params, dict) else []
    for i, p in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(p, dict) and p.get("name") == name:
            return f"headerParameters.parameters[{i}].value"
    raise BindingError(
        f"step {node.step}: the registry declares no {name!r} header to carry the key"
    )


def _event(
    values: Mapping[str, Any],
    settings: Mapping[str, str],
    written_at: datetime | None,
    where: str,
    *,
    method: Literal["REQUEST"] | None = None,
) -> str:
    """The iCalendar text of ``ics_event`` from the op's ``fn_args`` values: ``uid``,
    ``summary``, ``start``, ``end`` (text), optional ``organizer`` and ``attendees`` (a list of
    addresses); an optional arg the step does not give is None.

    The organizer is the person asking, by their user name: an e-mail address is the ORGANIZER
    as it is; another name (``local``) is written as ``CN=<name>`` on the deployment's sender
    address (setting ``smtp_from``), or leaves the event without ORGANIZER when there is none —
    a booking does not fail for want of an address."""
    if written_at is None:
        raise BindingError(f"{where}: an event needs the time it is written (written_at)")
    attendees = values.get("attendees")
    if attendees is not None and not isinstance(attendees, list | tuple):
        raise BindingError(f"{where}: event attendees must be a list of addresses")
    organizer = values.get("organizer")
    name: str | None = None
    if organizer is not None and not is_address(organizer):
        name = str(organizer)
        sender = settings.get("smtp_from")
        organizer = sender if is_address(sender) else None
    return ics_event(
        **{k: str(values.get(k)) for k in ("uid", "summary", "start", "end")},
        stamp=written_at,
        organizer=None if organizer is None else str(organizer),
        organizer_name=name,
        attendees=[str(a) for a in attendees or ()],
        method=method,
    )


def _invite(
    event: Any, settings: Mapping[str, str], written_at: datetime | None, where: str
) -> dict[str, str] | None:
    """The file a mail attaches for ``event`` (the meeting as written to the calendars: ``uid``,
    ``title``, ``start``, ``end``, optional ``organizer`` and ``attendees``), or None when the
    step gives no event: ``{"fileName", "mimeType", "text"}`` — the same VEVENT as
    ``_event`` writes (organizer read the same way), in a ``METHOD:REQUEST`` calendar, its
    DTSTAMP when the mail is rendered to be sent."""
    if event is None:
        return None
    if not isinstance(event, Mapping) or not {"uid", "title", "start", "end"} <= set(event):
        raise BindingError(f"{where}: an invitation's event needs uid, title, start and end")
    unknown = sorted(set(event) - _INVITE_KEYS)
    if unknown:
        raise BindingError(f"{where}: an invitation's event has unknown field(s) {unknown}")
    values = {**event, "summary": event["title"]}
    text = _event(values, settings, written_at, where, method="REQUEST")
    return {"fileName": INVITE_FILE, "mimeType": INVITE_TYPE, "text": text}


def mail_text(body: str, details: Any = None) -> str:
    """A mail's plain text: ``body``, then — when the step gives ``details`` (what was done: a
    booking, an order) — a blank line and one ``name: value`` line per leaf of it, nested names
    joined with dots (``slot.start: 2027-03-02T09:00:00Z``), in the order given. Both runtimes
    send this same text (n8n's Send Email node as data, ``DirectSender`` as its body)."""
    if details is None:
        return body
    lines = [f"{name}: {value}" for name, value in _leaves("", details)][:_DETAIL_LINES]
    return body + "\n\n" + "\n".join(lines) if lines else body


def _leaves(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        return [
            leaf
            for k, v in value.items()
            for leaf in _leaves(f"{prefix}.{k}" if prefix else str(k), v)
        ]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(f"{prefix}.{i}", v)]
    text = " ".join(str(value).split())[:_DETAIL_CHARS]  # one line per leaf
    return [(prefix or "details", text)]


def _required(value: str | None, what: str, where: str, path: str) -> str:
    """A field the binding's kind needs (``resolve_step`` always fills it; a hand-built node may
    not): an explicit check, not an ``assert`` that ``python -O`` would drop."""
    if value is None:
        raise BindingError(f"{where}: parameter {path} needs {what}, found none")
    return value


def _setting(settings: Mapping[str, str], name: str, where: str) -> str:
    value = settings.get(name)
    if value is None:
        raise BindingError(f"{where}: deployment setting {name!r} is not configured")
    return value


def _fill(
    template: str, args: Mapping[str, Any], settings: Mapping[str, str], *, url: bool, where: str
) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) == "@":
            return _setting(settings, m.group(2), where)
        value = args.get(m.group(2))
        if value is None:
            raise BindingError(f"{where}: template needs arg {m.group(2)!r}")
        text = str(value)
        if url:
            if text in {".", ".."} or not text:
                raise BindingError(f"{where}: {m.group(2)!r} may not be {text!r} in a URL")
            return quote(text, safe="@")
        return text

    return _FIELD.sub(sub, template)


def normalize_output(kind: str, item: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
    """The step's normalized output from the node's output item.

    HTTP Request nodes run with ``fullResponse`` (``{statusCode, headers, body}``); other nodes
    return their item as it is.
    """
    # HTTP Request with fullResponse: {statusCode, headers, body} (JSON) or {…, data} (text format)
    body = item.get("body", item.get("data", "")) if "statusCode" in item else item
    if kind == "status":
        return {"status": item.get("statusCode")}
    if kind == "text":
        return {
            "status": item.get("statusCode"),
            "text": body if isinstance(body, str) else json.dumps(body),
        }
    if kind == "ics_busy":
        return _busy(body, item.get("statusCode"), args)
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return {"text": body}
    return dict(body) if isinstance(body, Mapping) else body


def _busy(body: Any, status: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    """A calendar read's output: from a calendar-query REPORT's multistatus (the window's objects
    and their versions; a 207 must be one) or from iCalendar text (a whole collection, the GET of
    old). An answer that is not text (a JSON object, say) is unreadable, never free time."""
    if body is None:
        body = ""
    if not isinstance(body, str):
        raise CalendarError(f"read busy times: the answer is {type(body).__name__}, not text")
    lo, hi = args.get("time_min"), args.get("time_max")
    text = body
    if status == 207 or is_multistatus(text):
        return caldav_busy(text, status, time_min=lo, time_max=hi)
    return {"status": status, "busy": ics_busy(text, time_min=lo, time_max=hi)}
