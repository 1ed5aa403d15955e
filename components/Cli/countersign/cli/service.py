"""What the service verbs share: the same service the HTTP API uses (``countersign.api.stack``),
opened per command, with Temporal connected and, for the verbs that run steps, n8n as the step
runtime (Cli SPEC, "The service verbs"). The Api is imported inside each function so that
``countersign --help`` and the offline verbs stay fast."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from countersign.kernel import Settings
from countersign.kernel.process import ServiceError

from .exits import print_json

__all__ = [
    "DEFAULT_USER",
    "PolicyOpt",
    "UserOpt",
    "open_service_stack",
    "print_doc",
    "with_runtime",
    "with_temporal",
]

R = TypeVar("R")
DEFAULT_USER = "local"

UserOpt = Annotated[
    str, typer.Option("--user", envvar="COUNTERSIGN_USER", help="Act as this user.")
]
PolicyOpt = Annotated[
    Path | None, typer.Option("--policy", help="Policy JSON/YAML (default: sandbox providers).")
]


def print_doc(doc: Any) -> None:
    """A service answer as indented JSON (times and ids rendered as text)."""
    print_json(doc, default=str)


def open_service_stack(policy: Path | None = None) -> Any:
    """The service stack on the process's Settings (and the Policy file, when given)."""
    from countersign.api.stack import load_policy, open_stack  # noqa: PLC0415 - keeps `--help` fast

    return open_stack(Settings(), policy=load_policy(policy) if policy else None)


async def _use_temporal(stack: Any) -> None:
    """Connect the service to Temporal (durable plans: approve / reject / cancel reach the
    running workflow); when Temporal is not reachable, durable operations say so."""
    from countersign.durable import connect, payload_codec  # noqa: PLC0415

    settings = stack.settings
    with contextlib.suppress(ServiceError):
        stack.services.runtime.use_temporal(
            await connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                tls_cert=settings.temporal_tls_cert,
                tls_key=settings.temporal_tls_key,
                codec=payload_codec(settings.keys_dir),
            )
        )


def with_temporal(fn: Callable[[Any], Coroutine[Any, Any, R]]) -> R:
    """Run ``fn(service)`` with the service connected to Temporal (no step runtime)."""
    stack = open_service_stack()

    async def go() -> R:
        await _use_temporal(stack)
        return await fn(stack.services)

    return _run_then_close(stack, go)


def with_runtime(policy: Path | None, fn: Callable[[Any], Coroutine[Any, Any, R]]) -> R:
    """Run ``fn(service)`` with n8n as the step runtime and Temporal connected."""
    from countersign.api.stack import n8n_runtime  # noqa: PLC0415

    stack = open_service_stack(policy)

    async def go() -> R:
        async with n8n_runtime(stack) as transport:
            stack.services.runtime.use_transport(transport)
            await _use_temporal(stack)
            return await fn(stack.services)

    return _run_then_close(stack, go)


def _run_then_close(stack: Any, go: Callable[[], Coroutine[Any, Any, R]]) -> R:
    """``go()`` on a fresh event loop; the stack's database pool is closed whatever happens."""
    try:
        return asyncio.run(go())
    finally:
        stack.services.db.dispose()
