"""What a person may choose at a gate, and the one check that a choice is one of them.

GLOBAL_SPEC §13 inv. 3f: a write runs with the choice made at its gate only when that choice is one
the preview offered, or inside what it offered. Everything here is derived from the **signed
plan** and the **outputs the person saw** (the stored preview, or the fresh reads of the staleness
check), never from the choice itself:

- the gate's writes name the fields they take (``{"$ref": "gates.gate-A.choice.start"}``); a gate
  whose writes take nothing accepts no choice at all;
- the offering step is the nearest ancestor of the gate whose registry op declares ``offers``
  (PluginRegistry ``Offers``): ``option`` — the choice equals one offer, projected through
  ``pick`` (or the offer itself, whole, as listed); ``range`` — the choice is ``{start, end}`` inside one offered stretch, exactly the
  op's signed ``duration_arg`` minutes long, inside its signed ``window`` and not in the past;
- a gate whose writes take a choice but no offer is declared before it, or whose offering step
  has not been seen, accepts nothing (closed by default).

``check_choice`` returns the canonical choice (timestamps in the one UTC spelling), which is what
the token stores, what its hash covers and what the writes receive. Pure: the clock is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from countersign.kernel import InputError, Plan, content_hash, format_utc
from countersign.registry import Offers, Registry

__all__ = [
    "ChoiceError",
    "GateOffer",
    "ancestors",
    "check_choice",
    "gate_offer",
    "offered_choices",
]

_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})", re.ASCII
)
_CHOICE_REF = re.compile(r"^gates\.(gate-[A-Z]{1,3})\.choice(?:\.(.+))?$")


class ChoiceError(InputError):
    """A gate's choice is not one the preview offered (names the gate and the field)."""

    code = "choice_invalid"

    def __init__(self, message: str, *, gate_id: str, field: str) -> None:
        super().__init__(f"{gate_id}: {field}: {message}")
        self.gate_id, self.field = gate_id, field


@dataclass(frozen=True)
class GateOffer:
    """What one gate accepts, as derived from the signed plan and the outputs seen."""

    gate_id: str
    #: the choice fields the gate's writes read ("" = the whole choice); empty: no choice taken
    fields: frozenset[str]
    spec: Offers | None = None
    #: the offering step (None when no ancestor of the gate declares offers)
    step: int | None = None
    #: whether the offering step's output was seen (previewed, or found by a watcher)
    seen: bool = False
    #: option: the accepted choices; range: the offered ``(start, end)`` stretches
    options: tuple[Any, ...] = ()
    #: option: the offers themselves, as listed (a choice may also be one of these, whole)
    offers: tuple[Any, ...] = ()
    duration: timedelta | None = None
    window: tuple[datetime, datetime] | None = None

    @property
    def takes_choice(self) -> bool:
        """Whether the gate's writes read a choice at all."""
        return bool(self.fields)


