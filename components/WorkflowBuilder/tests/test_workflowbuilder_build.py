"""WorkflowBuilder: deterministic JSON, no person text where n8n evaluates, read-only checks."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from countersign.binding import render_data, resolve_step
from countersign.kernel import BindingError, Plan, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.signer import plan_hash
from countersign.workflowbuilder import (
    CredentialRef,
    build_batch_workflow,
    build_step_workflow,
    declared_query,
    read_only_violations,
)

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
SNAP = Path(__file__).parent / "snapshots"
HOSTILE = [
    "={{ $env.N8N_ENCRYPTION_KEY }}",
    "{{ require('fs').readFileSync('/etc/passwd') }}",
    "={{ 1+1 }}",
]
CREDS = {"smtp": CredentialRef(id="c1", name="smtp local")}


def _plan(registry: Registry, **ents: Any) -> Plan:
    base = make_intent("schedule_meeting").to_json()["entities"]
    p = make_plan(make_intent("schedule_meeting", entities={**base, **ents}), [], registry, LOCAL)
    assert isinstance(p, Plan)
    return p


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_same_plan_same_json_snapshot(registry: Registry) -> None:
    plan = _plan(registry)
    h = plan_hash(plan)
    got = {
        "steps": {
            s.step: build_step_workflow(plan, h, s.step, registry, credentials=CREDS).workflow
            for s in plan.graph
            if s.gate_id is None
        },
    }
    again = {
        "steps": {
            s.step: build_step_workflow(plan, h, s.step, registry, credentials=CREDS).workflow
            for s in plan.graph
            if s.gate_id is None
        },
    }
    assert got == again
    snap = SNAP / "schedule_meeting_local.json"
    text = json.dumps(got, indent=1, sort_keys=True) + "\n"
    if os.environ.get("COUNTERSIGN_UPDATE_SNAPSHOTS") == "1":
        snap.write_text(text)
    assert snap.read_text() == text, "snapshot differs; review, then COUNTERSIGN_UPDATE_SNAPSHOTS=1"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_person_text_never_reaches_an_expression(registry: Registry, hostile: str) -> None:
    plan = _plan(registry, title=hostile, participants=["alice@example.com", "bob@example.com"])
    h = plan_hash(plan)
    workflows = [
        build_step_workflow(plan, h, s.step, registry, credentials=CREDS).workflow
        for s in plan.graph
        if s.gate_id is None
    ]
    for wf in workflows:
        for text in _strings(wf):
            assert hostile not in text
            if text.startswith("=") or "{{" in text:
                # the only expressions are the builder's own fixed data references
                assert text.startswith("={{ $json.body.data["), text
    # the value still arrives, as data, in the trigger body
    create = next(s for s in plan.graph if s.call == "create_event")
    node = resolve_step(create, registry)
    args = {**create.args, "start": "2026-11-23T13:00:00Z", "end": "2026-11-23T13:30:00Z"}
    data = render_data(
        node, args, {"caldav_base_url": "http://127.0.0.1:1"}, written_at=datetime.now(UTC)
    )
    assert "SUMMARY:" in data["body"]


def test_gates_and_durable_steps_are_not_step_workflows(registry: Registry) -> None:
    plan = _plan(registry)
    gate = next(s for s in plan.graph if s.gate_id)
    with pytest.raises(BindingError, match="gate"):
        build_step_workflow(plan, plan_hash(plan), gate.step, registry)
    visa = make_plan(make_intent("watch_visa_slots"), [], registry, Policy())
    assert isinstance(visa, Plan)
    build_step_workflow(visa, plan_hash(visa), 1, registry)  # a durable read: previewable once
    with pytest.raises(BindingError, match="durable write"):
        build_step_workflow(visa, plan_hash(visa), 3, registry)


def test_missing_credential_is_named(registry: Registry) -> None:
    plan = _plan(registry)
    mail = next(s for s in plan.graph if s.uses == "smtp")
    with pytest.raises(BindingError, match="'smtp'"):
        build_step_workflow(plan, plan_hash(plan), mail.step, registry)


def test_read_only_check_catches_writes_even_if_registry_lies(registry: Registry) -> None:
    plan = _plan(registry)
    h = plan_hash(plan)
    built = {
        s.step: build_step_workflow(plan, h, s.step, registry, credentials=CREDS).workflow
        for s in plan.graph
        if s.gate_id is None
    }
    reads = [built[n] for n in (1, 2, 3)]
    queries = [declared_query(registry.op(plan.step(n).uses, plan.step(n).call)) for n in (1, 2, 3)]
    checked = [read_only_violations(wf, query=q) for wf, q in zip(reads, queries, strict=True)]
    assert checked == [[], [], []]
    # the calendar reads are REPORTs: without their op's declaration they are refused
    assert all(read_only_violations(wf) for wf, q in zip(reads, queries, strict=True) if q)
    problems = [p for n in (5, 6, 7, 8) for p in read_only_violations(built[n])]
    assert any("PUT" in p for p in problems) and any("emailSend" in p for p in problems)
    forged = json.loads(json.dumps(reads[0]))
    forged["nodes"][1]["parameters"]["method"] = "={{ 'DELETE' }}"
    assert read_only_violations(forged)


def test_step_workflows_are_shared_by_op_across_plans(registry: Registry) -> None:
    a = _plan(registry, title="one")
    b = _plan(registry, title="two", participants=["x@example.com"])
    wa = build_step_workflow(a, plan_hash(a), 1, registry)
    wb = build_step_workflow(b, plan_hash(b), 1, registry)
    assert wa.path == wb.path and wa.workflow == wb.workflow  # same op, no per-plan content
    create_a = next(s.step for s in a.graph if s.call == "create_event")
    assert build_step_workflow(a, plan_hash(a), create_a, registry).path != wa.path


def test_batch_workflow_splits_items_and_reads_each_with_the_fixed_reference(
    registry: Registry,
) -> None:
    """A preview's same-op reads in one execution: Split Out over body.items, then the op's node
    reading each item's data; read-only by the same check; shared by every plan; not the step
    workflow (another path, and neither name is a substring of the other: n8n's name filter)."""
    a = _plan(registry, title="one")
    b = _plan(registry, title="two", participants=["x@example.com"])
    reads = [s for s in a.graph if s.call == "list_free_busy"]
    assert len(reads) >= 2
    wf = build_batch_workflow(reads[0], registry)
    assert wf.workflow == build_batch_workflow(reads[1], registry).workflow
    other = next(s for s in b.graph if s.call == "list_free_busy")
    assert build_batch_workflow(other, registry).workflow == wf.workflow
    trigger, split, node = wf.workflow["nodes"]
    assert trigger["parameters"]["responseData"] == "allEntries"
    assert (split["type"], split["typeVersion"]) == ("n8n-nodes-base.splitOut", 1)
    assert split["parameters"]["fieldToSplitOut"] == "body.items"
    assert node["parameters"]["url"] == '={{ $json.data["url"] }}'
    query = declared_query(registry.op(reads[0].uses, reads[0].call))
    assert read_only_violations(wf.workflow, query=query) == []
    assert read_only_violations(wf.workflow)  # a REPORT only for the op that declares it
    single = build_step_workflow(a, plan_hash(a), reads[0].step, registry)
    assert wf.path != single.path
    assert single.workflow["name"] not in wf.workflow["name"]
    assert wf.workflow["name"] not in single.workflow["name"]
    # no person text anywhere in it: it is the same for every plan
    assert "alice@example.com" not in json.dumps(wf.workflow)


def test_a_batch_workflow_with_a_writing_node_or_unknown_split_is_refused(
    registry: Registry,
) -> None:
    plan = _plan(registry)
    read = next(s for s in plan.graph if s.call == "list_free_busy")
    wf = build_batch_workflow(read, registry).workflow
    forged = json.loads(json.dumps(wf))
    forged["nodes"][2]["parameters"]["method"] = "PUT"
    assert any("found 'PUT'" in p for p in read_only_violations(forged))
    forged = json.loads(json.dumps(wf))
    forged["nodes"][1]["typeVersion"] = 2
    assert any("splitOut v2 is not a version" in p for p in read_only_violations(forged))
    write = next(s for s in plan.graph if s.call == "create_event")
    assert read_only_violations(build_batch_workflow(write, registry).workflow)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_mail_with_an_invitation_runs_through_the_fixed_files_node(
    registry: Registry, hostile: str
) -> None:
    """A mail op with files runs as Trigger → Files → Send Email: the Files node is literal
    JavaScript written here (the same for every plan: nothing of the event in it), reading the
    file from the trigger's data by its fixed path; Send Email attaches the binary property the
    registry names. Other ops keep Trigger → node; a batch refuses an op with files."""
    plan = _plan(registry, title=hostile)
    mail = next(s for s in plan.graph if s.uses == "smtp")
    event = {"uid": "u-1", "title": hostile, "start": "x", "end": "y", "attendees": [hostile]}
    invited = mail.model_copy(update={"args": {**mail.args, "event": event}})
    graph = [invited if s.step == mail.step else s for s in plan.graph]
    plan = plan.model_copy(update={"graph": graph})
    wf = build_step_workflow(plan, plan_hash(plan), mail.step, registry, credentials=CREDS)
    _, files, send = wf.workflow["nodes"]
    assert (files["name"], files["type"], files["typeVersion"]) == (
        "Files",
        "n8n-nodes-base.code",
        2,
    )
    assert wf.workflow["connections"] == {
        "Trigger": {"main": [[{"node": "Files", "type": "main", "index": 0}]]},
        "Files": {"main": [[{"node": "smtp.send", "type": "main", "index": 0}]]},
    }
    js = files["parameters"]["jsCode"]
    assert 'const names = ["invite"];' in js and 'data["binary." + name]' in js
    assert "$env" not in js and "require" not in js and "{{" not in js
    assert send["parameters"]["options"]["fileAttachments"] == "invite"
    assert "binary" not in send["parameters"]  # a file is no node parameter
    assert hostile not in json.dumps(wf.workflow)
    # the workflow does not depend on the event: every plan's mails share it
    again = build_step_workflow(_plan(registry), "h", mail.step, registry, credentials=CREDS)
    assert again.workflow == wf.workflow
    create = next(s for s in plan.graph if s.call == "create_event")
    built = build_step_workflow(plan, "h", create.step, registry, credentials=CREDS).workflow
    assert [n["name"] for n in built["nodes"]] == ["Trigger", "caldav.create_event"]
    with pytest.raises(BindingError, match="attaches files"):
        build_batch_workflow(mail, registry)
