"""``countersign n8n install|up|down|status``."""

from __future__ import annotations

import json

import typer

from countersign.kernel import CountersignError, Settings

from .runtime import install, start, status, stop

__all__ = ["app"]

app = typer.Typer(help="Run the pinned n8n on 127.0.0.1.", no_args_is_help=True)


def _fail(e: CountersignError) -> None:
    typer.echo(e.one_line(), err=True)
    raise typer.Exit(1)


@app.command("install")
def install_cmd() -> None:
    """Install Node 24 and n8n into the cache folder (reused when already there)."""
    try:
        inst = install(Settings().cache_dir)
    except CountersignError as e:
        _fail(e)
    typer.echo(f"n8n ready to start: {inst.n8n_bin}")


@app.command("up")
def up_cmd() -> None:
    """Install if needed, start n8n in the background, bootstrap API access."""
    settings = Settings()
    data = settings.home / "n8n"
    if status(data).get("healthy"):
        typer.echo(json.dumps(status(data)))
        return
    try:
        handle = start(
            install(settings.cache_dir),
            data,
            port=settings.n8n_port,
            extra_env={"N8N_EXPRESSION_ENGINE": settings.n8n_expression_engine},
        )
    except CountersignError as e:
        _fail(e)
    typer.echo(json.dumps({"running": True, "pid": handle.pid, "base_url": handle.base_url}))


@app.command("down")
def down_cmd() -> None:
    """Stop n8n (SIGTERM, then SIGKILL after 15 s)."""
    typer.echo("stopped" if stop(Settings().home / "n8n") else "not running")


@app.command("status")
def status_cmd() -> None:
    """Health as JSON."""
    typer.echo(json.dumps(status(Settings().home / "n8n")))
