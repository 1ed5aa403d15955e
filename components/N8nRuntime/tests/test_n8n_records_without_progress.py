"""A write's record when its workflow saves no progress and n8n was killed mid-write (N8nRuntime
SPEC "Execution records"): the shapes are those n8n 2.41.1 left in a real run (SIGKILL while the
HTTP Request node's PUT was held at a slow server, n8n started again; its recovery rebuilt
``runData`` from the event log with placeholder items and kept the webhook's body only in
``executionData.nodeExecutionStack``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from countersign.kernel import content_hash
from countersign.n8n.executions import KeyRef, read_node, trigger_body
from countersign.n8n.keeping import carried_key, owner_plan

OP = "caldav.create_event"
ARGS = {"user": "alice@example.com", "uid": "u-5", "title": "Sync"}
BODY = {"data": {"url": "http://cal/u-5.ics"}, "args": ARGS, "plan": {"plan_id": "P1", "step": 5}}
PLACEHOLDER = {"json": {"isArtificialRecoveredEventItem": True}}


def _crashed(op_run: dict[str, Any] | None, stacked: str = "Trigger") -> dict[str, Any]:
    """A record as n8n's recovery leaves it: ``runData`` rebuilt from the event log."""
    run_data: dict[str, Any] = {
        "Trigger": [{"executionStatus": "success", "data": {"main": [[PLACEHOLDER]]}}]
    }
    if op_run is not None:
        run_data[OP] = [op_run]
    stack = [{"node": {"name": stacked}, "data": {"main": [[{"json": {"body": BODY}}]]}}]
    return {
        "id": "7",
        "status": "crashed",
        "data": {
            "resultData": {"runData": run_data, "lastNodeExecuted": OP if op_run else "Trigger"},
            "executionData": {"nodeExecutionStack": stack},
        },
    }


def _key() -> KeyRef:
    when = datetime.now(UTC)
    return KeyRef("P1", 5, content_hash(ARGS), when, when)


def test_the_key_is_found_by_the_body_n8n_stored_at_creation() -> None:
    crashed = _crashed({"executionStatus": "crashed", "error": {"name": "NodeCrashedError"}})
    assert trigger_body(crashed) == BODY
    assert _key().carried_by(crashed) is True
    other = KeyRef("P1", 5, content_hash({**ARGS, "uid": "u-6"}), *[datetime.now(UTC)] * 2)
    assert other.carried_by(crashed) is False
    # the next node's input is the Trigger's item passed on (a record saved with progress)
    assert _key().carried_by(_crashed(None, stacked=OP)) is True
    assert carried_key(crashed) == f"P1:5:{content_hash(ARGS)}" and owner_plan(crashed) == "P1"
    # neither place holds a body: no readable trigger data (never "another key")
    bare = _crashed(None)
    bare["data"]["executionData"]["nodeExecutionStack"] = []
    assert _key().carried_by(bare) is None


def test_an_op_node_cut_short_is_unknown_never_failed() -> None:
    crashed = _crashed({"executionStatus": "crashed", "error": {"name": "NodeCrashedError"}})
    assert read_node(crashed, OP).kind == "unknown"
    # killed after the webhook's execution was made, before the op's node started
    assert read_node(_crashed(None), OP).kind == "unknown"


def test_a_node_finished_by_the_event_log_but_not_kept_is_unknown() -> None:
    """The event log says the op's node finished, its answer was never saved: recovery puts a
    placeholder item there, which is no answer (the provider settles it)."""
    finished = _crashed({"executionStatus": "success", "data": {"main": [[PLACEHOLDER]]}})
    reading = read_node(finished, OP)
    assert reading.kind == "unknown" and "lost" in reading.reason


def test_a_whole_record_still_answers() -> None:
    whole = _crashed({"data": {"main": [[{"json": {"statusCode": 201}}]]}})
    whole["status"] = "success"
    trigger = [{"data": {"main": [[{"json": {"body": BODY}}]]}}]
    whole["data"]["resultData"]["runData"]["Trigger"] = trigger
    reading = read_node(whole, OP)
    assert (reading.kind, reading.item, reading.args) == ("answered", {"statusCode": 201}, ARGS)
