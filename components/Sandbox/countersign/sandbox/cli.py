"""``countersign sandbox up|down|status``: the sandbox providers on their own (``countersign up``
starts them with the rest of the stack)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from countersign.kernel import CountersignError, Settings

from .stack import DEFAULT_PORTS, SandboxPorts, sandbox_status, start_sandbox, stop_sandbox

__all__ = ["app"]

app = typer.Typer(
    help="Sandbox providers (CalDAV, SMTP + mailbox, shop, visa) on 127.0.0.1 — no account needed.",
    no_args_is_help=True,
)


@app.command("up")
def up_cmd(
    free_ports: Annotated[
        bool,
        typer.Option(
            help="Pick free ports instead of the defaults (5232, 2525, 8025, 8091, 8092)."
        ),
    ] = False,
    appear_after_s: Annotated[
        float,
        typer.Option(
            help="Seconds from a watcher's first search (a consulate and window) until the "
            "visa service shows it a free slot."
        ),
    ] = 30.0,
) -> None:
    """Start the four providers in the background (logs in COUNTERSIGN_HOME/sandbox/); print
    their URLs and the connector settings that point at them, as JSON."""
    try:
        handle = start_sandbox(
            Settings().home,
            ports=SandboxPorts.any_free() if free_ports else DEFAULT_PORTS,
            appear_after_s=appear_after_s,
        )
    except CountersignError as e:
        typer.echo(e.one_line(), err=True)
        raise typer.Exit(1) from None
    typer.echo(
        json.dumps(
            {"urls": handle.urls(), "connector_settings": handle.connector_settings()}, indent=2
        )
    )


@app.command("down")
def down_cmd() -> None:
    """Stop them."""
    stopped = stop_sandbox(Settings().home)
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "not running")


@app.command("status")
def status_cmd() -> None:
    """Running or not, URLs and logs, as JSON (exit 1 when not all are running)."""
    status = sandbox_status(Settings().home)
    typer.echo(json.dumps(status, indent=2))
    if not status["running"]:
        raise typer.Exit(1)
