"""``countersign up`` stores its plan the way every other entry point does: with its audit row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from countersign.audit import AuditLog
from countersign.kernel import system_clock
from countersign.storage import Database


def _up(home: Path, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env["COUNTERSIGN_HOME"] = str(home)
    env["DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", "up", "--no-services"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_up_stores_the_plan_with_its_plan_signed_row(
    db: Database, pg_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    first = _up(home, pg_url)
    assert first.returncode == 0, first.stderr
    assert "signed, verified and stored plan" in first.stderr
    doc = json.loads(first.stdout)
    plan_id = doc["plan"]["plan_id"]
    with db.tx() as c:
        stored = c.execute(
            text("SELECT plan_hash, status FROM plans WHERE plan_id = :p"), {"p": plan_id}
        ).one()
        signed = c.execute(
            text(
                "SELECT actor, details FROM audit_log WHERE kind = 'plan_signed' AND plan_id = :p"
            ),
            {"p": plan_id},
        ).all()
    assert stored.plan_hash == doc["plan_hash"] and stored.status == "signed"
    assert len(signed) == 1, signed
    assert signed[0].details["plan_hash"] == doc["plan_hash"]
    assert signed[0].details["key"] == doc["signature"]["pubkey_id"]
    assert signed[0].actor == doc["plan"]["intent"]["user_id"]

    # the same plan again (planning is deterministic): stored once, audited once
    again = _up(home, pg_url)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["plan_hash"] == doc["plan_hash"]
    with db.tx() as c:
        kinds = [r.kind for r in c.execute(text("SELECT kind FROM audit_log ORDER BY seq"))]
        assert kinds == ["plan_signed"]
        assert AuditLog(clock=system_clock).verify(c).ok
