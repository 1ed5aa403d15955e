"""The visa watcher through the HTTP API on a real Temporal dev server: intent → execute hands it
to Temporal (findable by plan_id and the person's opaque user_id; no address in clear) → a slot appears → approve over HTTP sends the
workflow its update → booked once, mail sent; reject and cancel reach the running workflow too."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload

from countersign.api.testing import ALICE, ApiHarness, harness
from countersign.approvals import token_hash
from countersign.durable import (
    DurableActivities,
    EncryptionCodec,
    connect,
    make_worker,
    payload_codec,
)
from countersign.durable.codec import META_USER
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


@pytest.fixture
def temporal(tmp_path: Path) -> Iterator[str]:
    port, ui = free_port(), free_port()
    temporal_start(tmp_path / "temporal", port=port, ui_port=ui)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        temporal_stop(tmp_path / "temporal")


def _watch(days: int = 30) -> dict[str, Any]:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    return {
        "intent": {
            "intent": "watch_visa_slots",
            "entities": {
                "consulate": "lisbon",
                "date_from": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "date_to": (start + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "poll_interval_s": 1,
                "max_polls": 50,
                "notify_to": ALICE,
            },
        }
    }


@pytest.fixture
def codec(tmp_path: Path) -> EncryptionCodec:
    """The payload key the API and the worker share (as on ``countersign up``)."""
    return payload_codec(tmp_path / "keys")


def _worker(
    address: str, acts: DurableActivities, stop: threading.Event, codec: EncryptionCodec
) -> threading.Thread:
    async def run() -> None:
        client = await connect(address, codec=codec)
        async with make_worker(client, acts):
            while not stop.is_set():
                await asyncio.sleep(0.1)

    t = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    t.start()
    return t


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
    codec: EncryptionCodec,
    request: pytest.FixtureRequest,
) -> Iterator[ApiHarness]:
    """The served API on n8n and a real Temporal dev server, with a durable worker (in a thread)
    reaching the sandbox visa service and the SMTP peer. Parametrized indirectly, the parameter is
    the API's reconcile interval in seconds (default 60)."""
    settings = {
        "visa_base_url": sandbox.url,
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
    }
    acts = DurableActivities(
        db,
        keys=keyring,
        registry=registry,
        settings={"smtp_from": "countersign@example.com", **settings},
        clock=system_clock,
    )
    stop = threading.Event()
    worker = _worker(temporal, acts, stop, codec)
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
            temporal_connect=lambda: connect(temporal, codec=codec),
            payload_codec=codec,
            reconcile_every_s=float(getattr(request, "param", 60.0)),
        ) as api:
            yield api
    finally:
        stop.set()
        worker.join(15)


def test_visa_watcher_over_http_books_once(
    watching: ApiHarness,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    temporal: str,
    codec: EncryptionCodec,
) -> None:
    sandbox.appear_after = 3
    smtp_server.messages.clear()
    wid, token = _run(watching, sandbox, smtp_server, temporal, codec)
    _no_address_in_clear(temporal, wid, codec)
    _no_token_in_history(temporal, wid, codec, token)


def _no_token_in_history(temporal: str, wid: str, codec: EncryptionCodec, token: str) -> None:
    """The approval token was spent by the API where it arrived: no payload of the run's history,
    decoded with the project's codec (update arguments, activity inputs and results), holds it;
    the approve update names the spent token's hash."""

    async def history() -> Any:
        return await (await connect(temporal)).get_workflow_handle(wid).fetch_history()

    raw = asyncio.run(history())
    decoded = asyncio.run(codec.decode([p for e in raw.events for p in _payloads(e)]))
    assert len(decoded) > 10 and token.startswith("cst_")
    assert not [p for p in decoded if token.encode() in p.data or token[4:].encode() in p.data]
    updates = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args
        for e in raw.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    (arg,) = asyncio.run(codec.decode(list(updates[0].payloads)))
    assert json.loads(arg.data)["approval"] == token_hash(token)


def _no_address_in_clear(temporal: str, wid: str, codec: EncryptionCodec) -> None:
    """What anyone who reaches the Temporal UI reads of the run — search attributes, memo, the
    summary's and every history payload's metadata, read through a client WITHOUT the key —
    never holds the person's address; the ``user_id`` attribute is their opaque id."""

    async def read() -> tuple[Any, Any]:
        client = await connect(temporal)  # no codec: what the UI and its database hold
        handle = client.get_workflow_handle(wid)
        return await handle.describe(), await handle.fetch_history()

    desc, history = asyncio.run(read())
    attrs = {k.name: v for k, v in ((p.key, p.value) for p in desc.typed_search_attributes)}
    assert attrs["user_id"] == codec.opaque_user(ALICE)
    assert attrs["user_id"].startswith("u-") and len(attrs["user_id"]) == 26
    assert ALICE not in repr(attrs)
    raw = desc.raw_description
    assert ALICE.encode() not in raw.workflow_execution_info.memo.SerializeToString()
    assert ALICE.encode() not in raw.execution_config.user_metadata.SerializeToString()
    metadata = [
        b"".join(k.encode() + v for k, v in p.metadata.items())
        for e in history.events
        for p in _payloads(e)
    ]
    assert len(metadata) > 5
    assert not [m for m in metadata if ALICE.encode() in m]
    assert {codec.opaque_user(ALICE).encode()} <= {
        p.metadata.get(META_USER) for e in history.events for p in _payloads(e)
    }


