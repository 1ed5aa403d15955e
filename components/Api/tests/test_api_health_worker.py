"""``/healthz``'s worker check: a worker this home started is checked by its pid file; a worker
elsewhere (another container, no pid file here) by whether Temporal has seen it poll the durable
task queue — otherwise every API in a cluster would read ``degraded`` and a readiness probe would
keep it out of service."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from countersign.api.stack import _health
from countersign.durable import TASK_QUEUE
from countersign.kernel import Settings


class _Service:
    def __init__(self, pollers: list[Any]) -> None:
        self.pollers = pollers
        self.asked: list[Any] = []

    async def describe_task_queue(self, request: Any) -> Any:
        self.asked.append(request)
        return SimpleNamespace(pollers=self.pollers)


def _worker(home: Path, service: _Service) -> str:
    async def connect() -> Any:
        return SimpleNamespace(workflow_service=service)

    settings = Settings(home=home, temporal_namespace="ns1")
    check = _health(settings, connect)["worker"]

    async def go() -> str:
        return await check()

    return asyncio.run(go())


@pytest.mark.parametrize(("pollers", "want"), [([object()], "ok"), ([], "down")])
def test_a_worker_elsewhere_is_what_temporal_has_seen_polling(
    tmp_path: Path, pollers: list[Any], want: str
) -> None:
    service = _Service(pollers)
    assert _worker(tmp_path, service) == want
    (request,) = service.asked
    assert request.namespace == "ns1" and request.task_queue.name == TASK_QUEUE


def test_a_worker_this_home_started_is_checked_by_its_pid_file(tmp_path: Path) -> None:
    service = _Service([object()])
    run = tmp_path / "run"
    run.mkdir()
    (run / "worker.pid").write_text(f"{os.getpid()}\n")
    assert _worker(tmp_path, service) == "ok" and not service.asked
    (run / "worker.pid").write_text("999999999 1\n")  # gone: down, whatever Temporal says
    assert _worker(tmp_path, service) == "down" and not service.asked
