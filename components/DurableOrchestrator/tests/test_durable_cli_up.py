"""``countersign temporal up`` starts the dev server where the settings say
(``COUNTERSIGN_TEMPORAL_ADDRESS``; its UI on port + 1000), not always on 7233; a cluster address
starts nothing and exits 1."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from countersign.durable.cli import app

pytestmark = pytest.mark.slow


def _free_pair() -> int:
    """A port P with P + 1000 free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 1000 > 65535:
            continue
        with socket.socket() as t:
            try:
                t.bind(("127.0.0.1", port + 1000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


def test_up_starts_at_the_configured_address_and_its_ui(tmp_path: Path) -> None:
    port = _free_pair()
    env = {"COUNTERSIGN_HOME": str(tmp_path), "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    runner = CliRunner()
    try:
        r = runner.invoke(app, ["up"], env=env)
        assert r.exit_code == 0, r.output
        out = json.loads(r.output.strip().splitlines()[-1])
        assert out["address"] == f"127.0.0.1:{port}"
        assert out["ui"] == f"http://127.0.0.1:{port + 1000}"
        assert httpx.get(out["ui"], timeout=10).status_code == 200
        status = json.loads(runner.invoke(app, ["status"], env=env).output.strip())
        assert status["address"] == f"127.0.0.1:{port}" and status["embedded"] is True
    finally:
        runner.invoke(app, ["down"], env=env)


def test_up_with_a_cluster_address_starts_nothing(tmp_path: Path) -> None:
    env = {
        "COUNTERSIGN_HOME": str(tmp_path),
        "COUNTERSIGN_TEMPORAL_ADDRESS": "temporal.example.org:7233",
    }
    r = CliRunner().invoke(app, ["up"], env=env)
    assert r.exit_code == 1, r.output
    assert json.loads(r.output.strip())["embedded"] is False
    assert not (tmp_path / "temporal").exists() or not any((tmp_path / "temporal").iterdir())
