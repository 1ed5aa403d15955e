"""``countersign n8n install|up|down|status``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from countersign.kernel import CountersignError, Settings

from .queue import start_configured
from .runtime import (
    check_lockfiles,
    deploy_fingerprints,
    install,
    installed_fingerprints,
    status,
    stop,
)

__all__ = ["app"]

app = typer.Typer(help="Run the pinned n8n on 127.0.0.1.", no_args_is_help=True)


def _fail(e: CountersignError) -> None:
    typer.echo(e.one_line(), err=True)
    raise typer.Exit(1)


@app.command("install")
def install_cmd(
    cache: Annotated[
        Path | None,
        typer.Option(help="Install into this folder instead of the cache folder of the settings."),
    ] = None,
    cold: Annotated[
        bool,
        typer.Option(
            help="Download into an empty npm cache under --cache (as a fresh machine would), "
            "not from the machine's ~/.npm."
        ),
    ] = False,
) -> None:
    """Install the pinned Node + npm, then n8n, into the cache folder (reused when there)."""
    target = cache or Settings().cache_dir
    try:
        inst = install(target, npm_cache=(target / "npm-cache") if cold else None)
    except CountersignError as e:
        _fail(e)
    typer.echo(f"n8n ready to start: {inst.n8n_bin}")


@app.command("check-lockfiles")
def check_lockfiles_cmd() -> None:
    """Fail (exit 1, npm's own message) when npm ci would refuse a lockfile under deploy/."""
    try:
        problems = check_lockfiles(Settings().cache_dir)
    except CountersignError as e:
        _fail(e)
    for p in problems:
        typer.echo(p, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo("ok: npm ci accepts every lockfile under deploy/")


@app.command("cache-stale")
def cache_stale_cmd() -> None:
    """Exit 0 and name the folders when the cache was not built from today's deploy/ (or not
    at all), exit 1 when it matches; CI runs a cold install on 0."""
    have = installed_fingerprints(Settings().cache_dir)
    want = deploy_fingerprints()
    stale = [name for name in want if have.get(name) != want[name]]
    if not stale:
        typer.echo("cache matches deploy/")
        raise typer.Exit(1)
    typer.echo("stale: " + " ".join(f"deploy/{n}" for n in stale))


@app.command("up")
def up_cmd() -> None:
    """Install if needed, start n8n in the background, bootstrap API access (queue mode with
    COUNTERSIGN_N8N_WORKERS > 0 and DATABASE_URL)."""
    settings = Settings()
    data = settings.home / "n8n"
    if status(data).get("healthy"):
        typer.echo(json.dumps(status(data)))
        return
    try:
        handle = start_configured(settings, data)
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
