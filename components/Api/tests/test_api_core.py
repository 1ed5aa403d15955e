"""The pure parts of the service: status folded from events, cursors."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from countersign.api import BadCursorError, fold_events
from countersign.api.core import decode_cursor, encode_cursor
from countersign.api.models import ApproveRequest, ExecuteRequest, IntentRequest, RejectRequest
from countersign.kernel import schema_snapshot


def _e(
    seq: int, kind: str, status: str = "ok", step: int | None = None, op: str | None = None
) -> dict[str, object]:
    return {"seq": seq, "kind": kind, "status": status, "step": step, "op": op, "details": {}}


def test_status_follows_the_log() -> None:
    events = [
        _e(1, "plan_signed"),
        _e(2, "preview_run"),
        _e(3, "token_issued", op="gate-A"),
        _e(4, "gate_approved", op="gate-A"),
        _e(5, "step_started", step=5),
        _e(6, "step_finished", step=5),
        _e(7, "step_started", step=6),
        _e(8, "step_unknown", "unknown", step=6),
        _e(9, "token_refused", "refused", op="gate-A"),
    ]
    state = fold_events(events)
    assert state.status == "running" and state.last_seq == 9
    assert state.steps == {5: "succeeded", 6: "unknown"}
    assert state.gates == {"gate-A": "approved"}
    assert fold_events([*events, _e(10, "durable_finished", "completed")]).status == "completed"
    assert fold_events([*events, _e(10, "plan_cancelled", "cancelled")]).status == "cancelled"
    assert fold_events([_e(1, "step_compensated", "error", step=5)]).steps == {
        5: "compensation_failed"
    }


@given(
    st.lists(st.sampled_from(["token_refused", "execute_refused", "plan_refused", "token_issued"]))
)
def test_refusals_never_move_the_status(kinds: list[str]) -> None:
    events = [_e(1, "plan_signed"), *(_e(i + 2, k, "refused") for i, k in enumerate(kinds))]
    assert fold_events(events).status == "signed"


def test_the_workflow_a_plan_was_handed_to_is_folded_from_either_event_form() -> None:
    full = {**_e(2, "handed_off", "ok"), "details": {"workflow_id": "watch-P1"}}
    compact = {**_e(2, "handed_off", "ok"), "workflow_id": "watch-P1"}
    for handed in (full, compact):
        state = fold_events([_e(1, "plan_signed"), handed, _e(3, "watcher_polled")])
        assert state.workflow_id == "watch-P1" and state.status == "watching"
    assert fold_events([_e(1, "plan_signed")]).workflow_id is None


def test_a_stale_refusal_marks_the_plan_stale_until_the_next_preview() -> None:
    events = [_e(1, "plan_signed"), _e(2, "preview_run"), _e(3, "gate_approved")]
    stale = [*events, _e(4, "execute_refused", "stale")]
    assert fold_events(stale).status == "stale"
    assert fold_events([*stale, _e(5, "preview_run")]).status == "previewed"


@given(
    st.datetimes(timezones=st.just(UTC)),
    st.text(alphabet="0123456789ABCDEFGHJKMNPQRSTVWXYZ", min_size=26, max_size=26),
)
def test_cursor_roundtrip(at: datetime, plan_id: str) -> None:
    assert decode_cursor(encode_cursor(at, plan_id)) == (at, plan_id)


@pytest.mark.parametrize("bad", ["!!", "", "bm90IGEgY3Vyc29y", "%%%%"])
def test_foreign_cursors_are_named(bad: str) -> None:
    with pytest.raises(BadCursorError, match="not one this API issued"):
        decode_cursor(bad)


def test_json_schemas_are_current() -> None:
    folder = Path(__file__).resolve().parents[1] / "schemas"
    stale = schema_snapshot(
        [IntentRequest, ApproveRequest, RejectRequest, ExecuteRequest],
        folder,
        update=os.environ.get("COUNTERSIGN_UPDATE_SCHEMAS") == "1",
    )
    assert not stale, f"schemas out of date: {stale}; rerun with COUNTERSIGN_UPDATE_SCHEMAS=1"


def _approved() -> list[dict[str, object]]:
    return [
        _e(1, "plan_signed"),
        {**_e(2, "preview_run"), "details": {"reads": 2, "steps": [1, 2]}},
        _e(3, "gate_approved", op="gate-A"),
    ]


GATE_AFTER = [
    ("completed", [_e(4, "execute_finished", "completed")], "completed", "passed"),
    ("waiting at the next gate", [_e(4, "execute_finished", "waiting")], "waiting", "passed"),
    ("failed", [_e(4, "execute_finished", "failed")], "failed", "spent"),
    ("stale: approve again", [_e(4, "execute_refused", "stale")], "stale", "open"),
    ("cancelled run", [_e(4, "durable_finished", "cancelled")], "cancelled", "spent"),
]


@pytest.mark.parametrize(
    ("why", "tail", "status", "gate"), GATE_AFTER, ids=[g[0] for g in GATE_AFTER]
)
def test_a_spent_approval_is_not_shown_as_still_approved(
    why: str, tail: list[dict[str, object]], status: str, gate: str
) -> None:
    state = fold_events([*_approved(), *tail])
    assert state.status == status
    assert state.gates == {"gate-A": gate}
    assert state.steps == {1: "succeeded", 2: "succeeded"}, "the reads the preview ran"


def test_an_undecided_gate_of_an_ended_plan_is_closed() -> None:
    waiting = [_e(1, "plan_signed"), _e(2, "gate_waiting", "waiting", op="gate-B")]
    assert fold_events([*waiting, _e(3, "plan_cancelled", "cancelled")]).gates == {
        "gate-B": "closed"
    }
    assert fold_events([*waiting, _e(3, "durable_finished", "cancelled")]).status == "cancelled"


def test_a_run_cancelled_in_the_temporal_ui_is_cancelled_not_failed() -> None:
    from countersign.durable import ended_outcome

    assert ended_outcome("CANCELED") == ("cancelled", "cancelled")
    assert ended_outcome("TERMINATED") == ("terminated", "failed")


def test_a_hand_off_names_its_workflow_and_old_events_fall_back_to_the_id_rule() -> None:
    from countersign.api.services.durable import handoff_from
    from countersign.durable import PlanExecutionWorkflow, WatcherWorkflow

    recorded = handoff_from({"workflow_id": "plan-P1", "workflow_type": "WatcherWorkflow"})
    assert recorded is not None and recorded.workflow is WatcherWorkflow  # the record wins
    for wid, workflow in (("watch-P1", WatcherWorkflow), ("plan-P1", PlanExecutionWorkflow)):
        old = handoff_from({"workflow_id": wid})  # written before the type was recorded
        assert old is not None and old.workflow is workflow
    assert handoff_from({"steps": [3]}) is None


def _cut_short() -> list[dict[str, object]]:
    """An approved meeting whose execute was cut short in its second write (n8n died)."""
    return [
        *_approved(),
        _e(4, "step_started", "ok", step=4),
        _e(5, "step_finished", "ok", step=4),
        _e(6, "step_started", "ok", step=5),
        _e(7, "step_unknown", "unknown", step=5),
    ]


def _asked(seq: int, status: str = "unknown") -> dict[str, object]:
    """The settlement's end of a cut-short execute that it could not settle (``Settler``)."""
    details = {"needs_attention": True, "writes": {"4": "done", "5": "unknown"}, "offers": ["undo"]}
    return {**_e(seq, "execute_finished", status), "details": details}


