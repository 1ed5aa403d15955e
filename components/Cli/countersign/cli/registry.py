"""``countersign registry validate``: the registry folder (the PluginRegistry only)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from countersign.kernel import Settings
from countersign.registry import load_registry

from .exits import guard

__all__ = ["registry_app"]

registry_app = typer.Typer(help="Inspect and validate registry/.", no_args_is_help=True)


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
