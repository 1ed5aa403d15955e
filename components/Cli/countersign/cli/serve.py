"""``countersign api`` (serve the HTTP API) and ``countersign login-link`` (a one-time browser
login link) — GLOBAL_SPEC.md §12. ``main.py`` registers each function under its verb."""

from __future__ import annotations

from typing import Annotated

import typer

from .exits import guard
from .service import DEFAULT_USER, PolicyOpt, UserOpt, open_service_stack

__all__ = ["api_cmd", "login_link_cmd"]


def api_cmd(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8000,
    policy: PolicyOpt = None,
) -> None:
    """Serve the HTTP API (n8n must be running: ``countersign up`` starts everything)."""

    def body() -> None:
        from countersign.api.server import serve  # noqa: PLC0415 - keeps `--help` fast
        from countersign.api.stack import build_app  # noqa: PLC0415

        stack = open_service_stack(policy)
        # the edge (api/server.py): ambiguous framing 400 + close, a stalled request 408 + close
        timeout = stack.settings.http_read_timeout_s
        serve(build_app(stack), host=host, port=port, read_timeout_s=timeout)

    guard(body)


def login_link_cmd(
    user: UserOpt = DEFAULT_USER,
    port: Annotated[int, typer.Option("--port")] = 8000,
) -> None:
    """Print a one-time browser login link (15 minutes) for a local user (created if new)."""

    def body() -> None:
        users = open_service_stack().users
        users.ensure(user)
        typer.echo(f"http://127.0.0.1:{port}/login?token={users.login_link(user)}")

    guard(body)