#: (why, the events after the cut-short write, the plan's status, gate-A, step 5)
SETTLING = [
    ("cut short, nothing ended yet", [], "running", "approved", "unknown"),
    (
        "the execute ended with a write unknown: being settled",
        [_e(8, "execute_finished", "unknown")],
        "unknown",
        "approved",
        "unknown",
    ),
    ("the settlement asked a person", [_asked(8)], "needs_attention", "approved", "unknown"),
    (
        "asked, after the execute's own unknown end",
        [_e(8, "execute_finished", "unknown"), _asked(9)],
        "needs_attention",
        "approved",
        "unknown",
    ),
    (
        "settled from evidence: completed",
        [_e(8, "reconciled", "done", step=5), _e(9, "execute_finished", "completed")],
        "completed",
        "passed",
        "unknown",
    ),
    (
        "asked, then the person undid it",
        [_asked(8), _e(9, "step_compensated", "ok", step=4), _e(10, "execute_finished", "failed")],
        "failed",
        "spent",
        "unknown",
    ),
    (
        "asked, then finished: the missing write ran",
        [
            _asked(8),
            _e(9, "step_started", "ok", step=5),
            _e(10, "step_finished", "ok", step=5),
            _e(11, "execute_finished", "completed"),
        ],
        "completed",
        "passed",
        "succeeded",
    ),
    (
        "asked, then finish started its writes again",
        [_asked(8), _e(9, "step_started", "ok", step=6)],
        "running",
        "approved",
        "unknown",
    ),
    (
        "a durable run's unknown end is not a settlement's question",
        [{**_e(8, "durable_finished", "unknown"), "details": {"workflow_id": "plan-P"}}],
        "unknown",
        "approved",
        "unknown",
    ),
    (
        "needs_attention only with the settlement's flag set",
        [{**_e(8, "execute_finished", "unknown"), "details": {"needs_attention": False}}],
        "unknown",
        "approved",
        "unknown",
    ),
]


@pytest.mark.parametrize(
    ("why", "tail", "status", "gate", "step"), SETTLING, ids=[s[0] for s in SETTLING]
)
def test_a_cut_short_execute_reads_as_the_settlement_says(
    why: str, tail: list[dict[str, object]], status: str, gate: str, step: str
) -> None:
    state = fold_events([*_cut_short(), *tail])
    assert state.status == status, why
    assert state.gates == {"gate-A": gate}, why
    assert state.steps[4] in ("succeeded", "compensated") and state.steps[5] == step, why


def test_an_ask_without_details_reads_unknown_never_needs_attention() -> None:
    """The compact events a stored row carries have no details: the fold cannot tell the ask
    from the execute's own unknown end, and says the weaker word (views.show then folds the
    full log)."""
    bare = {k: v for k, v in _asked(8).items() if k != "details"}
    assert fold_events([*_cut_short(), bare]).status == "unknown"
