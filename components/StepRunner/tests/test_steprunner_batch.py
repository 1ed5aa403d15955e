"""A preview's runner sends the reads of one op that are ready together as one call of the op's
batch workflow (issue 16.1); one ready read, a dependent read, a failure and a short answer keep
their usual meaning. The transport here is a fake with the ``StepTransport`` shape; the same path
on real n8n is tested in ``tests/test_e2e_preview_readonly.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from countersign.kernel import Plan, Policy, source_registry_dir
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry, load_registry
from countersign.steps import N8nStepRunner, StepFailedError, run_dag
from countersign.workflowbuilder import StepWorkflow, declared_query, read_only_violations

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
BUSY = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:{u}\r\n"
    "DTSTAMP:20261101T000000Z\r\nDTSTART:20261123T1{h}0000Z\r\nDTEND:20261123T1{h}3000Z\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n"
)


class FakeN8n:
    """Answers a CalDAV collection GET per item: the user's calendar holds one event whose hour
    depends on the user (so outputs tell the steps apart)."""

    def __init__(self, *, fail: bool = False, short: bool = False) -> None:
        self.deployed: list[StepWorkflow] = []
        self.single: list[Mapping[str, Any]] = []
        self.batches: list[Mapping[str, Any]] = []
        self.fail, self.short = fail, short

    async def deploy(self, workflow: StepWorkflow) -> None:
        # the calendar read is a window query its op declares (a REPORT, issue 28 §1)
        query = declared_query(load_registry(source_registry_dir()).op("caldav", "list_free_busy"))
        assert read_only_violations(workflow.workflow, query=query) == []
        self.deployed.append(workflow)

    @staticmethod
    def _answer(data: Mapping[str, Any]) -> Mapping[str, Any]:
        url = str(data["url"])
        hour = 4 if "bob" in url else 3
        return {"statusCode": 200, "headers": {}, "body": BUSY.format(u=url, h=hour)}

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        self.single.append(body)
        await asyncio.sleep(0)
        return self._answer(body["data"])

    async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        self.batches.append(body)
        await asyncio.sleep(0)
        if self.fail:
            raise StepFailedError(0, "n8n answered 500")
        out = [self._answer(item["data"]) for item in body["items"]]
        return out[:-1] if self.short else out


@pytest.fixture
def plan(registry: Registry) -> Plan:
    p = make_plan(make_intent("find_meeting_time"), [], registry, LOCAL)
    assert isinstance(p, Plan)
    return p


def _runner(plan: Plan, registry: Registry, n8n: FakeN8n, *, batch: bool) -> N8nStepRunner:
    return N8nStepRunner(
        plan=plan,
        plan_hash="0" * 64,
        registry=registry,
        transport=n8n,
        settings={"caldav_base_url": "http://cal.test", "smtp_from": "cs@example.com"},
        read_only=True,
        batch_reads=batch,
    )


def test_reads_of_one_op_ready_together_are_one_batch_with_the_same_outputs(
    plan: Plan, registry: Registry
) -> None:
    batched, single = FakeN8n(), FakeN8n()
    out = asyncio.run(run_dag(plan, [1, 2, 3], _runner(plan, registry, batched, batch=True).run))
    ref = asyncio.run(run_dag(plan, [1, 2, 3], _runner(plan, registry, single, batch=False).run))
    assert out == ref  # the overlap (step 3, in-process) saw the same reads
    assert out[1] != out[2]
    assert len(batched.batches) == 1 and batched.single == []
    (body,) = batched.batches
    assert [i["args"] for i in body["items"]] == [plan.step(1).args, plan.step(2).args]
    assert body["plan"]["steps"] == [1, 2]
    assert len(single.single) == 2 and single.batches == []
    assert [w.workflow["nodes"][1]["type"] for w in batched.deployed] == ["n8n-nodes-base.splitOut"]


def test_one_ready_read_is_sent_as_a_step(plan: Plan, registry: Registry) -> None:
    n8n = FakeN8n()
    asyncio.run(run_dag(plan, [1], _runner(plan, registry, n8n, batch=True).run))
    assert len(n8n.single) == 1 and n8n.batches == []


def test_a_failed_batch_fails_every_read_in_it(plan: Plan, registry: Registry) -> None:
    n8n = FakeN8n(fail=True)
    with pytest.raises(StepFailedError, match="n8n answered 500"):
        asyncio.run(run_dag(plan, [1, 2, 3], _runner(plan, registry, n8n, batch=True).run))


def test_a_short_answer_is_a_failure_naming_the_steps(plan: Plan, registry: Registry) -> None:
    n8n = FakeN8n(short=True)
    with pytest.raises(StepFailedError, match=r"steps \[1, 2\] answered 1 items, expected 2"):
        asyncio.run(run_dag(plan, [1, 2], _runner(plan, registry, n8n, batch=True).run))
