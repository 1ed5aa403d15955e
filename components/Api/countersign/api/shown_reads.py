"""What the preview card shows of a plan's reads and writes (Api SPEC, the preview card: what was
read, what will be written), as a person reads them: whose calendar each read is and its busy and
free stretches, the offers as rows with their totals and currency, the appointment times found, and
one sentence per write ("Create the event “Sync” in Alice's and Bob's calendars").

Pure: the signed plan (as JSON), the preview's outputs, the registry and the person's contacts in;
JSON-ready dicts out. Instants stay UTC ISO strings: the page shows them in the person's clock
(the browser's zone); everything else is worded here, so the API and the page say the same. An
output of a shape not known here reads as "field: value" lines, never as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from countersign.intake import Contact
from countersign.registry import Registry

__all__ = ["YOU", "person", "readable", "shown_plan", "shown_reads", "shown_writes"]

#: at most this many rows (busy stretches, offers, times, fields) per read
_ROWS = 50
#: characters of one value worded in a generic line
_CHARS = 160

#: how the person asking is named (their own calendar is "your calendar")
YOU = "you"

Step = Mapping[str, Any]
Item = dict[str, Any]


# ---- people, references, values -----------------------------------------------------------------
def person(value: Any, people: Sequence[Contact]) -> str:
    """A person as the page names them: the contact's name when one has that address (or
    name), else the address as given (anything but a string: in words)."""
    if not isinstance(value, str):
        return readable(value, people)
    said = value
    for c in people:
        if said.lower() in (c.email.lower(), c.name.lower()):
            return c.name
    return said


def _whose(names: Sequence[str], noun: str) -> str:
    """ "Alice's and Bob's calendars", "your calendar", "the calendar of bob@example.com", or
    both ("your calendar and the calendar of bob@example.com")."""
    named = list(dict.fromkeys(n for n in names if "@" not in n))
    addresses = list(dict.fromkeys(n for n in names if "@" in n))
    parts = []
    if named:
        owners = ["your" if n == YOU else f"{n}'s" for n in named]
        parts.append(f"{_joined(owners)} {noun}{'s' if len(named) > 1 else ''}")
    if addresses:
        parts.append(f"the {noun}{'s' if len(addresses) > 1 else ''} of {_joined(addresses)}")
    return " and ".join(parts) or f"the {noun}"


def _joined(words: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    words = list(dict.fromkeys(words))
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _ref(value: Any) -> str | None:
    """What a ``$ref`` argument stands for, as a person reads it; None when it is not one."""
    if not (isinstance(value, Mapping) and "$ref" in value):
        return None
    parts = str(value["$ref"]).split(".")
    if parts[0] == "gates":
        return f"what you pick at the gate{f' ({parts[-1]})' if len(parts) > 3 else ''}"
    if parts[0] == "steps" and len(parts) > 1:
        return f"what step {parts[1]} returns"
    return "a value found while it runs"


def readable(value: Any, people: Sequence[Contact] = ()) -> str:
    """One value in words, never JSON: a reference by what it stands for, an address by name,
    a list as "a, b", an object as "k: v; …", each cut to ``_CHARS`` characters."""
    ref = _ref(value)
    if ref is not None:
        text = ref
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, Mapping):
        text = "; ".join(f"{_name(k)}: {readable(v, people)}" for k, v in value.items())
    elif isinstance(value, list | tuple):
        text = ", ".join(readable(v, people) for v in value) or "none"
    elif value is None:
        text = "none"
    else:
        text = person(value, people) if "@" in str(value) else str(value)
    return text if len(text) <= _CHARS else text[: _CHARS - 1] + "…"


def _place(value: Any) -> str:
    """A consulate as a person names it: "lisbon" → "Lisbon", {country, city} → "Italy, Chicago"."""
    if isinstance(value, Mapping):
        return ", ".join(str(value[k]) for k in ("country", "city") if value.get(k)) or "?"
    text = readable(value)
    return text.title() if text.islower() else text


def _name(field: Any) -> str:
    """A field's name as words ("unit_price" → "unit price")."""
    return str(field).replace("_", " ")


def _money(value: Any) -> str | None:
    """An amount as a two-decimal string ("9.9" → "9.90"); None when it is not a number."""
    try:
        return str(Decimal(str(value)).quantize(Decimal("0.01")))
    except (InvalidOperation, ValueError):
        return None


