"""What a chat reply shows of what was understood (Api SPEC, chat text: ``understood`` and the
questions): each entity as a person reads it — a duration in minutes and hours, an instant in the
person's zone, an amount with its currency, people by name and e-mail — with the words it came
from, and each question naming what is missing and why.

Pure: values, the person's zone and contacts in; JSON-ready dicts out. The reply carries them and
the chat page shows ``line`` (and edits ``edit``) as given, so the API and the page say the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from countersign.intake import Contact

__all__ = ["asked", "label_of", "shown", "understood"]

#: how a person reads an entity's name
_LABELS = {
    "participants": "People",
    "duration_min": "Duration",
    "window_start": "From",
    "window_end": "Until",
    "title": "Title",
    "query": "Looking for",
    "max_price": "Budget",
    "quantity": "Quantity",
    "notify_to": "Send the confirmation to",
    "consulates": "Consulates",
    "consulate": "Consulate",
    "date_from": "Earliest date",
    "date_to": "Latest date",
    "poll_interval_s": "Check every",
    "max_polls": "Checks at most",
    "max_lifetime_s": "Keep watching for",
    "hold": "Hold a slot while you decide",
}
#: what a question says is still missing ("I still need <noun>: …")
_NOUNS = {
    "participants": "who should attend",
    "duration_min": "the meeting's length",
    "window_start": "when it may start",
    "window_end": "when it must end",
    "title": "the meeting's title",
    "query": "what to look for",
    "max_price": "your budget",
    "quantity": "how many",
    "consulates": "which consulates",
    "consulate": "which consulate",
    "date_from": "the earliest date",
    "date_to": "the latest date",
    "notify_to": "where to send the confirmation",
}
_SPANS = (("day", 86400), ("h", 3600), ("min", 60), ("s", 1))


def label_of(entity: str) -> str:
    """An entity's name as a person reads it ("duration_min" → "Duration")."""
    if entity in _LABELS:
        return _LABELS[entity]
    plain = entity.removesuffix("_min").removesuffix("_s").replace("_", " ").strip()
    return plain[:1].upper() + plain[1:]


def _span(seconds: int) -> str:
    """A length of time: 2700 → "45 min", 4500 → "1 h 15 min", 259200 → "3 days"."""
    parts, rest = [], max(seconds, 0)
    for unit, size in _SPANS:
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n} {unit}{'s' if unit == 'day' and n > 1 else ''}")
    return " ".join(parts) or "0 min"


def _instant(value: Any, tz: str) -> datetime | None:
    """An ISO instant (``Z`` or an offset) in the zone ``tz``; None if it is not one."""
    try:
        at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at.astimezone(ZoneInfo(tz)) if at.tzinfo is not None else None


def _when(value: Any, tz: str) -> str:
    """An instant in the person's zone: "Thu 26 Nov 2026, 13:00 (Europe/Berlin)"."""
    at = _instant(value, tz)
    if at is None:
        return str(value)
    return f"{at:%a} {at.day} {at:%b %Y, %H:%M} ({tz})"


def _amount(value: Any, currency: str | None) -> str:
    """An amount with its currency (its own, else the entity's as the registry declares it):
    "15" → "15.00 EUR", {"amount": "15", "currency": "USD"} → "15.00 USD"; none known: "15.00"."""
    if isinstance(value, Mapping):
        currency = str(value.get("currency") or currency or "") or None
        value = value.get("amount")
    try:
        amount = str(Decimal(str(value)).quantize(Decimal("0.01")))
    except (InvalidOperation, ValueError):
        amount = str(value)
    return f"{amount} {currency}" if currency else amount


def _person(value: Any, people: Sequence[Contact]) -> str:
    """One person: "Alice <alice@example.com>" when a contact has that address (or name)."""
    said = str(value)
    for c in people:
        if said.lower() in (c.email.lower(), c.name.lower()):
            return f"{c.name} <{c.email}>"
    return said


def _place(value: Any) -> str:
    """A consulate: a name as given, or country × city ("Italy, Chicago")."""
    if isinstance(value, Mapping):
        return ", ".join(str(value[k]) for k in ("country", "city") if value.get(k)) or "?"
    return str(value)