def _refs(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        ref = value.get("$ref")
        if set(value) == {"$ref"} and isinstance(ref, str):
            return [ref]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _fields(plan: Plan, gate_id: str) -> frozenset[str]:
    out: set[str] = set()
    for s in plan.graph:
        for ref in _refs(s.args):
            m = _CHOICE_REF.match(ref)
            if m and m.group(1) == gate_id:
                out.add(m.group(2) or "")
    return frozenset(out)


def ancestors(plan: Plan, n: int) -> set[int]:
    """Every step ``n`` depends on, directly or not."""
    out: set[int] = set()
    stack = list(plan.step(n).after)
    while stack:
        d = stack.pop()
        if d not in out:
            out.add(d)
            stack.extend(plan.step(d).after)
    return out


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not _ISO.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def _project(offer: Any, pick: Mapping[str, str]) -> dict[str, Any] | None:
    """The choice that picks ``offer`` (None when the offer lacks a picked field)."""
    out: dict[str, Any] = {}
    for path, fld in sorted(pick.items()):
        value = _get(offer, fld)
        if value is None:
            return None
        *heads, last = path.split(".")
        at = out
        for h in heads:
            at = at.setdefault(h, {})
        at[last] = value
    return out


def _listed(outputs: Mapping[int, Any], step: int, spec: Offers) -> tuple[bool, list[Any]]:
    if step not in outputs:
        return False, []
    out = outputs[step]
    if isinstance(out, Mapping) and isinstance(out.get("output"), Mapping):
        out = out["output"]
    found = out.get(spec.list) if isinstance(out, Mapping) else None
    return True, list(found) if isinstance(found, list) else []


def _ranges(listed: Sequence[Any]) -> tuple[tuple[datetime, datetime], ...]:
    out = []
    for r in listed:
        s, e = _timestamp(_get(r, "start")), _timestamp(_get(r, "end"))
        if s is not None and e is not None and s < e:
            out.append((s, e))
    return tuple(out)


def _duration(args: Mapping[str, Any], spec: Offers) -> timedelta | None:
    d = args.get(spec.duration_arg) if spec.duration_arg else None
    if isinstance(d, bool) or not isinstance(d, int) or d <= 0:
        return None
    return timedelta(minutes=d)


def _window(args: Mapping[str, Any], spec: Offers) -> tuple[datetime, datetime] | None:
    if spec.window is None:
        return None
    s, e = _timestamp(args.get(spec.window[0])), _timestamp(args.get(spec.window[1]))
    return (s, e) if s is not None and e is not None else None


def gate_offer(
    plan: Plan, registry: Registry, gate_id: str, outputs: Mapping[int, Any]
) -> GateOffer:
    """What ``gate_id`` accepts, given the outputs the person saw (step number → output)."""
    gate_step = next((s.step for s in plan.graph if s.gate_id == gate_id), None)
    if gate_step is None:
        raise InputError(f"plan {plan.plan_id} has no gate {gate_id[:16]!r}")
    fields = _fields(plan, gate_id)
    offering = [
        a
        for a in sorted(ancestors(plan, gate_step))
        if plan.step(a).gate_id is None
        and registry.op(plan.step(a).uses, plan.step(a).call).offers is not None
    ]
    if not fields or not offering:
        return GateOffer(gate_id, fields)
    step = plan.step(offering[-1])
    spec = registry.op(step.uses, step.call).offers
    if spec is None:  # pragma: no cover - filtered above
        return GateOffer(gate_id, fields)
    seen, listed = _listed(outputs, step.step, spec)
    if spec.kind == "option":
        pairs = [(p, o) for o in listed if (p := _project(o, spec.pick)) is not None]
        return GateOffer(
            gate_id,
            fields,
            spec,
            step.step,
            seen,
            options=tuple(p for p, _ in pairs),
            offers=tuple(o for _, o in pairs),
        )
    return GateOffer(
        gate_id,
        fields,
        spec,
        step.step,
        seen,
        options=_ranges(listed),
        duration=_duration(step.args, spec),
        window=_window(step.args, spec),
    )


def check_choice(offer: GateOffer, choice: Any, *, now: datetime | None) -> Any:
    """The canonical form of ``choice`` if ``offer`` accepts it; else ``ChoiceError`` naming the
    field. ``now`` is None only when resuming writes already claimed (then the past is not
    re-judged: the write happened or is in flight)."""
    g = offer.gate_id
    if not offer.takes_choice:
        if choice is None:
            return None
        raise ChoiceError(
            "this gate's writes take no choice; approve it without one", gate_id=g, field="choice"
        )
    if offer.spec is None:
        raise ChoiceError(
            "no step before this gate offers choices (the registry declares no 'offers'), so no "
            "choice can be checked: nothing is approved",
            gate_id=g,
            field="choice",
        )
    if not offer.seen:
        raise ChoiceError(
            f"step {offer.step} has not been previewed (or found anything) yet: nothing has "
            "been offered to choose from; preview the plan first",
            gate_id=g,
            field="choice",
        )
    if not isinstance(choice, Mapping):
        raise ChoiceError(
            f"expected an object, got {type(choice).__name__}", gate_id=g, field="choice"
        )
    try:
        content_hash(dict(choice))
    except InputError as e:
        raise ChoiceError(
            f"cannot be read as one canonical JSON value ({e.message[:120]})",
            gate_id=g,
            field="choice",
        ) from e
    if offer.spec.kind == "option":
        return _check_option(offer, offer.spec, choice)
    return _check_range(offer, choice, now)


def _check_option(offer: GateOffer, spec: Offers, choice: Mapping[str, Any]) -> Any:
    g = offer.gate_id
    picked = sorted(spec.pick)
    wanted = content_hash(dict(choice))
    for projected, whole in zip(offer.options, offer.offers, strict=True):
        if wanted in (content_hash(projected), content_hash(whole)):
            return projected
    allowed_top = {p.split(".")[0] for p in picked}
    for k in sorted(set(choice) - allowed_top, key=str):
        raise ChoiceError(
            f"not something this gate offers (it takes {sorted(allowed_top)})",
            gate_id=g,
            field=f"choice.{str(k)[:40]}",
        )
    if not offer.options:
        raise ChoiceError(
            "the preview offered nothing to choose (e.g. nothing within the budget); nothing "
            "can be approved here — change the request",
            gate_id=g,
            field="choice",
        )
    path = next(
        (p for p in picked if _get(choice, p) not in [_get(o, p) for o in offer.options]),
        picked[0],
    )
    shown = ", ".join(repr(_get(o, path)) for o in offer.options[:8])
    raise ChoiceError(
        f"{_get(choice, path)!r:.60} is not one of the offered ({shown})",
        gate_id=g,
        field=f"choice.{path}",
    )


def _check_range(offer: GateOffer, choice: Mapping[str, Any], now: datetime | None) -> Any:
    g = offer.gate_id
    for k in sorted(set(choice) - {"start", "end"}, key=str):
        raise ChoiceError(
            "not part of a time slot (it takes start and end)", gate_id=g, field=f"choice.{k!s:.40}"
        )
    start, end = _instant(g, choice, "start"), _instant(g, choice, "end")
    if end <= start:
        raise ChoiceError("ends before it starts", gate_id=g, field="choice.end")
    if offer.duration is None:
        raise ChoiceError("the signed plan gives no length for the slot", gate_id=g, field="choice")
    if end - start != offer.duration:
        raise ChoiceError(
            f"the slot must last exactly {_minutes(offer.duration)} (as signed), not "
            f"{_minutes(end - start)}",
            gate_id=g,
            field="choice.end",
        )
    if now is not None and start < now:
        raise ChoiceError(
            f"{format_utc(start)} is in the past (now {format_utc(now)})",
            gate_id=g,
            field="choice.start",
        )
    if offer.window is not None and not (offer.window[0] <= start and end <= offer.window[1]):
        raise ChoiceError(
            f"outside the signed window {format_utc(offer.window[0])} – "
            f"{format_utc(offer.window[1])}",
            gate_id=g,
            field="choice.start",
        )
    if not any(s <= start and end <= e for s, e in offer.options):
        free = ", ".join(f"{format_utc(s)} – {format_utc(e)}" for s, e in offer.options[:6])
        raise ChoiceError(
            f"{format_utc(start)} – {format_utc(end)} is not inside a free time the preview "
            f"offered ({free or 'none'})",
            gate_id=g,
            field="choice.start",
        )
    return {"start": format_utc(start), "end": format_utc(end)}


def _instant(gate_id: str, choice: Mapping[str, Any], name: str) -> datetime:
    t = _timestamp(choice.get(name))
    if t is None:
        raise ChoiceError(
            f"expected an ISO 8601 date-time with a zone, got {choice.get(name)!r:.60}",
            gate_id=gate_id,
            field=f"choice.{name}",
        )
    return t


def _minutes(d: timedelta) -> str:
    m = d.total_seconds() / 60
    return f"{m:g} minutes"


def offered_choices(offer: GateOffer, *, now: datetime, per_range: int = 8) -> list[dict[str, Any]]:
    """The choices to show a person (each one ``check_choice`` accepts at ``now``): every
    offered option; for ranges, up to ``per_range`` slots of the signed length spread over each
    free stretch from its start (or from now), on steps of a quarter hour (at least 15 minutes,
    30 past an hour-long meeting, wider when the stretch is long), so a free afternoon offers
    its whole afternoon, not its first two hours."""
    if not offer.takes_choice or offer.spec is None:
        return []
    if offer.spec.kind == "option":
        return [{"value": o} for o in offer.options]
    if offer.duration is None:
        return []
    least = timedelta(minutes=15 if offer.duration <= timedelta(hours=1) else 30)
    lo, hi = offer.window or (datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC))
    out: list[dict[str, Any]] = []
    for s, e in offer.options:
        t, n = max(s, lo), 0
        room = min(e, hi) - max(t, now) - offer.duration
        quarters = -(-room // (timedelta(minutes=15) * max(per_range - 1, 1)))  # ceiling
        step = max(least, timedelta(minutes=15) * max(quarters, 1))
        while t + offer.duration <= min(e, hi) and n < per_range:
            if t >= now:
                out.append(
                    {"value": {"start": format_utc(t), "end": format_utc(t + offer.duration)}}
                )
                n += 1
            t += step
    return out
