"""CLI over the same service the HTTP API uses: ``users``, ``api``, ``plans``, and the plan verbs
(``preview|approve|reject|execute|cancel PLAN_ID``, ``events PLAN_ID``).

Exit codes as every ``countersign`` verb (GLOBAL_SPEC.md §7): 0 ok; 1 refused or failed; 2
malformed input; 3 needs more input. Errors are one line on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from countersign.kernel import (
    CountersignError,
    InputError,
    PlanningError,
    Settings,
    loads_strict,
)
from countersign.kernel.process import ServiceError

__all__ = ["register", "users_app"]

R = TypeVar("R")
EXIT_REFUSED, EXIT_INPUT = 1, 2
DEFAULT_USER = "local"

users_app = typer.Typer(help="API users and their keys.", no_args_is_help=True)
plans_app = typer.Typer(help="Your plans.", no_args_is_help=True)

UserOpt = Annotated[
    str, typer.Option("--user", envvar="COUNTERSIGN_USER", help="Act as this user.")
]
PolicyOpt = Annotated[
    Path | None, typer.Option("--policy", help="Policy JSON/YAML (default: sandbox providers).")
]


def _fail(code: int, message: str) -> NoReturn:
    typer.echo(" ".join(message.split()), err=True)
    raise typer.Exit(code)


def _guard(fn: Callable[[], R]) -> R:
    try:
        return fn()
    except (InputError, PlanningError) as e:
        _fail(EXIT_INPUT, f"{e.code}: {e.message}")
    except CountersignError as e:
        _fail(EXIT_REFUSED, f"{e.code}: {e.message}")


def _print(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")


def _stack(policy: Path | None = None) -> Any:
    from .stack import load_policy, open_stack  # noqa: PLC0415 - keeps `--help` fast

    return open_stack(Settings(), policy=load_policy(policy) if policy else None)


async def _use_temporal(stack: Any) -> None:
    """Connect the service to Temporal (durable plans: approve / reject / cancel reach the
    running workflow); when Temporal is not reachable, durable operations say so."""
    from countersign.durable import connect, payload_codec  # noqa: PLC0415

    settings = stack.settings
    with contextlib.suppress(ServiceError):
        stack.service.use_temporal(
            await connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                tls_cert=settings.temporal_tls_cert,
                tls_key=settings.temporal_tls_key,
                codec=payload_codec(settings.keys_dir),
            )
        )


def _with_temporal(fn: Callable[[Any], Coroutine[Any, Any, R]]) -> R:
    """Run ``fn(service)`` with the service connected to Temporal (no step runtime)."""
    stack = _stack()

    async def go() -> R:
        await _use_temporal(stack)
        return await fn(stack.service)

    try:
        return asyncio.run(go())
    finally:
        stack.service.db.dispose()


def _with_runtime(policy: Path | None, fn: Callable[[Any], Coroutine[Any, Any, R]]) -> R:
    """Run ``fn(service)`` with n8n as the step runtime and Temporal connected."""
    from .stack import n8n_runtime  # noqa: PLC0415

    stack = _stack(policy)

    async def go() -> R:
        async with n8n_runtime(stack) as transport:
            stack.service.use_transport(transport)
            await _use_temporal(stack)
            return await fn(stack.service)

    try:
        return asyncio.run(go())
    finally:
        stack.service.db.dispose()


# ---- users -------------------------------------------------------------------------------------
@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="User id (an e-mail address or a name).")],
    admin: Annotated[bool, typer.Option("--admin", help="May edit the registry.")] = False,
) -> None:
    """Create a user; the API key is the last line of stdout (shown once, stored hashed)."""

    def body() -> None:
        stack = _stack()
        key = stack.users.add(name, admin=admin)
        typer.echo(f"created user {name}{' (admin)' if admin else ''}; API key:")
        typer.echo(key)

    _guard(body)


@users_app.command("list")
def users_list() -> None:
    """Users (never keys)."""

    def body() -> None:
        for u in _stack().users.list():
            state = "revoked" if u["revoked_at"] else "active"
            typer.echo(f"{u['user_id']}\t{'admin' if u['admin'] else 'user'}\t{state}")

    _guard(body)


@users_app.command("revoke")
def users_revoke(name: Annotated[str, typer.Argument(help="User id.")]) -> None:
    """Revoke a user's key and end their sessions."""

    def body() -> None:
        _stack().users.revoke(name)
        typer.echo(f"revoked {name}")

    _guard(body)


# ---- plans -------------------------------------------------------------------------------------
@plans_app.command("list")
def plans_list(
    user: UserOpt = DEFAULT_USER,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100)] = 20,
) -> None:
    """Your plans, newest first."""
    _guard(lambda: _print(_stack().service.list(user, limit=limit, cursor=None)))


