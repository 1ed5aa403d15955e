"""``prune_settled`` on a fake n8n (the real one: ``tests/test_n8n_prunes_settled.py``): only
ended executions whose carried key is settled go; a record already gone is skipped; any other
refusal of n8n is raised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from countersign.kernel import content_hash
from countersign.n8n import N8nApiError
from countersign.n8n.keeping import REDACTED, carried_key, prune_settled

PLAN = "01JTESTPLAN0000000000000000"


def _ex(eid: int, step: int, args: dict[str, Any], status: str = "success") -> dict[str, Any]:
    body = {"plan": {"plan_id": PLAN, "step": step}, "args": args}
    item = {"json": {"body": body}}
    run = {"data": {"main": [[item]]}}
    return {"id": eid, "status": status, "data": {"resultData": {"runData": {"Trigger": [run]}}}}


class _Fake:
    def __init__(self, executions: list[dict[str, Any]], gone: set[str], refuse: int = 0) -> None:
        self.executions, self.gone, self.refuse = executions, gone, refuse
        self.deleted: list[str] = []

    async def execution_pages(
        self, *, include_data: bool = False, page_size: int = 100, max_pages: int = 100
    ) -> AsyncIterator[list[dict[str, Any]]]:
        assert include_data
        yield self.executions[:2]
        yield self.executions[2:]

    async def delete_execution(self, execution_id: str | int) -> None:
        if self.refuse:
            raise N8nApiError("delete execution", self.refuse, "no")
        if str(execution_id) in self.gone:
            raise N8nApiError("delete execution", 404, "not found")
        self.deleted.append(str(execution_id))


def _key(step: int, args: dict[str, Any]) -> str:
    return f"{PLAN}:{step}:{content_hash(args)}"


def test_only_ended_settled_writes_go_and_a_gone_one_is_skipped() -> None:
    a, b = {"to": "a@example.com"}, {"to": "b@example.com"}
    executions = [
        _ex(1, 3, a),  # settled
        _ex(2, 4, b),  # unknown
        _ex(3, 5, a, status="running"),  # settled, still running
        _ex(4, 6, a),  # settled, deleted by another pass first
        {"id": 5, "status": "success", "data": {}},  # not Countersign's
    ]
    settled = {_key(3, a), _key(5, a), _key(6, a)}
    fake = _Fake(executions, gone={"4"})
    gone = asyncio.run(prune_settled(fake, settled=settled.__contains__))
    assert gone == ["1"] and fake.deleted == ["1"]


def test_a_redacted_record_carries_the_key_it_was_sent_with() -> None:
    ex = _ex(1, 3, {"to": "[forgotten]"})
    body = ex["data"]["resultData"]["runData"]["Trigger"][0]["data"]["main"][0][0]["json"]["body"]
    body[REDACTED] = {"arg_hash": content_hash({"to": "bob@example.com"})}
    assert carried_key(ex) == _key(3, {"to": "bob@example.com"})


def test_another_refusal_of_n8n_is_raised() -> None:
    fake = _Fake([_ex(1, 3, {})], gone=set(), refuse=500)
    with pytest.raises(N8nApiError):
        asyncio.run(prune_settled(fake, settled=lambda _: True))
