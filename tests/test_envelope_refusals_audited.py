"""An envelope refused for its spelling is audited like any other refused signature (issue 10,
hole 5). The re-spellings are generated in components/Signer/tests/test_signer_envelope_as_written.py;
here one of each kind goes through the preview's verify step with the real store recorder and must
leave a ``signature_refused`` row naming the plan and the code."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text

from countersign.kernel import MalformedEnvelopeError, Plan, Policy, system_clock
from countersign.planner import make_plan
from countersign.planner.testing import make_intent, signed_plan
from countersign.registry import Registry
from countersign.signer import KeyRing
from countersign.steps import StoreRecorder, verify_or_audit
from countersign.storage import Database

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _other_offset(ts: str) -> str:
    t = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return t.astimezone(timezone(timedelta(hours=2))).isoformat(timespec="milliseconds")


def _padding_bits(sig: str) -> str:
    i = _B64.index(sig[85])
    return sig[:85] + _B64[i ^ 1] + sig[86:]


def _env(field: str, change: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        env = dict(doc["signature"])
        env[field] = change(env[field])
        doc["signature"] = env

    return edit


def _drop(where: str, field: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        if where == "signature":
            doc["signature"] = {k: v for k, v in doc["signature"].items() if k != field}
        else:
            del doc[field]

    return edit


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "nonce-lower-case": _env("nonce", str.lower),
    "ts-other-offset": _env("ts", _other_offset),
    "signature-padding-bits": _env("signature", _padding_bits),
    "algo-missing": _drop("signature", "algo"),
    "plan_hash-null": lambda d: d.update(plan_hash=None),
    "plan_hash-missing": _drop("doc", "plan_hash"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_respelled_envelope_is_refused_and_audited(
    db: Database, registry: Registry, keyring: KeyRing, edit: str
) -> None:
    plan = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    EDITS[edit](doc)
    with pytest.raises(MalformedEnvelopeError):
        verify_or_audit(
            doc,
            keys=keyring,
            recorder=StoreRecorder(db, clock=system_clock),
            actor="test",
            now=system_clock(),
        )
    with db.tx() as c:
        rows = c.execute(
            text("SELECT kind, status, plan_id, reason FROM audit_log ORDER BY seq")
        ).all()
    assert [tuple(r) for r in rows] == [
        ("signature_refused", "refused", plan.plan_id, "signature_malformed")
    ]
