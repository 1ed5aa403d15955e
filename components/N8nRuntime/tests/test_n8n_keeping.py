"""What n8n keeps about people (N8nRuntime SPEC "What n8n keeps"): redaction of a flatted record
keeps its structure and its key; a forget deletes only the person's own executions."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from countersign.kernel import Settings, content_hash
from countersign.n8n import N8nUnavailableError
from countersign.n8n.executions import KeyRef, trigger_body
from countersign.n8n.keeping import (
    FORGOTTEN,
    PostgresExecutionStore,
    SqliteExecutionStore,
    configured_execution_store,
    execution_store,
    forget_executions,
    mention_pattern,
    owner_plan,
    redact_flatted,
)
from countersign.n8n.keeping import _decode as decode

BOB = "bob@example.com"
INVITE = f"BEGIN:VCALENDAR\r\nATTENDEE:mailto:{BOB}\r\nEND:VCALENDAR\r\n"


def flatted(value: Any) -> str:
    """``flatted.stringify`` (no sharing): every string and container is an entry."""
    entries: list[Any] = []

    def put(v: Any) -> Any:
        if not isinstance(v, dict | list | str):
            return v
        i = len(entries)
        entries.append(None)
        if isinstance(v, dict):
            entries[i] = {k: put(x) for k, x in v.items()}
        elif isinstance(v, list):
            entries[i] = [put(x) for x in v]
        else:
            entries[i] = v
        return str(i)

    put(value)
    return json.dumps(entries)


def unflatted(text: str) -> Any:
    entries = json.loads(text)
    return decode(entries, "0")


def _run(plan_id: str, args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    body = {"plan": {"plan_id": plan_id, "step": 5}, "args": args, "data": {"n": 3}}
    return {
        "resultData": {
            "runData": {
                "Trigger": [{"data": {"main": [[{"json": {"body": body}}]]}}],
                "Files": [
                    {
                        "data": {
                            "main": [
                                [
                                    {
                                        "json": {},
                                        "binary": {
                                            "invite": {
                                                "data": base64.b64encode(INVITE.encode()).decode(),
                                                "mimeType": "text/calendar",
                                            }
                                        },
                                    }
                                ]
                            ]
                        }
                    }
                ],
                "op": [{"data": {"main": [[{"json": extra}]]}}],
            }
        }
    }


def test_redaction_keeps_structure_and_the_key() -> None:
    args = {"attendees": ["alice@example.com", BOB], "title": "Sync", "n": 2, "ok": True}
    data = _run("PLANA", args, {f"{BOB}": {"busy": 1}, "to": f"Bob <{BOB}>"})
    pattern = mention_pattern([BOB, "PLANB"])
    assert pattern is not None
    out = redact_flatted(flatted(data), pattern)
    assert BOB not in out.lower()
    back = unflatted(out)
    body = back["resultData"]["runData"]["Trigger"][0]["data"]["main"][0][0]["json"]["body"]
    assert body["args"] == {
        "attendees": ["alice@example.com", FORGOTTEN],
        "title": "Sync",
        "n": 2,
        "ok": True,
    }
    assert body["data"] == {"n": 3} and body["plan"] == {"plan_id": "PLANA", "step": 5}
    assert body["countersign_redacted"] == {"arg_hash": content_hash(args)}
    op = back["resultData"]["runData"]["op"][0]["data"]["main"][0][0]["json"]
    assert op == {FORGOTTEN: {"busy": 1}, "to": f"Bob <{FORGOTTEN}>"}
    binary = back["resultData"]["runData"]["Files"][0]["data"]["main"][0][0]["binary"]["invite"]
    assert BOB not in base64.b64decode(binary["data"]).decode() and binary["mimeType"]
    # the key still finds it: the hash of the args as they were was kept
    when = datetime.now(UTC)
    key = KeyRef("PLANA", 5, content_hash(args), when, when)
    assert key.carried_by({"data": back}) is True
    del body["countersign_redacted"]
    assert key.carried_by({"data": back}) is False  # without it the redacted args do not hash
    # a second redaction keeps the first hash (the args are already redacted)
    again = unflatted(redact_flatted(out, pattern))
    trig = again["resultData"]["runData"]["Trigger"][0]["data"]["main"][0][0]["json"]["body"]
    assert trig["countersign_redacted"] == {"arg_hash": content_hash(args)}


def test_whole_words_only() -> None:
    pattern = mention_pattern(["local"])
    assert pattern is not None
    assert pattern.search("http://localhost:8000") is None
    assert pattern.search('"LOCAL"')
    assert mention_pattern([]) is None


class _Client:
    def __init__(self, executions: list[dict[str, Any]]) -> None:
        self.executions = {str(e["id"]): e for e in executions}
        self.deleted: list[str] = []

    async def execution_pages(
        self, *, include_data: bool = False, page_size: int = 100, max_pages: int = 100
    ) -> AsyncIterator[list[dict[str, Any]]]:
        yield list(self.executions.values())

    async def delete_execution(self, execution_id: str | int) -> None:
        self.deleted.append(str(execution_id))


class _Store:
    def __init__(self) -> None:
        self.redacted: list[str] = []

    def redact(self, execution_id: str, pattern: re.Pattern[str]) -> bool:
        self.redacted.append(execution_id)
        return True


def _ex(eid: int, plan: str, **extra: Any) -> dict[str, Any]:
    return {"id": str(eid), "data": _run(plan, {"to": extra.get("to", "x")}, {})}


def test_a_forget_deletes_only_the_persons_own_and_redacts_the_others() -> None:
    # 1: bob's own; 2: alice's naming bob (and bob's plan id, e.g. his event's UID);
    # 3: alice's not naming bob; 4: no plan (another system's) naming bob
    client = _Client(
        [
            _ex(1, "PLANB"),
            _ex(2, "PLANA", to=f"{BOB} PLANB"),
            _ex(3, "PLANA"),
            {"id": "4", "data": {"resultData": {"x": BOB}}},
        ]
    )
    assert owner_plan(client.executions["2"]) == "PLANA"
    store = _Store()
    done = asyncio.run(forget_executions(client, store, own=["PLANB"], needles=[BOB, "PLANB"]))
    assert client.deleted == ["1"] and sorted(store.redacted) == ["2", "4"]
    assert (done.deleted, done.redacted) == (1, 2)
    # a subject: the person's own plan that mentions it goes, other people's stay untouched
    client = _Client([_ex(1, "PLANA", to="carol"), _ex(2, "PLANB", to="carol"), _ex(3, "PLANA")])
    store = _Store()
    asyncio.run(
        forget_executions(
            client,
            store,
            own=[],
            own_if_mentioning=["PLANA"],
            needles=["carol"],
            redact_others=False,
        )
    )
    assert client.deleted == ["1"] and store.redacted == []


def test_a_forget_that_must_redact_without_a_store_stops_before_redacting() -> None:
    client = _Client([_ex(2, "PLANA", to=BOB)])
    with pytest.raises(N8nUnavailableError):
        asyncio.run(forget_executions(client, None, own=["PLANB"], needles=[BOB]))


def test_the_store_of_a_data_folder(tmp_path: Path) -> None:
    one = execution_store(tmp_path)
    assert isinstance(one, SqliteExecutionStore)
    assert one.path == tmp_path / ".n8n" / "database.sqlite"
    queue = execution_store(tmp_path, queue_database_url="postgresql://cs:pw@db.internal:6543/cs")
    assert isinstance(queue, PostgresExecutionStore)
    assert "dbname=n8n" in queue.dsn and "host=db.internal" in queue.dsn
    assert "pw" not in repr(queue)
    single = configured_execution_store(Settings(n8n_workers=0), tmp_path)
    assert isinstance(single, SqliteExecutionStore)
    many = configured_execution_store(
        Settings(n8n_workers=2), tmp_path, database_url="postgresql://cs:pw@db:5432/cs"
    )
    assert isinstance(many, PostgresExecutionStore) and "dbname=n8n" in many.dsn


def test_a_redacted_crashed_record_still_carries_its_key() -> None:
    """A forget redacts a crashed record whose body is only in the stack: the hash of the args
    as they were is written there first, so the key still finds it (not "another key")."""
    args = {"attendees": ["alice@example.com", BOB], "title": "Sync"}
    body = {"plan": {"plan_id": "PLANA", "step": 5}, "args": args, "data": {"n": 3}}
    placeholder = {"json": {"isArtificialRecoveredEventItem": True}}
    data = {
        "resultData": {"runData": {"Trigger": [{"data": {"main": [[placeholder]]}}]}},
        "executionData": {"nodeExecutionStack": [{"data": {"main": [[{"json": {"body": body}}]]}}]},
    }
    pattern = mention_pattern([BOB])
    assert pattern is not None
    back = {"data": unflatted(redact_flatted(flatted(data), pattern)), "status": "crashed"}
    kept = trigger_body(back)
    assert kept is not None and kept["args"]["attendees"] == ["alice@example.com", FORGOTTEN]
    assert kept["countersign_redacted"] == {"arg_hash": content_hash(args)}
    when = datetime.now(UTC)
    assert KeyRef("PLANA", 5, content_hash(args), when, when).carried_by(back) is True
