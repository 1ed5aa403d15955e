"""The service verbs (``users``, ``plans``, the plan verbs) as a person runs them (subprocess), on
the test database."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from countersign.api import UserStore
from countersign.storage import Database

BIN = Path(sys.executable).with_name("countersign")


def _run(pg_url: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": pg_url, "COUNTERSIGN_HOME": str(home)}
    return subprocess.run(
        [str(BIN), *args], check=False, capture_output=True, text=True, env=env, timeout=120
    )


def test_users_add_list_revoke(db: Database, pg_url: str, tmp_path: Path) -> None:
    out = _run(pg_url, tmp_path, "users", "add", "dana@example.com", "--admin")
    assert out.returncode == 0, out.stderr
    key = out.stdout.strip().splitlines()[-1]
    assert key.startswith("cs_") and len(key) > 40
    users = UserStore(db, clock=lambda: datetime.now(UTC))
    assert users.by_key(key).admin
    listed = _run(pg_url, tmp_path, "users", "list")
    assert "dana@example.com\tadmin\tactive" in listed.stdout and key not in listed.stdout
    again = _run(pg_url, tmp_path, "users", "add", "dana@example.com")
    assert again.returncode == 2 and "already exists" in again.stderr
    bad = _run(pg_url, tmp_path, "users", "add", "no spaces please")
    assert bad.returncode == 2 and "not valid" in bad.stderr
    assert _run(pg_url, tmp_path, "users", "revoke", "dana@example.com").returncode == 0
    gone = _run(pg_url, tmp_path, "users", "revoke", "dana@example.com")
    assert gone.returncode == 2 and "no active user" in gone.stderr


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("plans", "show", "01ZZZZZZZZZZZZZZZZZZZZZZZZ"), 1, "plan_not_found"),
        (("cancel", "nope"), 1, "plan_not_found"),
        (("approve", "01ZZZZZZZZZZZZZZZZZZZZZZZZ", "gate-A", "--choice", "{bad"), 2, "not JSON"),
        # one text, one reading (GLOBAL_SPEC §11a): a key given twice, however it is spelled
        *(
            (("approve", "01ZZZZZZZZZZZZZZZZZZZZZZZZ", "gate-A", "--choice", c), 2, says)
            for c, says in [
                ('{"slot": 1, "slot": 2}', "document_duplicate_key: --choice: $: key 'slot'"),
                ('{"sl\\u006ft": 1, "slot": 2}', "key 'slot' appears more than once"),
                ('{"s": {"a": 1, "\\u0061": 2}}', "$.s: key 'a'"),
                ('[{"x": 1}, {"x": 1, "x": 1}]', "$[1]: key 'x'"),
                ('{"a": NaN}', "document_malformed"),
                ("[" * 100 + "]" * 100, "deeper than 64"),
            ]
        ),
    ],
)
def test_plan_verbs_refuse_in_one_line(
    db: Database, pg_url: str, tmp_path: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    out = _run(pg_url, tmp_path, *args)
    assert out.returncode == code, out
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1