def _payloads(msg: Message) -> Iterator[Payload]:
    """Every Payload inside a history proto."""
    if isinstance(msg, Payload):
        yield msg
        return
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            values = [value]
        elif field.message_type.GetOptions().map_entry:
            values = list(value.values())
        else:
            values = list(value)
        for v in values:
            if isinstance(v, Message):
                yield from _payloads(v)


def _run(
    api: ApiHarness, sandbox: VisaSandbox, smtp: SmtpSink, temporal: str, codec: EncryptionCodec
) -> tuple[str, str]:
    with api.client() as alice:
        body = alice.post("/v1/intents", json=_watch()).json()
        plan_id = body["plan_id"]
        assert body["gates"] == ["gate-A"], body
        started = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
        assert started.status_code == 202, started.text
        assert started.json()["status"] == "handed_off"
        wid = started.json()["workflow_id"]
        assert wid == f"watch-{plan_id}"
        # the hand-off records the run's workflow type: decisions reach that class's updates
        handed = api.services.events.latest(plan_id, "handed_off")
        assert handed is not None and handed["details"]["workflow_type"] == "WatcherWorkflow"

        # findable in Temporal (what the UI searches) by plan_id and by the person's opaque id
        async def find(user: str) -> list[str]:
            client = await connect(temporal)
            q = f'plan_id="{plan_id}" AND user_id="{user}"'
            return [w.id async for w in client.list_workflows(q)]

        assert until(lambda: asyncio.run(find(codec.opaque_user(ALICE))) == [wid], 30)
        assert asyncio.run(find(ALICE)) == []  # the address is not what is indexed
        assert alice.get(f"/v1/plans/{plan_id}").json()["workflow_id"] == wid  # the card's link
        # approving before a slot is there: refused with the workflow's reason
        early = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": {"slot": {"id": "x"}}}
        )
        # (the API refuses it itself: slot "x" is nothing the watcher found — choice_invalid —
        # or the workflow does, when it has not started waiting)
        assert early.status_code != 200, early.text
        assert early.json()["code"] in ("choice_invalid", "durable_update_refused"), early.text

        def approve() -> httpx.Response | None:
            r = alice.post(
                f"/v1/plans/{plan_id}/gates/gate-A/approve",
                json={"choice": {"slot": {"id": "slot-1"}}},
            )
            return r if r.status_code == 200 else None

        ok = early if early.status_code == 200 else until(approve, 60)
        assert ok is not None, "the watcher never waited for gate-A"
        assert ok.json()["durable"]["workflow_id"] == wid
        assert until(lambda: len(sandbox.bookings) == 1 and len(smtp.messages) >= 1, 60)
        assert sandbox.booking_posts == 1
        assert until(
            lambda: alice.get(f"/v1/plans/{plan_id}").json()["status"] in {"completed", "booked"},
            30,
        ), alice.get(f"/v1/plans/{plan_id}").json()["status"]
        kinds = [
            e["kind"] for e in alice.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
        ]
        assert "handed_off" in kinds and "gate_approved" in kinds
        return str(wid), str(ok.json()["token"])


def test_cancel_reaches_a_running_watcher(
    watching: ApiHarness, sandbox: VisaSandbox, temporal: str
) -> None:
    api = watching
    with api.client() as alice:
        plan_id = alice.post("/v1/intents", json=_watch()).json()["plan_id"]
        assert (
            alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}}).json()["status"]
            == "handed_off"
        )
        assert alice.post(f"/v1/plans/{plan_id}/cancel").json()["status"] == "cancelled"

        async def status() -> str:
            client = await connect(temporal)
            desc = await client.get_workflow_handle(f"watch-{plan_id}").describe()
            return str(desc.status.name if desc.status else "")

        # one cancel path: Temporal's own cancellation; the run records why it ended
        assert until(lambda: asyncio.run(status()) == "CANCELED", 30)
        assert sandbox.bookings == {}
        kinds = {
            (e["kind"], e["status"])
            for e in alice.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
        }
        assert ("durable_finished", "cancelled") in kinds, kinds


