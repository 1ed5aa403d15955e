"""What a person sees of a durable run in the Temporal UI: the one-line summary and the details
set at start (``static_summary`` / ``static_details``), and the live line the workflow keeps
current (``workflow.set_current_details``). Pure: the worker and the workflow call these."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from countersign.kernel import PlanStep, SignedPlan

from .models import StepCall, WatchInput, WatchState

__all__ = [
    "every",
    "plan_details",
    "plan_now",
    "plan_step_summary",
    "plan_summary",
    "watch_details",
    "watch_now",
    "watch_summary",
    "write_summary",
]

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


def _step(signed: SignedPlan, n: int) -> PlanStep | None:
    return next((s for s in signed.plan.graph if s.step == n), None)


def _op(step: PlanStep | None) -> str:
    return f"{step.uses}.{step.call}" if step is not None else "?.?"


def _head(signed: SignedPlan) -> str:
    """``**Plan** `<id>` · intent `<intent>` · hash `<12 hex>…``."""
    plan = signed.plan
    return (
        f"**Plan** `{plan.plan_id}` · intent `{plan.intent.intent}`"
        f" · hash `{signed.plan_hash[:12]}…`"
    )


def _what(args: Mapping[str, Any]) -> list[str]:
    """The watched arguments a person recognises (scalars, dates shortened to the day)."""
    out = []
    for k, v in args.items():
        if k in _POLL_ARGS or isinstance(v, (dict, list)):
            continue
        text = str(v)
        out.append(text[:10] if k.startswith("date") and len(text) >= 10 else text[:40])
    return out


def watch_summary(inp: WatchInput, owner: str | None = None) -> str:
    """``Watcher · u-3f9c… · visa.sandbox.find_slots · lisbon · 2027-03-01 · 2027-03-31 ·
    hourly`` (the UI's list and header show it); ``owner`` is the person's opaque id (never the
    address: the UI shows this to whoever reaches it), none without a payload codec."""
    step = _step(inp.signed, inp.watch_step)
    parts = [
        "Watcher",
        *([owner] if owner else []),
        _op(step),
        *_what(step.args if step is not None else {}),
        every(inp.poll_interval_s),
    ]
    return " · ".join(parts)[:200]


def watch_details(inp: WatchInput) -> str:
    """The run's details pane (Markdown): the plan, what approval leads to, the budget, how to
    cancel. No signature, token or secret: those never leave the signed payload."""
    book = _step(inp.signed, inp.book_step)
    lines = [
        _head(inp.signed),
        f"**Watches** step {inp.watch_step} {every(inp.poll_interval_s)}, at most "
        f"{inp.max_polls} polls within {inp.max_lifetime_s // 3600} h",
        f"**When found** {inp.gate_id} asks the person; on approval step {inp.book_step} "
        f"`{_op(book)}` runs" + (f", then step {inp.notify_step} mails" if inp.notify_step else ""),
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


def plan_summary(signed: SignedPlan, owner: str | None = None) -> str:
    """``Plan · purchase_item · u-3f9c… · 6 steps · 2 gates`` (``owner``: the opaque id, as
    :func:`watch_summary`)."""
    graph = signed.plan.graph
    gates = sum(1 for s in graph if s.gate_id)
    return " · ".join(
        [
            "Plan",
            signed.plan.intent.intent,
            *([owner] if owner else []),
            f"{len(graph)} steps",
            f"{gates} gate{'s' if gates != 1 else ''}",
        ]
    )[:200]


def _gates_before(graph: list[PlanStep], n: int) -> list[str]:
    """The gates step ``n`` depends on (through its ``after`` steps), in step order."""
    by_step = {s.step: s for s in graph}
    seen: set[int] = set()
    todo = list(by_step[n].after) if n in by_step else []
    while todo:
        d = todo.pop()
        if d not in seen and d in by_step:
            seen.add(d)
            todo.extend(by_step[d].after)
    return [g for d in sorted(seen) if (g := by_step[d].gate_id)]


def _gate(step: PlanStep | None) -> str:
    return step.gate_id or "?" if step is not None else "?"


def write_summary(call: StepCall) -> str:
    """``write step 3 (visa.sandbox.hold_slot) · approved at gate-A`` — what the Temporal UI
    shows on a watcher's write (metadata only: histories replay unchanged)."""
    gate = f" · approved at {call.gate_id}" if call.gate_id else ""
    return f"write step {call.step} ({_op(_step(call.signed, call.step))}){gate}"[:200]


def plan_step_summary(signed: SignedPlan, n: int) -> str:
    """What the Temporal UI shows on a plan step's activity or timer: ``read step 1
    (visa.sandbox.find_slots)``, ``write step 4 (visa.sandbox.book_slot) · approved at gate-A``,
    ``gate-A (step 3): waiting for the person's decision``."""
    step = _step(signed, n)
    if step is not None and step.gate_id:
        return f"{step.gate_id} (step {n}): waiting for the person's decision"[:200]
    if step is not None and step.dry_run:
        return f"read step {n} ({_op(step)})"[:200]
    gates = _gates_before(signed.plan.graph, n)
    approved = f" · approved at {', '.join(gates)}" if gates else ""
    return f"write step {n} ({_op(step)}){approved}"[:200]


def plan_details(signed: SignedPlan, owner: str | None = None) -> str:
    """The details pane of a ``PlanExecutionWorkflow`` (Markdown): the plan, its steps in order
    (reads, gates, writes and the gates each write waits for), how to cancel. No signature, token,
    argument value or secret."""
    steps = []
    for s in signed.plan.graph:
        after = f" after {', '.join(str(a) for a in s.after)}" if s.after else ""
        if s.gate_id:
            steps.append(f"{s.step}. gate `{s.gate_id}` — the person decides{after}")
        else:
            kind = "read" if s.dry_run else "write"
            steps.append(f"{s.step}. {kind} `{_op(s)}`{after}")
    lines = [
        _head(signed) + (f" · for {owner}" if owner else ""),
        "**Steps**\n" + "\n".join(steps),
        "**Cancel** from the chat card, `countersign cancel <plan_id>` or "
        "`POST /v1/plans/<plan_id>/cancel`",
    ]
    return "\n\n".join(lines)


def plan_now(signed: SignedPlan, status: dict[int, str], *, ended: str | None = None) -> str:
    """The live line of a ``PlanExecutionWorkflow``: ``**running** · done 2/5 · running step 4
    (visa.sandbox.book_slot) · waiting gate-A (step 3)`` — or how it ended."""
    done = sum(1 for v in status.values() if v == "done")
    head = ended or (
        "waiting_approval"
        if any(v == "waiting_approval" for v in status.values())
        else "outcome_unknown"
        if any(v == "outcome_unknown" for v in status.values())
        else "running"
    )
    parts = [f"**{head}**", f"done {done}/{len(status)}"]
    for label, wanted in (("running", "running"), ("unknown outcome", "outcome_unknown")):
        steps = [n for n, v in sorted(status.items()) if v == wanted]
        if steps:
            ops = ", ".join(f"step {n} ({_op(_step(signed, n))})" for n in steps)
            parts.append(f"{label} {ops}")
    gates = [n for n, v in sorted(status.items()) if v == "waiting_approval"]
    if gates:
        waits = ", ".join(f"{_gate(_step(signed, n))} (step {n})" for n in gates)
        parts.append(f"waiting {waits}")
    other = [f"{n} {v}" for n, v in sorted(status.items()) if v in {"failed", "compensated"}]
    if other:
        parts.append("steps " + ", ".join(other))
    return " · ".join(parts)[:400]
