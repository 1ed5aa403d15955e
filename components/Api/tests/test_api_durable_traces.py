"""Api SPEC, logs and traces, for a durable plan on a real Temporal dev server: with tracing on,
the API's Temporal client and the worker carry temporalio's ``TracingInterceptor``
(``traced_client``), so one execute request is one trace from the request through the workflow
start, the workflow, its activities and the provider requests the activities send."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from countersign.api.observe import traced_client
from countersign.api.testing import ALICE, harness
from countersign.durable import DurableActivities, EncryptionCodec, connect, make_worker
from countersign.durable import payload_codec as make_codec
from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.durable.testing import sandbox_fixture  # noqa: F401  (fixture)
from countersign.kernel import system_clock
from countersign.kernel.process import free_port
from countersign.kernel.tracing import traces_to
from countersign.n8n import N8nHandle
from countersign.planner.testing import until
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink, VisaSandbox
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

pytestmark = pytest.mark.slow


@pytest.fixture
def temporal(tmp_path: Path) -> Iterator[str]:
    port, ui = free_port(), free_port()
    temporal_start(tmp_path / "temporal", port=port, ui_port=ui)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        temporal_stop(tmp_path / "temporal")


def _watch() -> dict[str, Any]:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    return {
        "intent": {
            "intent": "watch_visa_slots",
            "entities": {
                "consulate": "lisbon",
                "date_from": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "date_to": (start + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "poll_interval_s": 1,
                "max_polls": 50,
                "notify_to": ALICE,
            },
        }
    }


def _worker(
    address: str, acts: DurableActivities, stop: threading.Event, codec: EncryptionCodec
) -> threading.Thread:
    async def run() -> None:
        # the worker built on a traced client traces too (temporalio's interceptor is both)
        client = await traced_client(await connect(address, codec=codec))
        async with make_worker(client, acts):
            while not stop.is_set():
                await asyncio.sleep(0.1)

    t = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    t.start()
    return t


def test_a_durable_execute_is_one_trace_through_temporal(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
    sandbox: VisaSandbox,
    temporal: str,
    tmp_path: Path,
) -> None:
    codec = make_codec(tmp_path / "keys")
    settings = {"visa_base_url": sandbox.url}
    acts = DurableActivities(
        db,
        keys=keyring,
        registry=registry,
        settings={"smtp_from": "countersign@example.com", **settings},
        clock=system_clock,
    )
    sandbox.appear_after = 1000  # keep polling: the run is followed, not finished

    async def temporal_connect() -> Client:
        return await traced_client(await connect(temporal, codec=codec))

    exporter, stop = InMemorySpanExporter(), threading.Event()
    with traces_to(exporter):
        worker = _worker(temporal, acts, stop, codec)
        try:
            with (
                harness(
                    n8n,
                    db,
                    registry,
                    keyring,
                    radicale,
                    smtp_server,
                    api_smtp_credential,
                    settings=settings,
                    temporal_connect=temporal_connect,
                    payload_codec=codec,
                ) as api,
                api.client() as alice,
            ):
                plan_id = alice.post("/v1/intents", json=_watch()).json()["plan_id"]
                r = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
                assert r.status_code == 202, r.text

                def traced() -> bool:
                    names = {s.name.split(":")[0] for s in _execute_trace(exporter)}
                    return {"StartWorkflow", "RunWorkflow", "RunActivity"} <= names and (
                        "provider.request" in names
                    )

                assert until(traced, 60), sorted({s.name for s in _execute_trace(exporter)})
                alice.post(f"/v1/plans/{plan_id}/cancel")
        finally:
            stop.set()
            worker.join(15)


def _execute_trace(exporter: InMemorySpanExporter) -> list[Any]:
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "POST /v1/plans/{plan_id}/execute"]
    if not roots:
        return []
    trace_id = roots[0].context.trace_id
    return [s for s in spans if s.context.trace_id == trace_id]
