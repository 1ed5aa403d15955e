"""The CLI as a person or a script uses it: real subprocesses, real files, exit codes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from countersign.kernel import source_registry_dir
from countersign.signer import plan_hash

EXAMPLE = source_registry_dir().parent / "usecases" / "meeting" / "fixtures" / "default.intent.json"


def run(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    e["COUNTERSIGN_HOME"] = str(home)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=60,
        check=False,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_plan_then_verify_then_tamper(home: Path, tmp_path: Path) -> None:
    out = run(home, "plan", "--intent", str(EXAMPLE))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"plan", "signature", "plan_hash"}
    f = tmp_path / "signed.json"
    f.write_text(out.stdout)
    ok = run(home, "verify", str(f))
    assert ok.returncode == 0 and ok.stdout.startswith("ok plan_id="), ok.stderr
    # reformatted: still verifies
    f.write_text(json.dumps(doc, indent=None, sort_keys=True))
    assert run(home, "verify", str(f)).returncode == 0
    # changed content, hash restated: refused, one line
    doc["plan"]["graph"][0]["args"]["user"] = "mallory@example.com"
    doc["plan_hash"] = plan_hash(doc["plan"])
    f.write_text(json.dumps(doc))
    bad = run(home, "verify", str(f))
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("signature_invalid:")
    # hash dropped: refused as malformed (the signer always writes plan_hash)
    del doc["plan_hash"]
    f.write_text(json.dumps(doc))
    bad = run(home, "verify", str(f))
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("signature_malformed:")


def test_plan_is_deterministic_across_processes(home: Path) -> None:
    a = run(home, "plan", "--intent", str(EXAMPLE))
    b = run(home, "plan", "--intent", str(EXAMPLE))
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout


def test_secrets_never_printed(home: Path) -> None:
    out = run(home, "keys", "init")
    assert out.returncode == 0
    seed = (home / "keys" / "k1.seed").read_text().strip()
    for args in (
        ("keys", "list"),
        ("plan", "--intent", str(EXAMPLE)),
        ("keys", "rotate"),
        ("keys", "list"),
    ):
        r = run(home, *args)
        assert r.returncode == 0, r.stderr
        assert seed not in r.stdout + r.stderr


def test_rotate_revoke_through_cli(home: Path, tmp_path: Path) -> None:
    signed = tmp_path / "old.json"
    signed.write_text(run(home, "plan", "--intent", str(EXAMPLE)).stdout)
    assert run(home, "keys", "rotate").returncode == 0
    assert run(home, "verify", str(signed)).returncode == 0
    assert run(home, "keys", "revoke", "k1").returncode == 0
    r = run(home, "verify", str(signed))
    assert r.returncode == 1 and r.stderr.startswith("signature_key_revoked:")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "not JSON"),
        ('{"intent": "schedule_meeting"}', "missing field"),
        (
            '{"intent": "x", "intent_id": "01JDQ3Z0000000000000000001", "received_at": "2026-01-01T00:00:00Z", "user_id": "u", "oops": 1}',
            "unknown field 'oops'",
        ),
        (
            '{"intent": "order_pizza", "intent_id": "01JDQ3Z0000000000000000001", "received_at": "2026-01-01T00:00:00Z", "user_id": "u"}',
            "schedule_meeting",
        ),
    ],
)
def test_malformed_input_exit_2_one_line(
    home: Path, tmp_path: Path, content: str, words: str
) -> None:
    f = tmp_path / "intent.json"
    f.write_text(content)
    r = run(home, "plan", "--intent", str(f))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and words in r.stderr
    assert r.stdout == ""


def test_missing_file_and_needs(home: Path, tmp_path: Path) -> None:
    r = run(home, "plan", "--intent", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    doc = json.loads(EXAMPLE.read_text())
    del doc["entities"]["title"]
    f = tmp_path / "i.json"
    f.write_text(json.dumps(doc))
    r = run(home, "plan", "--intent", str(f))
    assert r.returncode == 3
    assert json.loads(r.stdout)["needs"][0]["entity"] == "title"


def test_verify_garbage(home: Path, tmp_path: Path) -> None:
    run(home, "keys", "init")
    f = tmp_path / "x.json"
    f.write_text("[1, 2]")
    r = run(home, "verify", str(f))
    assert r.returncode == 1 and r.stderr.startswith("signature_malformed:")


def test_registry_validate(home: Path, tmp_path: Path) -> None:
    r = run(home, "registry", "validate")
    assert r.returncode == 0 and r.stdout.startswith("ok version=")
    broken = tmp_path / "reg" / "connectors"
    broken.mkdir(parents=True)
    (broken / "gmail.yaml").write_text("id: gmail\ntitle: G\nops: {}\n")
    r = run(home, "registry", "validate", "--dir", str(tmp_path / "reg"))
    assert r.returncode == 2 and "gmail.yaml: ops" in r.stderr


def test_up_without_services_plans_signs_verifies(home: Path) -> None:
    r = run(home, "up", "--no-services")
    assert r.returncode == 0, r.stderr
    assert "signed, verified" in r.stderr and json.loads(r.stdout)["plan_hash"]


def test_status_reports_temporal_where_the_settings_say(home: Path) -> None:
    """``countersign status`` (and ``countersign temporal status``) report Temporal at
    ``COUNTERSIGN_TEMPORAL_ADDRESS``, not at the default 127.0.0.1:7233."""
    with socket.socket() as idle:
        idle.bind(("127.0.0.1", 0))
        free = idle.getsockname()[1]  # bound, not listening: nothing answers there
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        for args in (("status",), ("temporal", "status")):
            out = run(home, *args, env={"COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{port}"})
            assert out.returncode == 0, out.stderr
            doc = json.loads(out.stdout)
            t = doc["temporal"] if args == ("status",) else doc
            assert t["address"] == f"127.0.0.1:{port}" and t["running"] is True, t
            assert t["ui"] == f"http://127.0.0.1:{port + 1000}" and t["embedded"] is True
    down = run(home, "status", env={"COUNTERSIGN_TEMPORAL_ADDRESS": f"localhost:{free}"})
    t = json.loads(down.stdout)["temporal"]
    assert (t["address"], t["running"]) == (f"localhost:{free}", False), t

    # a cluster: reachable or not, its address, the UI the settings name (none by default)
    with socket.socket() as cluster:
        cluster.bind(("127.0.0.2", 0))
        cluster.listen()
        at = f"127.0.0.2:{cluster.getsockname()[1]}"
        ui = {"COUNTERSIGN_TEMPORAL_UI_URL": "https://temporal.example.org"}
        t = json.loads(run(home, "status", env={"COUNTERSIGN_TEMPORAL_ADDRESS": at, **ui}).stdout)[
            "temporal"
        ]
    assert t == {
        "running": True,
        "address": at,
        "ui": "https://temporal.example.org",
        "embedded": False,
    }
    nowhere = run(home, "status", env={"COUNTERSIGN_TEMPORAL_ADDRESS": "temporal.invalid:7233"})
    assert nowhere.returncode == 0, nowhere.stderr
    t = json.loads(nowhere.stdout)["temporal"]
    assert t == {
        "running": False,
        "address": "temporal.invalid:7233",
        "ui": None,
        "embedded": False,
    }
    bad = run(home, "status", env={"COUNTERSIGN_TEMPORAL_ADDRESS": "no-port"})
    assert "not host:port" in json.loads(bad.stdout)["temporal"]["error"]