def test_a_run_terminated_outside_is_reconciled(
    watching: ApiHarness, sandbox: VisaSandbox, temporal: str
) -> None:
    """Terminate (from the Temporal UI or CLI) runs no workflow code, so nothing is recorded;
    ``DurableReconciler.reconcile`` (when the API starts; ``countersign reconcile``) records how the
    run ended, once, and leaves running runs alone."""
    api = watching
    with api.client() as alice:
        ended = alice.post("/v1/intents", json=_watch()).json()["plan_id"]
        running = alice.post("/v1/intents", json=_watch(days=20)).json()["plan_id"]
        for plan_id in (ended, running):
            r = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
            assert r.json()["status"] == "handed_off", r.text

        async def terminate_and_reconcile() -> tuple[Any, Any]:
            client = await connect(temporal)
            await client.get_workflow_handle(f"watch-{ended}").terminate("an operator")
            reconciler = api.services.reconciler(client)
            return (await reconciler.reconcile(), await reconciler.reconcile())

        first, again = asyncio.run(terminate_and_reconcile())
        assert [(r["plan_id"], r["outcome"]) for r in first] == [(ended, "terminated")]
        assert again == ()  # once
        assert alice.get(f"/v1/plans/{ended}").json()["status"] == "failed"
        assert alice.get(f"/v1/plans/{running}").json()["status"] != "failed"
        kinds = [
            (e["kind"], e["status"])
            for e in alice.get("/v1/audit", params={"plan_id": ended}).json()["items"]
        ]
        assert kinds[-1] == ("durable_finished", "terminated")
        assert sandbox.bookings == {}


@pytest.mark.parametrize("watching", [1.0], indirect=True)
def test_a_run_terminated_while_the_api_runs_is_reconciled_by_its_periodic_pass(
    watching: ApiHarness, sandbox: VisaSandbox, temporal: str
) -> None:
    """While the API is up, its periodic pass (``ApiConfig.reconcile_every_s``, here 1 s; from
    ``COUNTERSIGN_DURABLE_RECONCILE_EVERY_S`` under ``countersign up``) records a run terminated
    from outside — nobody reconciles by hand or restarts the API — once, and leaves the
    running one alone."""
    api = watching
    with api.client() as alice:
        ended = alice.post("/v1/intents", json=_watch()).json()["plan_id"]
        running = alice.post("/v1/intents", json=_watch(days=20)).json()["plan_id"]
        for plan_id in (ended, running):
            r = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
            assert r.json()["status"] == "handed_off", r.text

        async def terminate() -> None:
            client = await connect(temporal)
            await client.get_workflow_handle(f"watch-{ended}").terminate("an operator")

        asyncio.run(terminate())

        def finished(plan_id: str) -> list[tuple[str, str]]:
            items = alice.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
            return [(e["kind"], e["status"]) for e in items if e["kind"] == "durable_finished"]

        assert until(lambda: finished(ended), 60) == [("durable_finished", "terminated")]
        assert alice.get(f"/v1/plans/{ended}").json()["status"] == "failed"
        time.sleep(2.5)  # two more passes: still recorded once, the running run untouched
        assert finished(ended) == [("durable_finished", "terminated")]
        assert finished(running) == []
        assert alice.get(f"/v1/plans/{running}").json()["status"] != "failed"


def test_a_watcher_revised_from_the_chat_replaces_the_running_one(
    watching: ApiHarness, sandbox: VisaSandbox, temporal: str
) -> None:
    """A change of constraints is a new plan (what a watcher sends is signed): "change it to
    april" in the conversation plans, signs and previews a revision that names its parent; the
    parent keeps watching until the revision is started, which cancels it (CANCELED, recorded)."""
    api = watching
    with api.client() as alice:
        first = alice.post(
            "/v1/intents", json={"text": "watch the lisbon consulate for a visa slot in march"}
        ).json()
        parent, cid = first["plan_id"], first["conversation_id"]
        assert alice.post(f"/v1/plans/{parent}/execute", json={"tokens": {}}).status_code == 202

        revised = alice.post(
            "/v1/intents", json={"text": "change it to april", "conversation_id": cid}
        )
        assert revised.status_code == 201, revised.text
        body = revised.json()
        child = body["plan_id"]
        assert child != parent and body["revises"]["plan_id"] == parent
        assert set(body["revises"]["changed"]) == {"date_from", "date_to"}
        entities = body["plan"]["intent"]["entities"]
        assert entities["consulate"] == "lisbon" and "-04-01" in entities["date_from"]
        assert body["preview"] is not None  # previewed like any plan

        async def status(wid: str) -> str:
            client = await connect(temporal)
            desc = await client.get_workflow_handle(wid).describe()
            return str(desc.status.name if desc.status else "")

        # the parent still watches while the person looks at the revision
        assert asyncio.run(status(f"watch-{parent}")) == "RUNNING"
        started = alice.post(f"/v1/plans/{child}/execute", json={"tokens": {}})
        assert started.json()["status"] == "handed_off", started.text
        assert until(lambda: asyncio.run(status(f"watch-{parent}")) == "CANCELED", 30)
        assert asyncio.run(status(f"watch-{child}")) == "RUNNING"
        kinds = {
            e["kind"] for e in alice.get("/v1/audit", params={"plan_id": parent}).json()["items"]
        }
        assert {"plan_revised", "plan_cancelled"} <= kinds

        # the structured route names what it cannot change
        bad = alice.post(f"/v1/plans/{child}/revise", json={"entities": {"colour": "red"}})
        assert bad.status_code == 422 and "colour" in bad.json()["detail"]
        alice.post(f"/v1/plans/{child}/cancel")
