"""The ``countersign`` command line (typer). A thin edge: parse, build Settings, call cores, print.

Exit codes (GLOBAL_SPEC.md §7): 0 ok; 1 refused or failed (bad signature, key ring problem);
2 malformed input (one line on stderr naming what was wrong); 3 the plan needs more input
(``{"needs": [...]}`` on stdout).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from countersign.audit.cli import app as audit_app
from countersign.durable.cli import app as temporal_app
from countersign.durable.runtime import configured_status
from countersign.kernel import (
    Evidence,
    InputError,
    Intent,
    Needs,
    Policy,
    Settings,
    loads_strict,
    loads_yaml_strict,
    parse_contract,
    system_clock,
)
from countersign.n8n import status as n8n_status
from countersign.n8n.cli import app as n8n_app
from countersign.planner import make_plan
from countersign.registry import load_registry
from countersign.sandbox import sandbox_status
from countersign.sandbox.cli import app as sandbox_app
from countersign.signer import (
    KeyRing,
    VerifiedPlan,
    fresh_seed,
    open_keyring,
    sign_plan,
    verify_signed_plan,
)
from countersign.steps import StoreRecorder
from countersign.storage import Database

from .db import app as db_app
from .exits import EXIT_NEEDS, guard, print_json
from .plans import (
    approve_cmd,
    cancel_cmd,
    events_cmd,
    execute_cmd,
    plans_app,
    preview_cmd,
    reconcile_cmd,
    reject_cmd,
)
from .receipts import receipts_app
from .serve import api_cmd, login_link_cmd
from .stack import stack_down, stack_running, stack_up, wait_for_interrupt
from .users import users_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="countersign",
    help="Signed, previewable, approvable plans for personal agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
keys_app = typer.Typer(help="Manage the Ed25519 key ring.", no_args_is_help=True)
registry_app = typer.Typer(help="Inspect and validate registry/.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(registry_app, name="registry")
app.add_typer(db_app, name="db")
app.add_typer(audit_app, name="audit")
app.add_typer(n8n_app, name="n8n")
app.add_typer(temporal_app, name="temporal")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(receipts_app, name="receipts")
# the service verbs (the same service the HTTP API uses), in the order `--help` lists them
app.add_typer(users_app, name="users")
app.add_typer(plans_app, name="plans")
app.command("api")(api_cmd)
app.command("login-link")(login_link_cmd)
app.command("preview")(preview_cmd)
app.command("approve")(approve_cmd)
app.command("reject")(reject_cmd)
app.command("execute")(execute_cmd)
app.command("cancel")(cancel_cmd)
app.command("reconcile")(reconcile_cmd)
app.command("events")(events_cmd)


def _now() -> datetime:
    return datetime.now(UTC)


def read_document(path: Path) -> Any:
    """Read a JSON (or YAML, by suffix) file strictly; InputError naming the file on any problem.

    Strict (``countersign.kernel.loads_strict``): UTF-8 only, no duplicate keys, bounded depth,
    so a plan, intent or policy has one reading and a bad file ends in one line, never a traceback.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    if path.suffix in {".yaml", ".yml"}:
        return loads_yaml_strict(data, what=str(path))
    return loads_strict(data, what=str(path))


def plan_document(
    settings: Settings,
    intent_doc: Any,
    evidence_doc: Any,
    policy_doc: Any,
    *,
    now: datetime,
) -> dict[str, Any]:
    """Plan and sign; the signed-plan document, or ``{"needs": [...]}``.

    Shared by the CLI and ``up`` (and, later, the API), so every edge plans the same way.
    """
    intent = parse_contract(Intent, intent_doc, what="intent")
    if not isinstance(evidence_doc, list):
        raise InputError("evidence: must be a JSON list of evidence items")
    evidence = [
        parse_contract(Evidence, e, what=f"evidence[{i}]") for i, e in enumerate(evidence_doc)
    ]
    policy = parse_contract(Policy, policy_doc, what="policy")
    registry = load_registry(settings.registry_dir)
    result = make_plan(intent, evidence, registry, policy)
    if isinstance(result, Needs):
        return result.to_json()
    ring = open_keyring(settings, now=now, create=True)
    pubkey_id, key = ring.active()
    return sign_plan(result, key=key, pubkey_id=pubkey_id, signer=settings.signer_name).to_json()


@app.command("plan")
def plan_cmd(
    intent: Annotated[Path, typer.Option("--intent", help="Intent JSON file.")],
    evidence: Annotated[Path | None, typer.Option("--evidence", help="Evidence JSON list.")] = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="Policy JSON/YAML.")] = None,
) -> None:
    """Plan an intent and print the signed plan ``{"plan", "signature", "plan_hash"}``."""

    def body() -> None:
        settings = Settings()
        doc = plan_document(
            settings,
            read_document(intent),
            read_document(evidence) if evidence else [],
            read_document(policy) if policy else {},
            now=_now(),
        )
        print_json(doc)
        if "needs" in doc:
            raise typer.Exit(EXIT_NEEDS)

    guard(body)


