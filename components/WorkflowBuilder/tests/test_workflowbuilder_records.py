"""What n8n keeps of a generated workflow's executions (WorkflowBuilder SPEC "What n8n keeps"):
reads keep nothing, writes keep their whole record for the reconciler, a doubt keeps it; node by
node only for a write whose provider cannot be asked afterwards (the registry's ``probe``)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from countersign.kernel import Plan, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.signer import plan_hash
from countersign.workflowbuilder import (
    CredentialRef,
    build_batch_workflow,
    build_step_workflow,
    read_only_violations,
)
from countersign.workflowbuilder.core import KEEP_ALL, KEEP_NONE, _keep

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
CREDS = {"smtp": CredentialRef(id="c1", name="smtp local")}
SAVE_KEYS = ("saveDataSuccessExecution", "saveDataErrorExecution")


def _plan(registry: Registry) -> Plan:
    p = make_plan(make_intent("schedule_meeting"), [], registry, LOCAL)
    assert isinstance(p, Plan)
    return p


def _kept(wf: dict[str, Any]) -> list[Any]:
    return [wf["settings"][k] for k in SAVE_KEYS]


def test_reads_keep_nothing_and_writes_keep_everything(registry: Registry) -> None:
    plan = _plan(registry)
    h = plan_hash(plan)
    kinds = set()
    for s in plan.graph:
        if s.gate_id is not None:
            continue
        wf = build_step_workflow(plan, h, s.step, registry, credentials=CREDS).workflow
        safety = registry.op(s.uses, s.call).safety
        kinds.add(safety)
        want = KEEP_NONE if safety == "read" else KEEP_ALL
        assert _kept(wf) == [want, want], (s.uses, s.call)
        # a write is saved node by node unless its provider can be asked (a crash after its
        # op's node still shows the answer of a mail, which nobody can read back)
        probed = registry.op(s.uses, s.call).probe
        assert wf["settings"]["saveExecutionProgress"] is (safety == "write" and not probed)
        assert wf["settings"]["saveManualExecutions"] is False
    assert kinds == {"read", "write"}


def test_a_batch_keeps_nothing(registry: Registry) -> None:
    plan = _plan(registry)
    read = next(s for s in plan.graph if s.call == "list_free_busy")
    batch = build_batch_workflow(read, registry).workflow
    assert _kept(batch) == [KEEP_NONE, KEEP_NONE]
    assert batch["settings"]["saveExecutionProgress"] is False


def test_a_read_that_could_write_keeps_its_record() -> None:
    """The registry's ``safety: read`` is a claim: a node n8n would run as a write keeps all."""
    post = {
        "name": "x.y",
        "type": "n8n-nodes-base.httpRequest",
        "typeVersion": 4.2,
        "parameters": {"method": "POST", "url": "http://127.0.0.1/"},
    }
    assert read_only_violations({"nodes": [post], "connections": {}})
    assert _keep(SimpleNamespace(safety="read"), [post]) == KEEP_ALL  # type: ignore[arg-type]
    get = {**post, "parameters": {"method": "GET", "url": "http://127.0.0.1/"}}
    assert _keep(SimpleNamespace(safety="read"), [get]) == KEEP_NONE  # type: ignore[arg-type]
    assert _keep(SimpleNamespace(safety="write"), [get]) == KEEP_ALL  # type: ignore[arg-type]


def test_progress_follows_the_registrys_probe(registry: Registry) -> None:
    """The calendar write (its event readable by UID) saves no progress, the mail does; the
    registry's ``probe`` decides, and flipping it makes another workflow (its own content key:
    deploy never reuses one built under the other rule)."""
    plan = _plan(registry)
    h = plan_hash(plan)
    event = next(s for s in plan.graph if s.call == "create_event")
    mail = next(s for s in plan.graph if s.call == "send")
    assert registry.op("caldav", "create_event").probe and not registry.op("smtp", "send").probe
    built = build_step_workflow(plan, h, event.step, registry)
    assert built.workflow["settings"]["saveExecutionProgress"] is False
    sent = build_step_workflow(plan, h, mail.step, registry, credentials=CREDS).workflow
    assert sent["settings"]["saveExecutionProgress"] is True
    caldav = registry.connectors["caldav"]
    op = caldav.ops["create_event"].model_copy(update={"probe": False})
    unprobed = caldav.model_copy(update={"ops": {**caldav.ops, "create_event": op}})
    other = replace(registry, connectors={**registry.connectors, "caldav": unprobed})
    again = build_step_workflow(plan, h, event.step, other)
    assert again.workflow["settings"]["saveExecutionProgress"] is True
    assert again.path != built.path
