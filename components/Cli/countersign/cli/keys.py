"""``countersign keys init|rotate|revoke|list``: the Ed25519 key ring (the Signer only)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from countersign.kernel import Settings
from countersign.signer import KeyRing, fresh_seed

from .exits import guard

__all__ = ["keys_app"]

keys_app = typer.Typer(help="Manage the Ed25519 key ring.", no_args_is_help=True)


def _now() -> datetime:
    return datetime.now(UTC)


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