@app.command("verify")
def verify_cmd(file: Annotated[Path, typer.Argument(help="Signed plan JSON file.")]) -> None:
    """Exit 0 when the signature over the plan holds; otherwise non-zero with one line why."""

    def body() -> None:
        settings = Settings()
        ring = open_keyring(settings, now=_now())
        verified = verify_signed_plan(read_document(file), keys=ring)
        typer.echo(
            f"ok plan_id={verified.plan.plan_id} plan_hash={verified.plan_hash} "
            f"key={verified.envelope.pubkey_id}"
        )

    guard(body)


@registry_app.command("validate")
def registry_validate(
    folder: Annotated[Path | None, typer.Option("--dir", help="Registry folder.")] = None,
) -> None:
    """Validate every registry file; print the registry version (vR)."""

    def body() -> None:
        settings = Settings()
        reg = load_registry(folder or settings.registry_dir)
        typer.echo(
            f"ok version={reg.version} connectors={len(reg.connectors)} intents={len(reg.intents)}"
        )

    guard(body)


@keys_app.command("init")
def keys_init() -> None:
    """Create the key ring with one active key (k1)."""

    def body() -> None:
        settings = Settings()
        ring = KeyRing.init(settings.keys_dir, now=_now(), seed=fresh_seed())
        typer.echo(f"created key ring in {settings.keys_dir}; active key {ring.active()[0]}")

    guard(body)


@keys_app.command("rotate")
def keys_rotate() -> None:
    """Retire the active key (it still verifies) and make a new active key."""

    def body() -> None:
        settings = Settings()
        ring = KeyRing.load(settings.keys_dir)
        new_id = ring.rotate(now=_now(), seed=fresh_seed())
        typer.echo(f"active key is now {new_id}")

    guard(body)


@keys_app.command("revoke")
def keys_revoke(pubkey_id: Annotated[str, typer.Argument(help="Key id, e.g. k1.")]) -> None:
    """Revoke a retired key: plans it signed no longer verify."""

    def body() -> None:
        settings = Settings()
        KeyRing.load(settings.keys_dir).revoke(pubkey_id, now=_now())
        typer.echo(f"revoked {pubkey_id}")

    guard(body)


@keys_app.command("list")
def keys_list() -> None:
    """List keys (ids, status, public keys; never secrets)."""

    def body() -> None:
        settings = Settings()
        for info in KeyRing.load(settings.keys_dir).infos():
            typer.echo(f"{info.pubkey_id}\t{info.status}\t{info.public_key}")

    guard(body)


@app.command("up")
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
) -> None:
    """Start the whole stack on embedded defaults — PostgreSQL + pgvector, the Temporal dev server
    (+ UI), n8n, the sandbox providers, the durable worker, the API on 127.0.0.1:PORT — then run
    the main job (plan, sign, verify and store an intent with its ``plan_signed`` audit row) and
    print where everything is, with a one-time login link. Stays in the foreground (logs in the
    data folder) until Ctrl-C, which stops everything; ``--detach`` returns instead."""

    guard(lambda: _up(Settings(), intent, services=services, port=port, detach=detach))


def _say(line: str) -> None:
    """``up``'s progress, on stderr (stdout carries the plan or the stack's addresses)."""
    typer.echo(line, err=True)


def _up(
    settings: Settings, intent: Path | None, *, services: bool, port: int, detach: bool
) -> None:
    """``up``'s body: check the registry and key ring, start the stack, run the main job, then
    print where everything is and wait (unless ``detach``)."""
    if services and stack_running(settings, port):
        _say(f"the stack of {settings.home} is already running: http://127.0.0.1:{port}")
        _say("open a new login link with: countersign login-link")
        return
    example = (
        settings.registry_dir.parent / "usecases" / "meeting" / "fixtures" / "default.intent.json"
    )
    reg = load_registry(settings.registry_dir)
    _say(f"registry ok: version {reg.version[:16]}…")
    ring = open_keyring(settings, now=_now(), create=True)
    _say(f"key ring ok: active key {ring.active()[0]} in {settings.keys_dir}")
    info = stack_up(settings, port=port, say=_say) if services else None
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


@app.command("down")
def down_cmd() -> None:
    """Stop everything ``countersign up`` started: the API, the worker, the sandbox providers, n8n,
    Temporal and the embedded PostgreSQL."""
    stack_down(Settings(), say=typer.echo)


@app.command("status")
def status_cmd() -> None:
    """Where each service is, as JSON."""
    settings = Settings()
    print_json(
        {
            "n8n": n8n_status(settings.home / "n8n"),
            "temporal": configured_status(settings),
            "sandbox": sandbox_status(settings.home),
            "home": str(settings.home),
        }
    )


def main() -> None:
    """Console entry point."""
    app()
