"""What a watcher's poll found, and whether the person's choice is the offer it holds.

The watcher knows no use case's fields: what a poll's output offers is declared by the watched
op's registry ``offers`` (PluginRegistry ``Offers``; GLOBAL_SPEC §8, "the choice at a gate"),
carried in ``WatchInput.offers`` — ``list`` names the field that lists the offers, ``pick`` how a
choice names one (``{slot.id: id}``: the choice ``{"slot": {"id": <offer.id>}}``). Without a
declaration the first non-empty list of the output is what was found — the rule the ``poll``
activity audits ``found`` by — and a choice names an offer by carrying some of its fields.
Pure (workflow code calls these; no clock, no I/O).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from countersign.registry import Offers

__all__ = ["offered", "picks"]


def offered(output: Any, offers: Offers | None) -> list[Any]:
    """The offers a poll's output lists (empty: nothing found)."""
    if not isinstance(output, Mapping):
        return []
    if offers is not None:
        found = output.get(offers.list)
        return list(found) if isinstance(found, list) else []
    return next((list(v) for v in output.values() if isinstance(v, list) and v), [])


def picks(choice: Any, offer: Any, offers: Offers | None) -> bool:
    """Whether ``choice`` (as the gate's approval returned it) is ``offer``."""
    if offers is not None and offers.pick:
        return all(
            _get(choice, path) is not None and _get(choice, path) == _get(offer, field)
            for path, field in offers.pick.items()
        )
    if not isinstance(choice, Mapping) or not isinstance(offer, Mapping):
        return False
    return any(v == offer or _within(v, offer) for v in choice.values())


def _within(part: Any, whole: Mapping[str, Any]) -> bool:
    """``part`` is some of ``whole``'s fields with their values (``{"id": "slot-3"}``)."""
    return (
        isinstance(part, Mapping)
        and bool(part)
        and all(k in whole and whole[k] == v for k, v in part.items())
    )


def _get(obj: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(name)
    return obj
