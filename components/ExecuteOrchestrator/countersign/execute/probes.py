"""Provider reads by a write's natural key, for settling an ``unknown`` write when n8n's record
cannot say (ExecuteOrchestrator SPEC 10): a read of the one thing the write would have made,
never a re-send.

- ``caldav.create_event``: GET the event's ``.ics`` by its UID in the user's calendar
  (200: the event is there → ``completed``; 404: it is not → ``failed``; else ``unknown``).
- ``smtp.send``, only where a mailbox can be read (the sandbox's mailbox page, setting
  ``mailbox_url``): the recipient's messages with the write's subject whose text holds its body
  (one → ``completed``, none → ``failed``, several → ``unknown``). A real SMTP server cannot be
  read: there the mail stays ``unknown`` for a person.
- ``shop.sandbox.add_to_cart`` and ``shop.sandbox.purchase`` (writes that carry the
  ``Idempotency-Key`` header): the shop's record of the write applied under the write's key
  (``GET /writes?key=``; 200: applied → ``completed`` with the shop's first answer, the cart line
  or the order, as the write's output; 404 naming the key: nothing was applied under it →
  ``failed``; else, a shop without that read included, ``unknown``). The key, not the args, names the write: two plans may add the same item to the
  same cart, and only the key tells them apart.

A probe is called with the write's step, its resolved args, the connector settings and the
write's idempotency key (``plan_id:step:arg_hash``, as the ledger holds it; ``""`` from a caller
that has none: a probe that needs it answers ``unknown``). A probe answers ``(completed | failed | unknown, output)``; the output of a ``completed`` one is
what the ledger keeps as the write's output. Ops without a probe stay ``unknown`` for a person.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from countersign.kernel import PlanStep

__all__ = ["Probe", "caldav_event", "default_probes", "sandbox_mail", "shop_write"]


class Probe(Protocol):
    """``(step, its resolved args, the connector settings, the write's key)`` →
    ``(completed | failed | unknown, output)``."""

    def __call__(
        self, step: PlanStep, args: Mapping[str, Any], settings: Mapping[str, str], key: str = ""
    ) -> Awaitable[tuple[str, Any]]: ...


#: the path each keyed shop write is applied at (what the shop's record must name)
_SHOP_PATHS = {"add_to_cart": "/cart", "purchase": "/checkout"}


async def caldav_event(
    step: PlanStep, args: Mapping[str, Any], settings: Mapping[str, str], key: str = ""
) -> tuple[str, Any]:
    """Is the event with the write's UID in the user's calendar? (a GET, nothing written)"""
    base = settings.get("caldav_base_url", "").rstrip("/")
    user, uid = args.get("user"), args.get("uid")
    if not base or not isinstance(user, str) or not isinstance(uid, str):
        return "unknown", None
    url = f"{base}/{quote(user, safe='@')}/calendar/{quote(uid, safe='@')}.ics"
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            r = await client.get(url)
    except httpx.HTTPError:
        return "unknown", None
    if r.status_code == 200 and uid in r.text:
        return "completed", {"status": 201}
    if r.status_code == 404:
        return "failed", None
    return "unknown", None


async def sandbox_mail(
    step: PlanStep, args: Mapping[str, Any], settings: Mapping[str, str], key: str = ""
) -> tuple[str, Any]:
    """Did the sandbox mailbox get this mail? (a GET of the recipient's messages)"""
    base = settings.get("mailbox_url", "").rstrip("/")
    to, subject, body = args.get("to"), args.get("subject"), args.get("body")
    if not base or not isinstance(to, str) or not isinstance(subject, str):
        return "unknown", None
    if not isinstance(body, str):
        return "unknown", None
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            r = await client.get(f"{base}/messages", params={"to": to})
        messages = r.json().get("messages") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return "unknown", None
    if not isinstance(messages, list):
        return "unknown", None
    same = [
        m
        for m in messages
        if isinstance(m, Mapping) and m.get("subject") == subject and body in str(m.get("body"))
    ]
    if len(same) == 1:
        return "completed", {"found_in_mailbox": True}
    return ("failed", None) if not same else ("unknown", None)


async def shop_write(
    step: PlanStep, args: Mapping[str, Any], settings: Mapping[str, str], key: str = ""
) -> tuple[str, Any]:
    """Did the shop apply a write under this key? (a GET of its record, nothing written)"""
    base = settings.get("shop_base_url", "").rstrip("/")
    path = _SHOP_PATHS.get(step.call)
    if not base or not key or path is None:
        return "unknown", None
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            r = await client.get(f"{base}/writes", params={"key": key})
        record = r.json() if r.status_code in (200, 404) else None
    except (httpx.HTTPError, ValueError):
        return "unknown", None
    if r.status_code == 404 and isinstance(record, Mapping) and record.get("key") == key:
        return "failed", None  # the shop's own "nothing under this key", not a missing route
    if not isinstance(record, Mapping) or record.get("key") != key or record.get("path") != path:
        return "unknown", None
    answer = record.get("answer")
    return ("completed", dict(answer)) if isinstance(answer, Mapping) else ("unknown", None)


def default_probes() -> dict[str, Probe]:
    """The probes this build knows, by ``connector.op``."""
    return {
        "caldav.create_event": caldav_event,
        "smtp.send": sandbox_mail,
        "shop.sandbox.add_to_cart": shop_write,
        "shop.sandbox.purchase": shop_write,
    }
