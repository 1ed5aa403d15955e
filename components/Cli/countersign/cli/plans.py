"""The plan verbs over the same service the HTTP API uses (GLOBAL_SPEC.md §12): ``plans list |
show ID``, ``preview | approve GATE [--choice JSON] | reject GATE | execute [--token GATE=T] |
cancel ID``, ``events ID [--follow]``, ``reconcile`` — each as ``--user`` (default ``local``, or
``COUNTERSIGN_USER``). ``main.py`` registers each function under its verb."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from countersign.kernel import InputError, loads_strict

from .exits import guard
from .service import (
    DEFAULT_USER,
    PolicyOpt,
    UserOpt,
    open_service_stack,
    print_doc,
    with_runtime,
    with_temporal,
)

__all__ = [
    "approve_cmd",
    "cancel_cmd",
    "events_cmd",
    "execute_cmd",
    "plans_app",
    "preview_cmd",
    "reconcile_cmd",
    "reject_cmd",
]

plans_app = typer.Typer(help="Your plans.", no_args_is_help=True)


@plans_app.command("list")
def plans_list(
    user: UserOpt = DEFAULT_USER,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100)] = 20,
) -> None:
    """Your plans, newest first."""
    guard(
        lambda: print_doc(open_service_stack().services.views.list(user, limit=limit, cursor=None))
    )


@plans_app.command("show")
def plans_show(plan_id: Annotated[str, typer.Argument()], user: UserOpt = DEFAULT_USER) -> None:
    """A plan with its status, steps and gates."""
    guard(lambda: print_doc(open_service_stack().services.views.show(plan_id, user)))


def preview_cmd(
    plan_id: Annotated[str, typer.Argument()],
    user: UserOpt = DEFAULT_USER,
    policy: PolicyOpt = None,
) -> None:
    """Run the read-only preview of a plan."""
    guard(lambda: print_doc(with_runtime(policy, lambda s: s.runs.preview(plan_id, user))))


def approve_cmd(
    plan_id: Annotated[str, typer.Argument()],
    gate: Annotated[str, typer.Argument(help="Gate id, e.g. gate-A.")],
    choice: Annotated[
        str | None, typer.Option("--choice", help="JSON choice (e.g. a slot).")
    ] = None,
    user: UserOpt = DEFAULT_USER,
) -> None:
    """Approve a gate; prints the token (single use, short-lived)."""

    def body() -> None:
        # strict (GLOBAL_SPEC §11a): a key given twice is refused, not "last wins"
        picked = None if choice is None else loads_strict(choice, what="--choice")
        gates = open_service_stack().services.gates
        print_doc(asyncio.run(gates.approve(plan_id, gate, user, choice=picked)))

    guard(body)


def reject_cmd(
    plan_id: Annotated[str, typer.Argument()],
    gate: Annotated[str, typer.Argument()],
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    user: UserOpt = DEFAULT_USER,
) -> None:
    """Reject a gate."""

    def body() -> None:
        gates = open_service_stack().services.gates
        print_doc(asyncio.run(gates.reject(plan_id, gate, user, reason=reason)))

    guard(body)


def _tokens(given: list[str] | None) -> dict[str, str]:
    """``--token GATE=TOKEN`` options as ``{gate: token}``."""
    tokens: dict[str, str] = {}
    for t in given or []:
        gate, sep, value = t.partition("=")
        if not sep or not gate or not value:
            raise InputError(f"--token {t[:20]!r}…: write it as GATE=TOKEN")
        tokens[gate] = value
    return tokens


def execute_cmd(
    plan_id: Annotated[str, typer.Argument()],
    token: Annotated[
        list[str] | None, typer.Option("--token", help="GATE=TOKEN (repeat per gate).")
    ] = None,
    user: UserOpt = DEFAULT_USER,
    policy: PolicyOpt = None,
) -> None:
    """Execute with gate tokens."""

    def body() -> None:
        tokens = _tokens(token)

        async def run(s: Any) -> Any:
            report = await s.runs.execute(plan_id, user, tokens)
            return {
                "plan_id": report.plan_id,
                "status": report.status,
                "results": [w.to_json() for w in report.wrappers],
                "waiting_gate": report.waiting_gate,
            }

        print_doc(with_runtime(policy, run))

    guard(body)


def cancel_cmd(plan_id: Annotated[str, typer.Argument()], user: UserOpt = DEFAULT_USER) -> None:
    """Cancel a plan: nothing more of it runs (a run on Temporal is cancelled there)."""
    guard(lambda: print_doc(with_temporal(lambda s: s.runs.cancel(plan_id, user))))


def reconcile_cmd() -> None:
    """Record the end of durable runs that ended outside Countersign (terminated from the
    Temporal UI or CLI, timed out); prints what was recorded, one JSON line each."""

    def body() -> None:
        for row in with_temporal(lambda s: s.reconcile(actor="countersign reconcile")):
            sys.stdout.write(json.dumps(row) + "\n")

    guard(body)


def _print_events(plan_id: str, user: str, follow: bool) -> None:
    """The plan's events from the start, one JSON line each; with ``follow``, poll for more."""
    services = open_service_stack().services
    services.views.document(plan_id, user)
    after = 0
    while True:
        for e in services.events.since(plan_id, after):
            after = int(e["seq"])
            e["ts"] = (
                e["ts"].astimezone(UTC).isoformat() if isinstance(e["ts"], datetime) else e["ts"]
            )
            sys.stdout.write(json.dumps(e, default=str) + "\n")
            sys.stdout.flush()
        if not follow:
            return
        time.sleep(0.25)


def events_cmd(
    plan_id: Annotated[str, typer.Argument()],
    follow: Annotated[bool, typer.Option("--follow/--no-follow")] = False,
    user: UserOpt = DEFAULT_USER,
) -> None:
    """Print the plan's events (one JSON line each); ``--follow`` waits for new ones."""
    try:
        guard(lambda: _print_events(plan_id, user, follow))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