def _instant(value: Any) -> datetime | None:
    """An ISO instant with a zone; None if it is not one."""
    try:
        at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _currency(plan: Mapping[str, Any], registry: Registry) -> str | None:
    """The currency the plan's intent declares for its amounts (the registry's intent)."""
    spec = registry.intents.get(str(plan.get("intent", {}).get("intent", "")))
    if spec is None:
        return None
    found = [c for e in [*spec.required, *spec.optional] if (c := getattr(e, "currency", None))]
    return found[0] if found else None


# ---- reads --------------------------------------------------------------------------------------
def _intervals(raw: Any) -> list[tuple[datetime, datetime]]:
    """Busy or free stretches given as ``[start, end]`` pairs or ``{start, end}`` objects, sorted."""
    out = []
    for r in raw if isinstance(raw, list) else []:
        pair = (r.get("start"), r.get("end")) if isinstance(r, Mapping) else r
        if isinstance(pair, list | tuple) and len(pair) == 2:
            start, end = _instant(pair[0]), _instant(pair[1])
            if start is not None and end is not None and start < end:
                out.append((start, end))
    return sorted(out)


def _utc(at: datetime) -> str:
    """An instant as a UTC ISO string ("2026-11-23T14:00:00Z")."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _free(busy: list[tuple[datetime, datetime]], start: Any, end: Any) -> list[Item]:
    """The free stretches of a window around the busy ones (none when the window is unknown)."""
    lo, hi = _instant(start), _instant(end)
    if lo is None or hi is None:
        return []
    out, t = [], lo
    for s, e in busy:
        if s > t:
            out.append({"start": _utc(t), "end": _utc(min(s, hi))})
        t = max(t, e)
        if t >= hi:
            break
    if t < hi:
        out.append({"start": _utc(t), "end": _utc(hi)})
    return [f for f in out if f["start"] < f["end"]]


def _busy_read(step: Step, out: Mapping[str, Any], people: Sequence[Contact]) -> Item:
    """A calendar's busy stretches: whose, the window, busy and free (UTC instants)."""
    args = step.get("args", {})
    who = person(args.get("user", ""), people) if args.get("user") else None
    busy = _intervals(out.get("busy"))
    start, end = args.get("time_min"), args.get("time_max")
    inside = [{"start": _utc(s), "end": _utc(e)} for s, e in busy[:_ROWS]]
    owner = who or "This calendar"
    return {
        "kind": "busy",
        "owner": who,
        "address": args.get("user"),
        "label": _whose([who], "calendar") if who else "the calendar",
        "line": f"{'You' if owner == YOU else owner}: "
        + (f"{len(inside)} busy stretch{'es' if len(inside) > 1 else ''}" if inside else "free")
        + (" in this window" if start and end else ""),
        "window": {"start": start, "end": end} if _instant(start) and _instant(end) else None,
        "busy": inside,
        "free": _free(busy, start, end),
    }


def _free_read(step: Step, out: Mapping[str, Any], people: Sequence[Contact]) -> Item:
    """Stretches free for everyone (an overlap of calendars)."""
    args = step.get("args", {})
    slots = [{"start": _utc(s), "end": _utc(e)} for s, e in _intervals(out.get("slots"))[:_ROWS]]
    need = args.get("duration_min")
    label = "Free for everyone" + (f", at least {need} min" if isinstance(need, int) else "")
    return {
        "kind": "free",
        "owner": None,
        "label": label,
        "line": f"{label}: {len(slots) or 'no'} stretch{'es' if len(slots) != 1 else ''}",
        "window": {"start": args.get("window_start"), "end": args.get("window_end")}
        if _instant(args.get("window_start")) and _instant(args.get("window_end"))
        else None,
        "free": slots,
    }


def _offer_rows(rows: list[Any], quantity: Any, price_key: str) -> list[Item]:
    """Offers or cart lines as rows: item, title, price, quantity, total (two decimals)."""
    out = []
    for r in rows[:_ROWS]:
        if not isinstance(r, Mapping):
            continue
        n = r.get("quantity", quantity)
        n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
        price = _money(r.get(price_key))
        total = _money(r.get("total")) or (
            str((Decimal(price) * n).quantize(Decimal("0.01"))) if price else None
        )
        out.append(
            {
                "item": str(r.get("item", r.get("id", "?"))),
                "title": str(r.get("title") or r.get("item") or ""),
                "price": price,
                "quantity": n,
                "total": total,
            }
        )
    return out


