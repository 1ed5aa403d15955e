"""Invariant 3e, approvals are provable offline: a bundle from real approve/reject calls over HTTP
(embedded Postgres, n8n, Radicale) verifies in a fresh process with no database and no network,
and every edit of it fails there, naming the first bad link (GLOBAL_SPEC §8, §13)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from countersign.api.testing import ALICE, BOB, ApiHarness
from countersign.kernel import content_hash
from countersign.signer import receipt_hash

pytestmark = pytest.mark.slow


def _meeting(title: str) -> dict[str, Any]:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    start, end = day + timedelta(hours=13), day + timedelta(hours=18)
    return {
        "intent": {
            "intent": "schedule_meeting",
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": title,
                "window_start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "window_end": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
    }


def _slot(preview: dict[str, Any], i: int) -> dict[str, str]:
    slot = preview["normalized"]["steps"]["3"]["slots"][i]
    start = datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
    end = (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
    return {"start": slot["start"], "end": end}


def verify(home: Path, path: Path) -> subprocess.CompletedProcess[str]:
    """``countersign receipts verify`` in a fresh process: no DATABASE_URL, an empty home."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COUNTERSIGN_") and k not in {"DATABASE_URL", "PGHOST", "PGPORT"}
    }
    env["COUNTERSIGN_HOME"] = str(home)
    env["DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/none"  # would fail if it were used
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", "receipts", "verify", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_bundle_from_real_decisions_verifies_offline_and_edits_name_the_link(
    api: ApiHarness, tmp_path: Path
) -> None:
    home = tmp_path / "empty-home"
    with api.client() as alice, api.client(BOB) as bob:
        plans = []
        for title in ("Receipts", "Other"):
            r = alice.post("/v1/intents", json=_meeting(title))
            assert r.status_code == 201, r.text
            plans.append(r.json())
        first, other = plans
        pid = first["plan_id"]
        choices = [_slot(first["preview"], 0)] * 2
        for choice in choices:  # approved, then approved again (a fresh token, a new receipt)
            ok = alice.post(f"/v1/plans/{pid}/gates/gate-A/approve", json={"choice": choice})
            assert ok.status_code == 200, ok.text
        rejected = alice.post(f"/v1/plans/{other['plan_id']}/gates/gate-A/reject", json={})
        assert rejected.status_code == 200, rejected.text

        got = alice.get(f"/v1/plans/{pid}/receipts")
        assert got.status_code == 200, got.text
        assert got.headers["content-disposition"] == (f'attachment; filename="receipts-{pid}.json"')
        missing = bob.get(f"/v1/plans/{pid}/receipts")
        never = bob.get("/v1/plans/01JZZZZZZZZZZZZZZZZZZZZZZZ/receipts")
        assert missing.status_code == never.status_code == 404
        assert missing.json()["code"] == never.json()["code"] == "plan_not_found"
        bundle = got.json()
        other_bundle = alice.get(f"/v1/plans/{other['plan_id']}/receipts").json()

    receipts = [e["receipt"] for e in bundle["receipts"]]
    assert [(r["seq"], r["gate_id"], r["decision"]) for r in receipts] == [
        (1, "gate-A", "approved"),
        (2, "gate-A", "approved"),
    ]
    assert receipts[0]["user_id"] == ALICE and receipts[0]["plan_hash"] == first["plan_hash"]
    assert other_bundle["receipts"][0]["receipt"]["decision"] == "rejected"
    with api.services.db.tx() as c:  # anchored in the audit chain
        anchored = list(
            c.execute(
                text(
                    "SELECT details->>'receipt_hash' FROM audit_log "
                    "WHERE kind = 'receipt_signed' AND plan_id = :p ORDER BY seq"
                ),
                {"p": pid},
            ).scalars()
        )
        stored = list(
            c.execute(
                text("SELECT choice FROM approval_tokens WHERE plan_id = :p ORDER BY issued_at"),
                {"p": pid},
            ).scalars()
        )
    assert anchored == [receipt_hash(e) for e in bundle["receipts"]]
    # the hash of the choice as approved (the service may have normalized the slot it was sent)
    assert [r["choice_hash"] for r in receipts] == [content_hash(c) for c in stored]

    f = tmp_path / "bundle.json"
    f.write_text(json.dumps(bundle, indent=2))
    checked = verify(home, f)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"ok plan_id={pid} receipts=2 "), checked.stdout
    assert not home.exists()  # nothing was read or created there

    def refused(edited: dict[str, Any], code: int, expected: str) -> None:
        f.write_text(json.dumps(edited))
        out = verify(home, f)
        assert out.returncode == code, (out.stdout, out.stderr)
        assert out.stderr.startswith(expected), out.stderr

    edit = copy.deepcopy(bundle)
    edit["receipts"][1]["receipt"]["choice_hash"] = content_hash({"start": "elsewhen"})
    refused(edit, 1, "receipt_invalid: receipt 2 (gate-A approved): the signature by key")
    edit = copy.deepcopy(bundle)
    edit["receipts"][0] = other_bundle["receipts"][0]  # another plan's receipt, in its place
    refused(edit, 1, "receipt_invalid: receipt 1 (gate-A rejected): plan_id is")
    edit = copy.deepcopy(bundle)
    edit["receipts"].reverse()
    refused(edit, 1, "receipt_invalid: receipt 1 (gate-A approved): seq is 2, expected 1")
    edit = copy.deepcopy(bundle)
    del edit["receipts"][1]
    refused(edit, 1, "receipt_invalid: head: names 2 receipts, the bundle holds 1")
    edit = copy.deepcopy(bundle)
    edit["signed_plan"]["plan"]["intent"]["entities"]["title"] = "Receipts!"
    refused(edit, 1, "signature_hash_mismatch: signed plan:")
    f.write_text(json.dumps(bundle).replace('"seq": 1', '"seq": 1, "seq": 2', 1))
    dup = verify(home, f)
    assert dup.returncode == 2 and "document_duplicate_key" in dup.stderr, dup.stderr
    f.write_text("{not json")
    assert verify(home, f).returncode == 2
    refused({"receipts": []}, 2, "receipt_bundle_malformed: bundle:")
