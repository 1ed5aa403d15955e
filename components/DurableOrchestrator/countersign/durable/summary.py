"""What a person sees of a durable run in the Temporal UI: the one-line summary and the details
set at start (``static_summary`` / ``static_details``), and the live line the workflow keeps
current (``workflow.set_current_details``). Pure: the worker and the workflow call these."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .models import WatchInput, WatchState

__all__ = ["every", "plan_summary", "watch_details", "watch_now", "watch_summary"]

_POLL_ARGS = {"poll_interval_s", "max_polls", "max_lifetime_s"}


def every(seconds: int | float) -> str:
    """``3600`` → ``hourly``; ``90`` → ``every 90 s``; ``7200`` → ``every 2 h``."""
    s = int(seconds)
    named = {60: "every minute", 3600: "hourly", 86400: "daily"}
    if s in named:
        return named[s]
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s % size == 0:
            return f"every {s // size} {unit}"
    return f"every {s} s"


def _step(signed: dict[str, Any], n: int) -> dict[str, Any]:
    graph = signed.get("plan", {}).get("graph", [])
    found = [s for s in graph if s.get("step") == n]
    return found[0] if found else {}


def _what(args: dict[str, Any]) -> list[str]:
    """The watched arguments a person recognises (scalars, dates shortened to the day)."""
    out = []
    for k, v in args.items():
        if k in _POLL_ARGS or isinstance(v, (dict, list)):
            continue
        text = str(v)
        out.append(text[:10] if k.startswith("date") and len(text) >= 10 else text[:40])
    return out


def watch_summary(inp: WatchInput) -> str:
    """``Watcher · alice@example.com · visa.sandbox.find_slots · lisbon · 2027-03-01 · 2027-03-31 ·
    hourly`` (the UI's list and header show it)."""
    step = _step(inp.signed, inp.watch_step)
    parts = [
        "Watcher",
        inp.user_id,
        f"{step.get('uses', '?')}.{step.get('call', '?')}",
        *_what(step.get("args", {})),
        every(inp.poll_interval_s),
    ]
    return " · ".join(parts)[:200]


def watch_details(inp: WatchInput) -> str:
    """The run's details pane (Markdown): the plan, what approval leads to, the budget, how to
    cancel. No signature, token or secret: those never leave the signed payload."""
    plan = inp.signed.get("plan", {})
    book = _step(inp.signed, inp.book_step)
    lines = [
        f"**Plan** `{plan.get('plan_id', '?')}` · intent `{plan.get('intent', {}).get('intent', '?')}`"
        f" · hash `{str(inp.signed.get('plan_hash', ''))[:12]}…`",
        f"**Watches** step {inp.watch_step} {every(inp.poll_interval_s)}, at most "
        f"{inp.max_polls} polls within {inp.max_lifetime_s // 3600} h",
        f"**When found** {inp.gate_id} asks the person; on approval step {inp.book_step} "
        f"`{book.get('uses', '?')}.{book.get('call', '?')}` runs"
        + (f", then step {inp.notify_step} mails" if inp.notify_step else ""),
        "**Cancel** from the chat card, `countersign cancel <plan_id>` or "
        "`POST /v1/plans/<plan_id>/cancel`",
    ]
    return "\n\n".join(lines)


def _t(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "—"


def watch_now(st: WatchState, *, ended: str | None = None) -> str:
    """The live line: state (or how the run ended), polls, last and next poll, errors, what was
    found."""
    waiting = st.status == "watching" and ended is None
    line = (
        f"**{ended or st.status}** · polls {st.polls} · last {_t(st.last_poll_at)} · "
        f"next {_t(st.next_poll_at) if waiting else '—'}"
    )
    if st.errors:
        line += f" · errors in a row {st.errors}"
    if st.found is not None:
        line += f" · found `{str(st.found)[:120]}`"
    return line


def plan_summary(signed: dict[str, Any], user_id: str) -> str:
    """``Plan · purchase_item · alice@example.com · 6 steps · 2 gates``."""
    plan = signed.get("plan", {})
    graph = plan.get("graph", [])
    gates = sum(1 for s in graph if s.get("gate_id"))
    return " · ".join(
        [
            "Plan",
            str(plan.get("intent", {}).get("intent", "?")),
            user_id,
            f"{len(graph)} steps",
            f"{gates} gate{'s' if gates != 1 else ''}",
        ]
    )[:200]
