"""``countersign up`` (the whole stack, then the main job), ``down`` and ``status``. ``down`` and
``status`` import only the runtimes they stop or ask (inside the function), not ``up``'s stack."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from countersign.kernel import Settings

from .exits import EXIT_NEEDS, guard, print_json

if TYPE_CHECKING:
    from countersign.signer import VerifiedPlan
    from countersign.steps import StoreRecorder

__all__ = ["down_cmd", "status_cmd", "up_cmd"]


def _now() -> datetime:
    return datetime.now(UTC)


def up_cmd(
    intent: Annotated[
        Path | None, typer.Option("--intent", help="Intent to plan (default: the meeting example).")
    ] = None,
    services: Annotated[
        bool,
        typer.Option(
            "--services/--no-services",
            help="Start the whole stack (--no-services: start nothing; plan, sign and print the "
            "intent, stored when DATABASE_URL names an external database).",
        ),
    ] = True,
    port: Annotated[int, typer.Option("--port", help="The API and chat page.")] = 8000,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="Return once everything runs; 'countersign down' stops it."),
    ] = False,
    scale: Annotated[
        bool,
        typer.Option(
            "--scale",
            help="Several of each: two APIs (PORT, PORT+1), two durable workers, n8n in queue "
            "mode with two workers and Redis (COUNTERSIGN_API_REPLICAS, COUNTERSIGN_DURABLE_WORKERS "
            "and COUNTERSIGN_N8N_WORKERS set other numbers).",
        ),
    ] = False,
) -> None:
    """Start the whole stack on embedded defaults — PostgreSQL + pgvector, the Temporal dev server
    (+ UI), n8n, the sandbox providers, the durable worker, the API on 127.0.0.1:PORT — then run
    the main job (plan, sign, verify and store an intent with its ``plan_signed`` audit row) and
    print where everything is, with a one-time login link. Stays in the foreground (logs in the
    data folder) until Ctrl-C, which stops everything; ``--detach`` returns instead."""

    guard(lambda: _up(_scaled(scale), intent, services=services, port=port, detach=detach))


def _scaled(scale: bool) -> Settings:
    """The settings, with at least two of each process when ``scale``."""
    settings = Settings()
    if not scale:
        return settings
    return settings.model_copy(
        update={
            "api_replicas": max(2, settings.api_replicas),
            "durable_workers": max(2, settings.durable_workers),
            "n8n_workers": max(2, settings.n8n_workers),
        }
    )


def _say(line: str) -> None:
    """``up``'s progress, on stderr (stdout carries the plan or the stack's addresses)."""
    typer.echo(line, err=True)


def _up(
    settings: Settings, intent: Path | None, *, services: bool, port: int, detach: bool
) -> None:
    """``up``'s body: check the registry and key ring, start the stack, run the main job, then
    print where everything is and wait (unless ``detach``). It starts only the processes that are
    not running; when the stack was running (an API or a durable worker of this folder), it prints
    where everything is and what it started, and returns (the main job ran when the stack first
    came up)."""
    from countersign.kernel import system_clock  # noqa: PLC0415 - `up` alone needs these
    from countersign.registry import load_registry  # noqa: PLC0415
    from countersign.signer import open_keyring, verify_signed_plan  # noqa: PLC0415
    from countersign.steps import StoreRecorder  # noqa: PLC0415
    from countersign.storage import Database  # noqa: PLC0415

    from .files import read_document  # noqa: PLC0415
    from .signing import plan_document  # noqa: PLC0415
    from .stack import stack_down, stack_up, wait_for_interrupt  # noqa: PLC0415

    example = (
        settings.registry_dir.parent / "usecases" / "meeting" / "fixtures" / "default.intent.json"
    )
    reg = load_registry(settings.registry_dir)
    _say(f"registry ok: version {reg.version[:16]}…")
    ring = open_keyring(settings, now=_now(), create=True)
    _say(f"key ring ok: active key {ring.active()[0]} in {settings.keys_dir}")
    info = stack_up(settings, port=port, say=_say) if services else None
    if info is not None and info.tally.was_running:  # run again: it started what was missing
        for line in info.lines():
            typer.echo(line)
        _say(f"the stack of {settings.home} was already running; 'countersign down' stops it")
        return
    recorder: StoreRecorder | None = None
    if services or settings.database_url is not None:
        db = Database.open(settings)
        recorder = StoreRecorder(db, clock=system_clock)
    doc = plan_document(settings, read_document(intent or example), [], {}, now=_now())
    if "needs" in doc:
        print_json(doc)
        raise typer.Exit(EXIT_NEEDS)
    _store_signed(verify_signed_plan(doc, keys=ring), recorder)
    if info is None:
        print_json(doc)
        return
    for line in info.lines():
        typer.echo(line)
    if detach:
        return
    typer.echo("running; Ctrl-C stops everything")
    wait_for_interrupt(lambda: stack_down(settings, say=_say))


def _store_signed(verified: VerifiedPlan, recorder: StoreRecorder | None) -> None:
    """Store the verified plan when there is a database, through the one store path that writes
    the ``plan_signed`` audit row with the plan (Audit SPEC)."""
    if recorder is not None:
        recorder.remember(verified, actor=verified.plan.intent.user_id)
        _say(f"signed, verified and stored plan {verified.plan.plan_id}")
    else:
        _say(f"signed, verified plan {verified.plan.plan_id} (not stored: no database)")


def down_cmd() -> None:
    """Stop everything ``countersign up`` started: the API, the worker, the sandbox providers, n8n,
    Temporal and the embedded PostgreSQL."""
    from .stack import stack_down  # noqa: PLC0415 - `down` only

    stack_down(Settings(), say=typer.echo)


def status_cmd() -> None:
    """Where each service is, and whether each process ``up`` starts runs, as JSON."""
    from countersign.durable.runtime import configured_status  # noqa: PLC0415 - `status` only
    from countersign.n8n import status as n8n_status  # noqa: PLC0415
    from countersign.sandbox import sandbox_status  # noqa: PLC0415

    from .stack import stack_processes  # noqa: PLC0415

    settings = Settings()
    print_json(
        {
            "n8n": n8n_status(settings.home / "n8n"),
            "temporal": configured_status(settings),
            "sandbox": sandbox_status(settings.home),
            "processes": stack_processes(settings),
            "home": str(settings.home),
        }
    )