def _offers_read(step: Step, rows: list[Any], currency: str | None) -> Item:
    """Offers found (a search) or kept (within the budget), as rows with totals."""
    args = step.get("args", {})
    budget = _money(args.get("max_price"))
    quantity = args.get("quantity", 1)
    if "inputs" in args and budget:
        label = f"Offers within your budget of {budget}{f' {currency}' if currency else ''}"
        label += f" for {quantity}, cheapest first" if quantity != 1 else ", cheapest first"
    elif args.get("query"):
        label = f"Offers for “{readable(args['query'])}”"
    else:
        label = "Offers"
    shown = _offer_rows(rows, quantity if "inputs" in args else 1, "price")
    return {
        "kind": "offers",
        "owner": None,
        "label": label,
        "line": f"{label}: {len(shown) or 'none'}",
        "currency": currency,
        "rows": shown,
    }


def _cart_read(
    step: Step, out: Mapping[str, Any], currency: str | None, people: Sequence[Contact]
) -> Item:
    """A cart as the shop holds it: its lines and its total."""
    customer = step.get("args", {}).get("customer")
    who = person(customer, people) if customer else None
    rows = _offer_rows(list(out.get("lines") or []), 1, "unit_price")
    total = _money(out.get("total", out.get("cart_total")))
    label = _whose([who], "cart").capitalize() if who else "The cart"
    return {
        "kind": "offers",
        "owner": who,
        "label": label,
        "line": f"{label}: {len(rows) or 'no'} line{'s' if len(rows) != 1 else ''}"
        + (f", total {total}{f' {currency}' if currency else ''}" if total else ""),
        "currency": currency,
        "rows": rows,
        "total": total,
    }


def _times_read(step: Step, slots: list[Any]) -> Item:
    """Appointment times found (a watcher's search)."""
    args = step.get("args", {})
    where = _place(args["consulate"]) if args.get("consulate") else None
    times = [
        {"id": str(s.get("id", "")), "at": s.get("at")}
        for s in slots[:_ROWS]
        if isinstance(s, Mapping) and _instant(s.get("at"))
    ]
    label = f"Free appointments{f' at {where}' if where else ''}"
    return {
        "kind": "times",
        "owner": None,
        "label": label,
        "line": f"{label}: {len(times) or 'none yet'}"
        + ("" if times or step.get("mode") != "durable" else " — the watcher keeps looking"),
        "window": {"start": args.get("date_from"), "end": args.get("date_to")}
        if _instant(args.get("date_from")) and _instant(args.get("date_to"))
        else None,
        "times": times,
    }


def _fields_read(label: str, out: Any, people: Sequence[Contact]) -> Item:
    """Any other output: one "field: value" line per member, in words."""
    members = out.items() if isinstance(out, Mapping) else [("value", out)]
    rows = [
        {"field": _name(k), "value": readable(v, people)}
        for k, v in list(members)[:_ROWS]
        if k != "status"
    ]
    return {"kind": "fields", "owner": None, "label": label, "line": label, "rows": rows}


def _list_of(out: Mapping[str, Any], *keys: str) -> list[Any] | None:
    for k in keys:
        if isinstance(out.get(k), list):
            return list(out[k])
    return None


def _shape(out: Mapping[str, Any]) -> str:
    """Which kind of read an output is, by its shape: a provider's refusal, busy stretches,
    appointment times, free stretches, a cart, offers, or anything else."""
    status, slots = out.get("status"), _list_of(out, "slots")
    if isinstance(status, int) and not 200 <= status < 300:
        kind = "failed"
    elif "busy" in out:
        kind = "busy"
    elif slots is not None:
        timed = all(isinstance(s, Mapping) and "at" in s for s in slots)
        kind = "times" if timed else "free"
    elif isinstance(out.get("lines"), list):
        kind = "cart"
    elif _list_of(out, "offers", "shortlist") is not None:
        kind = "offers"
    else:
        kind = "fields"
    return kind


