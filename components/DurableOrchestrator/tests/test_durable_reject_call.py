"""A rejection's reason travels as ``RejectCall.reason`` (DurableOrchestrator LLD, "Gates"); a
``reject_gate`` activity scheduled before that, whose ``RedeemCall`` payload held the reason in
``token``, still runs on a newer worker."""

from __future__ import annotations

from countersign.durable import RejectCall
from countersign.planner.testing import make_intent, signed_plan
from countersign.registry import Registry
from countersign.signer import KeyRing


def test_a_reject_payload_from_before_reads_its_token_as_the_reason(
    registry: Registry, keyring: KeyRing
) -> None:
    doc = signed_plan(make_intent("watch_visa_slots"), keyring, registry)
    old = {"signed": doc, "user_id": "u-alice", "gate_id": "gate-A", "token": "not that day"}
    call = RejectCall.model_validate(old)
    assert call.reason == "not that day"
    sent = call.model_dump(mode="json")
    assert "token" not in sent and sent["reason"] == "not that day"
    assert RejectCall.model_validate_json(call.model_dump_json()).reason == "not that day"
