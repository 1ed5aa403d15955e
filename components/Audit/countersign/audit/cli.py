"""``countersign audit verify``."""

from __future__ import annotations

import typer

from countersign.kernel import CountersignError, Settings, system_clock
from countersign.storage import Database

from .store import AuditLog

__all__ = ["app"]

app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)


@app.command("verify")
def verify_cmd(
    plan_id: str | None = typer.Option(None, "--plan-id", help="Also list this plan's rows."),
) -> None:
    """Check the whole hash chain (a chain is only sound as a whole); exit 1 naming the first
    broken row. With --plan-id, then print that plan's decisions, one line each."""
    try:
        db = Database.open(Settings())
        with db.tx() as c:
            report = AuditLog(clock=system_clock).verify(c)
            rows = AuditLog(clock=system_clock).rows(c, plan_id=plan_id) if plan_id else []
    except CountersignError as e:
        typer.echo(e.one_line(), err=True)
        raise typer.Exit(1) from e
    if report.ok:
        typer.echo(f"ok: {report.rows} rows, chain intact")
        for r in rows:
            typer.echo(
                f"{r['seq']}\t{r['ts'].isoformat()}\t{r['kind']}\t{r['status']}\tstep={r['step']}\t{r['reason'] or ''}"
            )
        return
    typer.echo(f"audit chain broken at row {report.first_bad_seq}: {report.reason}", err=True)
    raise typer.Exit(1)
