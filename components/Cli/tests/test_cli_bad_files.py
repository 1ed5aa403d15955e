"""Bad files end in one line naming the file, never a traceback (issue 10, hole 7).

Each file the CLI reads — intent, evidence, policy (JSON or YAML), a signed plan to verify, a
registry file — is given in UTF-16, UTF-32, Latin-1, nested 100 000 deep, or with a key twice.
Each must exit 2 (malformed input) with exactly one line on stderr that names the file and what
is wrong. ``audit verify`` with its head row deleted exits 1 with one line instead of
``NoResultFound``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from countersign.audit import AuditLog
from countersign.kernel import source_registry_dir, system_clock
from countersign.storage import Database

EXAMPLE = source_registry_dir().parent / "usecases" / "meeting" / "fixtures" / "default.intent.json"
EVIDENCE = [
    {
        "type": "preference",
        "key": "meeting.length",
        "value": 30,
        "confidence": 0.9,
        "source_ref": "test",
    }
]


def run(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    e.pop("DATABASE_URL", None)
    e["COUNTERSIGN_HOME"] = str(home)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=120,
        check=False,
    )


def _utf16(t: str) -> bytes:
    return t.encode("utf-16")


def _utf16be_no_bom(t: str) -> bytes:
    return t.encode("utf-16-be")


def _utf32(t: str) -> bytes:
    return t.encode("utf-32")


def _latin1(t: str) -> bytes:
    # a non-ASCII character in the first string, so the bytes are not UTF-8
    i = t.index('"') + 1
    return (t[:i] + "é" + t[i:]).encode("latin-1", errors="replace")


def _deep(t: str) -> bytes:
    return ("[" * 100_000 + "]" * 100_000).encode()


def _duplicate(t: str) -> bytes:
    """The first key of the first object written twice, an attacker's value first."""
    i = t.index("{") + 1
    j = t.index('"', i)
    k = t.index('"', j + 1)
    key = t[j : k + 1]
    return (t[:i] + f"{key}: 1, " + t[i:]).encode()


BAD: dict[str, Callable[[str], bytes]] = {
    "utf-16": _utf16,
    "utf-16be-no-bom": _utf16be_no_bom,
    "utf-32": _utf32,
    "latin-1": _latin1,
    "deep": _deep,
    "duplicate-key": _duplicate,
}
WORDS = {
    "utf-16": "UTF-16",
    "utf-16be-no-bom": "NUL",
    "utf-32": "UTF-32",
    "latin-1": "not UTF-8",
    "deep": "nests deeper",
    "duplicate-key": "appears more than once",
}


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("cli") / "home"
    out = run(home, "plan", "--intent", str(EXAMPLE))
    assert out.returncode == 0, out.stderr
    return home, out.stdout


def _one_line(r: subprocess.CompletedProcess[str], path: Path, words: str, code: int = 2) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert str(path) in r.stderr and words in r.stderr, r.stderr


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("role", ["intent", "evidence", "policy", "policy-yaml", "verify"])
def test_a_bad_file_is_one_line_naming_it(
    signed: tuple[Path, str], tmp_path: Path, role: str, bad: str
) -> None:
    home, signed_text = signed
    base = {
        "intent": EXAMPLE.read_text(encoding="utf-8"),
        "evidence": json.dumps(EVIDENCE),
        "policy": json.dumps({"plan_ttl_s": 900, "approval_ttl_s": 300}),
        "policy-yaml": json.dumps({"plan_ttl_s": 900, "approval_ttl_s": 300}),
        "verify": signed_text,
    }[role]
    f = tmp_path / ("policy.yaml" if role == "policy-yaml" else f"{role}.json")
    f.write_bytes(BAD[bad](base))
    if role == "verify":
        args = ["verify", str(f)]
    elif role == "intent":
        args = ["plan", "--intent", str(f)]
    else:
        flag = "--policy" if role.startswith("policy") else "--evidence"
        args = ["plan", "--intent", str(EXAMPLE), flag, str(f)]
    r = run(home, *args)
    _one_line(r, f, WORDS[bad])
    assert r.stdout == ""


@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_bad_registry_file_is_one_line_naming_it(
    signed: tuple[Path, str], tmp_path: Path, bad: str
) -> None:
    home, _ = signed
    reg = tmp_path / "registry"
    shutil.copytree(source_registry_dir(), reg)
    f = reg / "connectors" / "slack.yaml"
    # YAML in flow style (JSON), so every kind of damage applies to it as to the JSON files
    f.write_bytes(BAD[bad](json.dumps(yaml.safe_load(f.read_text(encoding="utf-8")))))
    r = run(home, "registry", "validate", "--dir", str(reg))
    _one_line(r, f, WORDS[bad])
    # the same registry through the env setting, as `plan` reads it
    r = run(home, "plan", "--intent", str(EXAMPLE), env={"COUNTERSIGN_REGISTRY_DIR": str(reg)})
    _one_line(r, f, WORDS[bad])


@pytest.fixture
def headless_db(db: Database) -> Iterator[Database]:
    """A database with a few audit rows whose ``audit_head`` row is then deleted (restored
    afterwards: the ``db`` fixture of the next test resets the head with an UPDATE)."""
    log = AuditLog(clock=system_clock)
    with db.tx() as c:
        for i in range(3):
            log.append(c, {"kind": "step_finished", "status": "ok", "actor": "test", "step": i})
        c.execute(text("DELETE FROM audit_head"))
    try:
        yield db
    finally:
        with db.tx() as c:
            c.execute(
                text(
                    "INSERT INTO audit_head (id, seq, last_hash) VALUES (1, 0, repeat('0', 64)) "
                    "ON CONFLICT (id) DO NOTHING"
                )
            )


def test_audit_verify_without_its_head_row(
    headless_db: Database, pg_url: str, tmp_path: Path
) -> None:
    with headless_db.tx() as c:
        report = AuditLog(clock=system_clock).verify(c)
    assert not report.ok and report.rows == 3 and "audit_head" in (report.reason or "")
    r = run(tmp_path / "home", "audit", "verify", env={"DATABASE_URL": pg_url})
    assert "Traceback" not in r.stderr and "NoResultFound" not in r.stderr, r.stderr
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "audit_head" in r.stderr
