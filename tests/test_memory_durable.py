"""Forget reaches Temporal (issue 15.1): a watcher handed to a real dev server is found by its
``plan_id`` search attribute and deleted (terminated while running) when its person is forgotten.
With the dev server stopped, the forget is refused (503 ``forget_incomplete``, audited without
content) before any row is deleted; with it back, the same forget finishes. The other tables are
covered by tests/test_memory_api.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from countersign.api.testing import ALICE, ApiHarness, harness
from countersign.durable import DurableActivities, connect, make_worker
from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.durable.testing import sandbox_fixture  # noqa: F401  (fixture)
from countersign.kernel import system_clock
from countersign.kernel.process import free_port
from countersign.n8n import N8nHandle
from countersign.planner.testing import until
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink, VisaSandbox
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class DevServer:
    folder: Path
    port: int
    ui: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        temporal_start(self.folder, port=self.port, ui_port=self.ui)


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[DevServer]:
    dev = DevServer(tmp_path / "temporal", free_port(), free_port())
    dev.start()
    try:
        yield dev
    finally:
        temporal_stop(dev.folder)


@pytest.fixture
def temporal(dev_server: DevServer) -> str:
    return dev_server.address


@pytest.fixture
def watching(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
    sandbox: VisaSandbox,
    temporal: str,
) -> Iterator[ApiHarness]:
    settings = {"visa_base_url": sandbox.url}
    acts = DurableActivities(
        db, keys=keyring, registry=registry, settings=settings, clock=system_clock
    )
    stop = threading.Event()

    async def run() -> None:
        client = await connect(temporal)
        async with make_worker(client, acts):
            while not stop.is_set():
                await asyncio.sleep(0.1)

    worker = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    worker.start()
    try:
        with harness(
            n8n,
            db,
            registry,
            keyring,
            radicale,
            smtp_server,
            api_smtp_credential,
            settings=settings,
            temporal_connect=lambda: connect(temporal),
        ) as api:
            yield api
    finally:
        stop.set()
        worker.join(15)


def _runs(temporal: str, plan_id: str) -> list[str]:
    async def find() -> list[str]:
        client = await connect(temporal)
        return [w.id async for w in client.list_workflows(f"plan_id = '{plan_id}'")]

    return asyncio.run(find())


def test_forget_deletes_the_persons_temporal_runs(
    watching: ApiHarness, sandbox: VisaSandbox, temporal: str, dev_server: DevServer
) -> None:
    sandbox.appear_after = 10_000  # it keeps watching until forgotten
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    intent = {
        "intent": {
            "intent": "watch_visa_slots",
            "entities": {
                "consulate": "lisbon",
                "date_from": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "date_to": (start + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "poll_interval_s": 1,
                "max_polls": 500,
            },
        }
    }
    with watching.client() as alice:
        plan_id = alice.post("/v1/intents", json=intent).json()["plan_id"]
        started = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
        assert started.json()["status"] == "handed_off", started.text
        assert until(lambda: _runs(temporal, plan_id) == [f"watch-{plan_id}"])

        # the export lists the run (ids, type, status, times)
        export = alice.get("/v1/memory/export").json()
        assert export["complete"] is True
        [run] = export["runtimes"]["temporal"]["runs"]
        assert run["workflow_id"] == f"watch-{plan_id}" and run["plan_id"] == plan_id
        assert run["workflow_type"] == "WatcherWorkflow" and run["status"] == "RUNNING"
        assert run["run_id"] and run["started_at"] and run["closed_at"] is None

        # Temporal down: refused before any row is deleted, the failure audited without content
        temporal_stop(dev_server.folder)
        r = alice.post("/v1/memory/forget", json={"all": True})
        assert r.status_code == 503, r.text
        problem = r.json()
        assert problem["code"] == "forget_incomplete", problem
        assert problem["pending"] == {"temporal": "temporal_unavailable"}, problem
        assert "temporal_runs_deleted" not in problem["erased"]  # only what was erased
        assert isinstance(problem["erased"]["n8n_executions_deleted"], int)
        assert problem["retry"].startswith("POST /v1/memory/forget again"), problem
        assert ALICE not in r.text and plan_id not in r.text
        assert alice.get(f"/v1/plans/{plan_id}").status_code == 200  # nothing deleted yet
        export = alice.get("/v1/memory/export").json()  # says what it could not read
        assert export["complete"] is False
        assert export["runtimes"]["temporal"] == {"error": "temporal_unavailable"}
        assert [p["plan_id"] for p in export["tables"]["plans"]] == [plan_id]
        with watching.db.tx() as c:
            incomplete = c.execute(
                text(
                    "SELECT actor, status, reason, details FROM audit_log "
                    "WHERE kind = 'memory_forget_incomplete'"
                )
            ).all()
        assert [(i.actor, i.status, i.reason) for i in incomplete] == [
            ("system:memory", "failed", "temporal_unavailable")
        ]
        assert incomplete[0].details["pending"] == {"temporal": "temporal_unavailable"}
        assert ALICE not in str(incomplete) and plan_id not in str(incomplete)

        # back up: the same forget finishes the job (the run is found by its plan id again)
        dev_server.start()
        assert until(lambda: _runs(temporal, plan_id) == [f"watch-{plan_id}"])
        r = alice.post("/v1/memory/forget", json={"all": True})
        assert r.status_code == 200, r.text
        assert r.json()["temporal_runs_deleted"] >= 1
        assert ALICE not in r.text
    assert until(lambda: _runs(temporal, plan_id) == [])
    with watching.db.tx() as c:
        done = c.execute(
            text("SELECT details FROM audit_log WHERE kind = 'memory_forgotten'")
        ).scalar_one()
    assert done["erased"]["temporal_runs_deleted"] >= 1 and done["deleted"]["plans"] == 1
