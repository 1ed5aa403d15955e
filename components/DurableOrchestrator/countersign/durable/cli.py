"""``countersign temporal up|down|status|worker``."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import typer
from temporalio.service import RPCError

from countersign.audit import AuditLog
from countersign.contextrag import MemoryStore
from countersign.kernel import (
    InputError,
    Policy,
    Settings,
    loads_strict,
    loads_yaml_strict,
    parse_contract,
    system_clock,
)
from countersign.planwriter import PlanWriter
from countersign.registry.store import RegistryStore
from countersign.signer import ReceiptKeySigner, open_keyring
from countersign.steps.policy import contacts_source
from countersign.storage import Database

from .activities import DurableActivities
from .codec import payload_codec
from .runtime import configured_status, temporal_start, temporal_stop
from .worker import connect, make_worker, register_search_attributes

__all__ = ["app"]

app = typer.Typer(help="The Temporal dev server and the durable worker.", no_args_is_help=True)


@app.command("up")
def up_cmd() -> None:
    """Start the embedded Temporal dev server at the configured loopback address
    (``COUNTERSIGN_TEMPORAL_ADDRESS``, default 127.0.0.1:7233; its UI on that port + 1000, as
    ``countersign up`` starts it; SQLite file under COUNTERSIGN_HOME) and print where both are,
    as JSON. Any other address is a cluster: nothing to start, its status is printed (exit 1)."""
    settings = Settings()
    where = configured_status(settings)
    if not where.get("embedded"):
        typer.echo(json.dumps(where))
        raise typer.Exit(1)
    port = int(settings.temporal_address.rpartition(":")[2])
    started = temporal_start(settings.home / "temporal", port=port, ui_port=port + 1000)
    typer.echo(json.dumps({**started, "address": settings.temporal_address, "ui": where["ui"]}))


@app.command("down")
def down_cmd() -> None:
    """Stop it."""
    typer.echo("stopped" if temporal_stop(Settings().home / "temporal") else "not running")


@app.command("status")
def status_cmd() -> None:
    """Running or not, at the configured address (``COUNTERSIGN_TEMPORAL_ADDRESS``), as JSON."""
    typer.echo(json.dumps(configured_status(Settings())))


@app.command("attributes")
def attributes_cmd() -> None:
    """Register the search attributes user_id, plan_id, intent (Keyword) on a cluster."""
    settings = Settings()

    async def run() -> list[str]:
        client = await connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            tls_cert=settings.temporal_tls_cert,
            tls_key=settings.temporal_tls_key,
            codec=payload_codec(settings.keys_dir),
        )
        return await register_search_attributes(client)

    typer.echo(json.dumps({"added": asyncio.run(run())}))


def worker_policy(path: Path | None) -> Policy:
    """The policy whose gate rules the worker checks every write against: the deployment's
    policy file (``COUNTERSIGN_POLICY_FILE``, JSON or YAML, as the API reads it), or the default
    rules without one.

    Raises:
        InputError: the file cannot be read or is not a policy (names it).
    """
    if path is None:
        return Policy()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    yaml = path.suffix in {".yaml", ".yml"}
    doc = loads_yaml_strict(data, what=str(path)) if yaml else loads_strict(data, what=str(path))
    return parse_contract(Policy, doc, what=f"policy {path}")


@app.command("worker")
def worker_cmd() -> None:
    """Run the durable worker until interrupted (COUNTERSIGN_TEMPORAL_ADDRESS, DATABASE_URL,
    COUNTERSIGN_CONNECTOR_SETTINGS configure it)."""
    from datetime import UTC, datetime  # noqa: PLC0415

    settings = Settings()
    from countersign.kernel.logs import configure_logging  # noqa: PLC0415
    from countersign.kernel.tracing import configure_tracing  # noqa: PLC0415

    configure_logging(settings.log_level)
    configure_tracing(settings.otlp_endpoint, service="countersign-worker")
    db = Database.open(settings)
    registry_store = RegistryStore(
        db, settings.registry_dir, AuditLog(clock=system_clock), system_clock
    )
    ring = open_keyring(settings, now=datetime.now(UTC))
    acts = DurableActivities(
        db,
        keys=ring,
        receipt_signer=ReceiptKeySigner(ring),
        registry=registry_store.current(),
        registry_source=registry_store.current,
        settings=settings.connector_settings,
        plan_writer=PlanWriter.for_settings(db, settings, clock=lambda: datetime.now(UTC)),
        policy=worker_policy(settings.policy_file),
        # the gate rules' set tests read every contact of the person as they are at the write
        facts=contacts_source(
            functools.partial(MemoryStore(db, clock=system_clock).contacts, limit=None)
        ),
    )

    async def run() -> None:
        client = await connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            tls_cert=settings.temporal_tls_cert,
            tls_key=settings.temporal_tls_key,
            codec=payload_codec(settings.keys_dir),
        )
        try:  # a dev server whose database predates an attribute, a self-hosted cluster
            await register_search_attributes(client)
        except RPCError as e:  # Temporal Cloud: registered through its own API
            typer.echo(f"search attributes not registered here ({e.message}); see LLD", err=True)
        await make_worker(client, acts).run()

    asyncio.run(run())