def _one_read(
    step: Step, out: Any, title: str, currency: str | None, people: Sequence[Contact]
) -> Item:
    """One read's output as the card shows it, by the shape of what it returned."""
    kind = _shape(out) if isinstance(out, Mapping) else "fields"
    if kind == "failed":
        answered = f"{title}: the provider answered {out.get('status')}"
        return {"kind": "failed", "owner": None, "label": title, "line": answered}
    reads = {
        "busy": lambda: _busy_read(step, out, people),
        "times": lambda: _times_read(step, _list_of(out, "slots") or []),
        "free": lambda: _free_read(step, out, people),
        "cart": lambda: _cart_read(step, out, currency, people),
        "offers": lambda: _offers_read(step, _list_of(out, "offers", "shortlist") or [], currency),
    }
    return reads[kind]() if kind in reads else _fields_read(title, out, people)


def _writes(step: Step, registry: Registry) -> bool:
    """Whether the step is a write (by its op in the registry; by its role when unknown)."""
    conn = registry.connectors.get(str(step.get("uses")))
    op = conn.ops.get(str(step.get("call"))) if conn else None
    if op is None:
        return step.get("role") in ("Booker", "Notifier")
    return op.safety == "write"


def _op_title(step: Step, registry: Registry) -> str:
    """What a step does, from the registry (the op's description, else connector · call)."""
    conn = registry.connectors.get(str(step.get("uses")))
    op = conn.ops.get(str(step.get("call"))) if conn else None
    if op is not None and op.description:
        return op.description.split(";")[0].rstrip(".")
    return f"{conn.title if conn else step.get('uses')}: {_name(step.get('call'))}"


def shown_reads(
    plan: Mapping[str, Any],
    outputs: Mapping[Any, Any],
    registry: Registry,
    people: Sequence[Contact] = (),
) -> list[Item]:
    """Each read the preview made (``outputs``: step → normalized output), in step order, as
    the card shows it: ``{step, kind, owner, label, line, …}`` — ``busy``: ``busy``/``free``
    stretches and the ``window``; ``free``: stretches free for everyone; ``offers``: ``rows``
    (item, title, price, quantity, total) and ``currency``; ``times``: appointment instants;
    ``fields``/``failed``: lines in words. Instants are UTC ISO strings."""
    currency = _currency(plan, registry)
    by_step = {int(k): v for k, v in outputs.items()}
    out = []
    for step in plan.get("graph", []):
        n = int(step["step"])
        if n not in by_step or step.get("gate_id") or _writes(step, registry):
            continue
        item = _one_read(step, by_step[n], _op_title(step, registry), currency, people)
        out.append({"step": n, "uses": step.get("uses"), "call": step.get("call"), **item})
    return out