#: how one value (not a list) reads, by the first rule that fits ``(entity, registry type,
#: value)``; anything else reads as itself
_RULES: tuple[
    tuple[
        Callable[[str, str | None, Any], bool],
        Callable[[Any, str, Sequence[Contact]], str],
    ],
    ...,
] = (
    (lambda _e, _k, v: isinstance(v, bool), lambda v, _tz, _p: "yes" if v else "no"),
    (lambda _e, k, _v: k == "datetime", lambda v, tz, _p: _when(v, tz)),
    (
        lambda e, _k, v: isinstance(v, int) and e.endswith("_min"),
        lambda v, _tz, _p: _span(v * 60),
    ),
    (lambda e, _k, v: isinstance(v, int) and e.endswith("_s"), lambda v, _tz, _p: _span(v)),
    (
        lambda e, k, v: k == "email" or "@" in str(v) or e == "participants",
        lambda v, _tz, p: _person(v, p),
    ),
    (lambda e, _k, _v: e.startswith("consulate"), lambda v, _tz, _p: _place(v)),
    (
        lambda _e, _k, v: isinstance(v, Mapping | list),
        lambda v, _tz, _p: json.dumps(v, ensure_ascii=False, sort_keys=True),
    ),
)


def _one(entity: str, kind: str | None, value: Any, tz: str, people: Sequence[Contact]) -> str:
    """One value (not a list) as a person reads it."""
    for fits, reads in _RULES:
        if fits(entity, kind, value):
            return reads(value, tz, people)
    return str(value)


def shown(
    entity: str,
    value: Any,
    *,
    kind: str | None = None,
    tz: str = "UTC",
    people: Sequence[Contact] = (),
    currency: str | None = None,
) -> str:
    """``value`` of ``entity`` (of registry type ``kind``; ``currency``: an amount entity's, as
    the registry declares it) as a person reads it."""
    if (
        "price" in entity
        or "amount" in entity
        or (isinstance(value, Mapping) and "amount" in value)
    ):
        return _amount(value, currency)
    if isinstance(value, list):
        return ", ".join(_one(entity, None, v, tz, people) for v in value) or "nobody"
    return _one(entity, kind, value, tz, people)


def _edit(kind: str | None, value: Any, tz: str) -> Any:
    """The value as the card's edit field holds it: an instant as the person's local
    ``YYYY-MM-DDTHH:MM`` (a datetime-local field), a list as "a, b", an amount's number."""
    if kind == "datetime" and (at := _instant(value, tz)) is not None:
        return f"{at:%Y-%m-%dT%H:%M}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Mapping) and "amount" in value:
        return str(value["amount"])
    if isinstance(value, bool | int | float):
        return value
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def understood(
    entities: Mapping[str, Any],
    words: Mapping[str, str],
    *,
    kinds: Mapping[str, str],
    tz: str,
    people: Sequence[Contact] = (),
    changed: Sequence[str] = (),
    currencies: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Each understood entity, in the intent's order (``kinds``: entity → registry type):
    ``{entity, label, type, value, shown, edit, words, line}``; ``line`` is what the page shows
    ("Duration: 45 min — from "45 minutes""), ``changed`` the entities the person changed,
    ``currencies`` the amount entities' currencies the registry declares."""
    out = []
    for name in [*kinds, *(k for k in entities if k not in kinds)]:
        if name not in entities:
            continue
        value, kind = entities[name], kinds.get(name)
        label = label_of(name)
        currency = (currencies or {}).get(name)
        text = shown(name, value, kind=kind, tz=tz, people=people, currency=currency)
        said = words.get(name, "")
        line = f"{label}: {text}"
        if name in changed:
            line += " — changed by you"
        elif said:
            line += f" — from “{said}”"
        out.append(
            {
                "entity": name,
                "label": label,
                "type": kind,
                "value": value,
                "shown": text,
                "edit": _edit(kind, value, tz),
                "words": said,
                "line": line,
            }
        )
    return out


def asked(
    need: Mapping[str, Any],
    *,
    title: str | None,
    kind: str | None = None,
    tz: str = "UTC",
    currency: str | None = None,
) -> dict[str, Any]:
    """A question of the reply with what is missing and why: ``label``, ``ask`` ("To schedule a
    meeting I still need the meeting's length: how long should the meeting be, in minutes?")
    and, when the text said something that could not be taken (``heard``), ``heard_shown``."""
    entity, question = str(need["entity"]), str(need["question"])
    out = {**need, "label": label_of(entity)}
    if entity == "intent" or not title or not question:
        out["ask"] = question
    else:
        noun = _NOUNS.get(entity, f"the {label_of(entity).lower()}")
        why = title[:1].lower() + title[1:]
        out["ask"] = f"To {why} I still need {noun}: {question[:1].lower()}{question[1:]}"
    if need.get("heard") is not None:
        out["heard_shown"] = shown(entity, need["heard"], kind=kind, tz=tz, currency=currency)
    return out