@plans_app.command("show")
def plans_show(plan_id: Annotated[str, typer.Argument()], user: UserOpt = DEFAULT_USER) -> None:
    """A plan with its status, steps and gates."""
    _guard(lambda: _print(_stack().service.show(plan_id, user)))


def register(app: typer.Typer) -> None:
    """Add the API's verbs to the ``countersign`` command line."""
    app.add_typer(users_app, name="users")
    app.add_typer(plans_app, name="plans")

    @app.command("api")
    def api_cmd(
        host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port")] = 8000,
        policy: PolicyOpt = None,
    ) -> None:
        """Serve the HTTP API (n8n must be running: ``countersign up`` starts everything)."""

        def body() -> None:
            from .server import serve  # noqa: PLC0415
            from .stack import build_app  # noqa: PLC0415

            stack = _stack(policy)
            # the edge (server.py): ambiguous framing 400 + close, a stalled request 408 + close
            timeout = stack.settings.http_read_timeout_s
            serve(build_app(stack), host=host, port=port, read_timeout_s=timeout)

        _guard(body)

    @app.command("login-link")
    def login_link_cmd(
        user: UserOpt = DEFAULT_USER,
        port: Annotated[int, typer.Option("--port")] = 8000,
    ) -> None:
        """Print a one-time browser login link (15 minutes) for a local user (created if new)."""

        def body() -> None:
            users = _stack().users
            users.ensure(user)
            typer.echo(f"http://127.0.0.1:{port}/login?token={users.login_link(user)}")

        _guard(body)

    @app.command("preview")
    def preview_cmd(
        plan_id: Annotated[str, typer.Argument()],
        user: UserOpt = DEFAULT_USER,
        policy: PolicyOpt = None,
    ) -> None:
        """Run the read-only preview of a plan."""
        _guard(lambda: _print(_with_runtime(policy, lambda s: s.preview(plan_id, user))))

    @app.command("approve")
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
            _print(asyncio.run(_stack().service.approve(plan_id, gate, user, choice=picked)))

        _guard(body)

    @app.command("reject")
    def reject_cmd(
        plan_id: Annotated[str, typer.Argument()],
        gate: Annotated[str, typer.Argument()],
        reason: Annotated[str | None, typer.Option("--reason")] = None,
        user: UserOpt = DEFAULT_USER,
    ) -> None:
        """Reject a gate."""
        _guard(
            lambda: _print(asyncio.run(_stack().service.reject(plan_id, gate, user, reason=reason)))
        )

    @app.command("execute")
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
            tokens: dict[str, str] = {}
            for t in token or []:
                gate, sep, value = t.partition("=")
                if not sep or not gate or not value:
                    raise InputError(f"--token {t[:20]!r}…: write it as GATE=TOKEN")
                tokens[gate] = value

            async def run(s: Any) -> Any:
                report = await s.execute(plan_id, user, tokens)
                return {
                    "plan_id": report.plan_id,
                    "status": report.status,
                    "results": [w.to_json() for w in report.wrappers],
                    "waiting_gate": report.waiting_gate,
                }

            _print(_with_runtime(policy, run))

        _guard(body)

    @app.command("cancel")
    def cancel_cmd(plan_id: Annotated[str, typer.Argument()], user: UserOpt = DEFAULT_USER) -> None:
        """Cancel a plan: nothing more of it runs (a run on Temporal is cancelled there)."""
        _guard(lambda: _print(_with_temporal(lambda s: s.cancel(plan_id, user))))

    @app.command("reconcile")
    def reconcile_cmd() -> None:
        """Record the end of durable runs that ended outside Countersign (terminated from the
        Temporal UI or CLI, timed out); prints what was recorded, one JSON line each."""

        def body() -> None:
            for row in _with_temporal(lambda s: s.reconcile_durable(actor="countersign reconcile")):
                sys.stdout.write(json.dumps(row) + "\n")

        _guard(body)

    @app.command("events")
    def events_cmd(
        plan_id: Annotated[str, typer.Argument()],
        follow: Annotated[bool, typer.Option("--follow/--no-follow")] = False,
        user: UserOpt = DEFAULT_USER,
    ) -> None:
        """Print the plan's events (one JSON line each); ``--follow`` waits for new ones."""

        def body() -> None:
            service = _stack().service
            service.document(plan_id, user)
            after = 0
            while True:
                for e in service.events.since(plan_id, after):
                    after = int(e["seq"])
                    e["ts"] = (
                        e["ts"].astimezone(UTC).isoformat()
                        if isinstance(e["ts"], datetime)
                        else e["ts"]
                    )
                    sys.stdout.write(json.dumps(e, default=str) + "\n")
                    sys.stdout.flush()
                if not follow:
                    return
                time.sleep(0.25)

        try:
            _guard(body)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