# ---- writes -------------------------------------------------------------------------------------
def _when(args: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """How a write's start/end read: " at the time you pick below" for a gate's choice, or the
    instants (the page words them in the person's clock)."""
    start, end = args.get("start"), args.get("end")
    if _ref(start) is not None or _ref(end) is not None:
        picked = "gates." in str(start) + str(end)
        return (" at the time you pick below" if picked else " at the time found then"), None, None
    if _instant(start) and _instant(end):
        return "", str(start), str(end)
    return "", None, None


def _event_sentence(group: Sequence[Step], people: Sequence[Contact], title: str) -> Item:
    args = group[0].get("args", {})
    owners = [person(s.get("args", {}).get("user", "?"), people) for s in group]
    at, start, end = _when(args)
    invited = args.get("attendees") or []
    guests = [person(a, people) for a in (invited if isinstance(invited, list) else [invited])]
    text = f"Create the event “{readable(args.get('title', ''))}” in {_whose(owners, 'calendar')}"
    text += at + (f", with {_joined(guests)} invited" if guests else "") + f" ({title})"
    return {"text": text, "start": start, "end": end}


def _mail_sentence(group: Sequence[Step], people: Sequence[Contact], title: str) -> Item:
    args = group[0].get("args", {})
    to = _joined([person(s.get("args", {}).get("to", "?"), people) for s in group])
    text = f"Mail {to} “{readable(args.get('subject', ''))}”: {readable(args.get('body', ''))}"
    if "details" in args:
        text += f" — with the details of {readable(args['details'])}"
    if args.get("event"):
        text += " — with the event attached, for their calendar"
    return {"text": f"{text} ({title})", "start": None, "end": None}


def _write_sentence(
    step: Step, registry: Registry, people: Sequence[Contact], cur: str | None
) -> str:
    """One write that is not an event or a mail, in a sentence from its args' shape."""
    args = step.get("args", {})
    conn = registry.connectors.get(str(step.get("uses")))
    op = conn.ops.get(str(step.get("call"))) if conn else None
    whose = (
        _whose([person(args["customer"], people)], "cart") if args.get("customer") else "the cart"
    )
    where = f" at {_place(args['consulate'])}" if args.get("consulate") else ""
    if "item" in args and "quantity" in args:
        item = "the offer you pick below" if _ref(args["item"]) else readable(args["item"])
        return f"Add {readable(args['quantity'])} × {item} to {whose}"
    if op is not None and op.budget is not None:
        limit = _money(args.get(op.budget.arg)) or readable(args.get(op.budget.arg))
        return f"Buy what is in {whose}, only if its total is at most {limit}{f' {cur}' if cur else ''}"
    if "slot" in args or "slot_id" in args:
        slot = args.get("slot", args.get("slot_id"))
        what = "the slot you pick below" if "gates." in str(slot) else readable(slot)
        verb = "Hold" if "slot_id" in args else "Book"
        return f"{verb} the appointment{where}: {what}"
    if "channel" in args and "text" in args:
        return f"Post to #{readable(args['channel'])}: “{readable(args['text'])}”"
    said = "; ".join(f"{_name(k)}: {readable(v, people)}" for k, v in args.items())
    return f"{_op_title(step, registry)}{f' — {said}' if said else ''}"


def _group_key(step: Step) -> tuple[Any, ...]:
    """Writes that say one thing to several people read as one sentence: the same event in
    each attendee's calendar (its uid), the same mail to each attendee."""
    args = step.get("args", {})
    if {"title", "start", "end"} <= set(args):
        return ("event", step.get("uses"), str(args.get("uid") or args.get("title")))
    if {"to", "subject"} <= set(args):
        return ("mail", step.get("uses"), str(args.get("subject")), str(args.get("body")))
    return ("one", step.get("step"))


def _named_steps(text: str, plan: Mapping[str, Any], registry: Registry) -> str:
    """ "what step 3 returns" → "what step 3 returns (Book the chosen slot)": the step named
    by what its op does (the registry's description)."""
    for step in plan.get("graph", []):
        said = f"what step {step.get('step')} returns"
        if said in text:
            text = text.replace(said, f"{said} ({_op_title(step, registry)})")
    return text


def shown_writes(
    plan: Mapping[str, Any], registry: Registry, people: Sequence[Contact] = ()
) -> list[Item]:
    """Each write the plan will make, one sentence per thing done (the same event in several
    calendars, the same mail to several people, read as one): ``{steps, text, start, end}`` —
    ``start``/``end`` UTC instants when the time is known now (the page words them)."""
    currency = _currency(plan, registry)
    groups: dict[tuple[Any, ...], list[Step]] = {}
    for step in plan.get("graph", []):
        if step.get("gate_id") or not _writes(step, registry):
            continue
        groups.setdefault(_group_key(step), []).append(step)
    out = []
    for key, group in groups.items():
        title = conn.title if (conn := registry.connectors.get(str(group[0].get("uses")))) else ""
        if key[0] == "event":
            said = _event_sentence(group, people, title)
        elif key[0] == "mail":
            said = _mail_sentence(group, people, title)
            said["text"] = _named_steps(said["text"], plan, registry)
        else:
            said = {
                "text": _write_sentence(group[0], registry, people, currency),
                "start": None,
                "end": None,
            }
        out.append({"steps": [int(s["step"]) for s in group], **said})
    return out


def shown_plan(
    plan: Mapping[str, Any],
    outputs: Mapping[Any, Any] | None,
    registry: Registry,
    people: Sequence[Contact] = (),
    me: str | None = None,
) -> dict[str, Any]:
    """What the card shows of ``plan``: ``{reads, writes, currency}`` (``outputs``: what the
    preview read, step → normalized output; None: nothing read yet; ``me``: the address of the
    person asking, named "you")."""
    people = [Contact(YOU, me), *people] if me else people
    return {
        "reads": shown_reads(plan, outputs or {}, registry, people),
        "writes": shown_writes(plan, registry, people),
        "currency": _currency(plan, registry),
    }
