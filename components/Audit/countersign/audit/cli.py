"""``countersign audit verify``."""

from __future__ import annotations

import typer

from countersign.kernel import CountersignError, Settings
from countersign.storage import Database

from .core import AuditLog

__all__ = ["app"]

app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)


@app.command("verify")
def verify_cmd() -> None:
    """Check the whole hash chain; exit 1 naming the first broken row."""
    try:
        db = Database.open(Settings())
        with db.tx() as c:
            report = AuditLog().verify(c)
    except CountersignError as e:
        typer.echo(e.one_line(), err=True)
        raise typer.Exit(1) from e
    if report.ok:
        typer.echo(f"ok: {report.rows} rows, chain intact")
        return
    typer.echo(f"audit chain broken at row {report.first_bad_seq}: {report.reason}", err=True)
    raise typer.Exit(1)
