"""``countersign users add NAME [--admin] | list | revoke NAME``: API users and their keys
(GLOBAL_SPEC.md §12), over the service's ``UserStore``."""

from __future__ import annotations

from typing import Annotated

import typer

from .exits import guard
from .service import open_service_stack

__all__ = ["users_app"]

users_app = typer.Typer(help="API users and their keys.", no_args_is_help=True)


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="User id (an e-mail address or a name).")],
    admin: Annotated[bool, typer.Option("--admin", help="May edit the registry.")] = False,
) -> None:
    """Create a user; the API key is the last line of stdout (shown once, stored hashed)."""

    def body() -> None:
        stack = open_service_stack()
        key = stack.users.add(name, admin=admin)
        typer.echo(f"created user {name}{' (admin)' if admin else ''}; API key:")
        typer.echo(key)

    guard(body)


@users_app.command("list")
def users_list() -> None:
    """Users (never keys)."""

    def body() -> None:
        for u in open_service_stack().users.list():
            state = "revoked" if u["revoked_at"] else "active"
            typer.echo(f"{u['user_id']}\t{'admin' if u['admin'] else 'user'}\t{state}")

    guard(body)


@users_app.command("revoke")
def users_revoke(name: Annotated[str, typer.Argument(help="User id.")]) -> None:
    """Revoke a user's key and end their sessions."""

    def body() -> None:
        open_service_stack().users.revoke(name)
        typer.echo(f"revoked {name}")

    guard(body)
