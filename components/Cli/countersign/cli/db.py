"""``countersign db upgrade|downgrade|current|idempotency-cleanup`` (composed here, above Storage
and Audit: the ledger writes its audit rows through an ``AuditSink``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from countersign.audit import AuditLog
from countersign.kernel import CountersignError, Settings
from countersign.storage import Database, IdempotencyLedger

__all__ = ["app"]


def _now() -> datetime:
    return datetime.now(UTC)


app = typer.Typer(
    help="The database (embedded PostgreSQL unless DATABASE_URL is set).", no_args_is_help=True
)


def _open(migrate: bool) -> Database:
    try:
        return Database.open(Settings(), migrate=migrate)
    except CountersignError as e:
        typer.echo(e.one_line(), err=True)
        raise typer.Exit(1) from e


@app.command("upgrade")
def upgrade_cmd() -> None:
    """Apply migrations up to the newest (also done on every start)."""
    db = _open(migrate=True)
    typer.echo(f"database at revision {db.current_revision()}")


@app.command("downgrade")
def downgrade_cmd(
    revision: Annotated[str, typer.Argument(help="Target revision, or 'base'.")],
) -> None:
    """Revert migrations down to REVISION."""
    db = _open(migrate=False)
    db.downgrade(revision)
    typer.echo(f"database at revision {db.current_revision()}")


@app.command("current")
def current_cmd() -> None:
    """Print the database's revision and the newest this code knows."""
    db = _open(migrate=False)
    typer.echo(f"current={db.current_revision()} head={db.head_revision()}")


@app.command("idempotency-cleanup")
def cleanup_cmd(
    retention_h: Annotated[
        int, typer.Option("--retention-hours", min=24, help="Keep settled keys this long.")
    ] = 720,
) -> None:
    """Delete settled idempotency keys older than the retention (default 30 days, minimum 24 h)."""

    db = _open(migrate=True)
    n = IdempotencyLedger(
        db, clock=_now, audit=AuditLog(clock=_now), retention=timedelta(hours=retention_h)
    ).cleanup()
    typer.echo(f"deleted {n} settled keys")
