"""The whole stack from one command, as a newcomer runs it: ``countersign up --detach`` starts
every service and prints a login link that works (a meeting goes from a sentence in the chat page
to a mail in the sandbox mailbox); a second ``up`` says it is running and starts nothing; ``down``
stops everything, PostgreSQL included."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from countersign.api.testing import chromium, sign_in
from countersign.kernel.process import free_port, port_open

pytestmark = pytest.mark.slow
SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"


def _cli(home: Path, env_extra: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COUNTERSIGN_") and k != "DATABASE_URL"
    }
    env |= {"COUNTERSIGN_HOME": str(home), **env_extra}
    if cache := os.environ.get("COUNTERSIGN_CACHE_DIR"):
        env["COUNTERSIGN_CACHE_DIR"] = cache
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def _a_meeting_from_the_chat_page(login: str, api_port: int, mailbox: str) -> None:
    """In a real browser, on the stack as ``up`` started it: the printed link signs in; a
    sentence missing the length is asked about; the answer gives a card with free slots from the
    sandbox calendars; Approve runs the writes; the mail is in the sandbox mailbox."""
    with chromium() as browser:
        page = browser.new_page()
        sign_in(page, login)
        page.wait_for_selector("text=signed in as local")
        assert page.request.get(f"http://127.0.0.1:{api_port}/v1/me").json()["user_id"] == "local"
        page.fill("#text", "schedule a meeting with Alice and Bob tomorrow afternoon")
        page.press("#text", "Enter")
        page.wait_for_selector("text=How long should the meeting be")
        page.fill("#text", "45 minutes, called Stack check")
        page.press("#text", "Enter")
        page.wait_for_selector("section.card fieldset input[type=radio]", timeout=60_000)
        page.get_by_role("button", name="Approve").click()
        page.wait_for_selector("text=finished: completed", timeout=60_000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "stack-meeting-done.png"), full_page=True)
    box = httpx.get(mailbox, timeout=10)
    assert box.headers.get("X-Countersign-Sandbox") == "true"
    assert "Stack check" in box.text, box.text[:2000]


def test_up_detach_login_and_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    api_port, temporal_port = free_port(), free_port()
    extra = {
        "COUNTERSIGN_N8N_PORT": str(free_port()),
        "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{temporal_port}",
        "COUNTERSIGN_SANDBOX_PORTS": "free",
    }
    up = _cli(home, extra, "up", "--detach", "--port", str(api_port))
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        lines = dict(
            re.split(r"\s{2,}", line.strip(), maxsplit=1)
            for line in up.stdout.splitlines()
            if re.search(r"\S\s{2,}\S", line)
        )
        login = lines["sign in (once)"]
        health = httpx.get(f"http://127.0.0.1:{api_port}/healthz", timeout=10).json()
        assert health == {
            "status": "ok",
            "database": "ok",
            "n8n": "ok",
            "temporal": "ok",
            "worker": "ok",
        }, health
        _a_meeting_from_the_chat_page(login, api_port, lines["sandbox mailbox"])
        again = _cli(home, extra, "up", "--detach", "--port", str(api_port))
        assert again.returncode == 0 and "already running" in again.stderr
        assert re.search(r"^started\s{2,}nothing$", again.stdout, flags=re.M), again.stdout
        assert re.search(r"^already up\s{2,}.*\bapi\b", again.stdout, flags=re.M), again.stdout
    finally:
        down = _cli(home, extra, "down")
    assert down.returncode == 0, down.stderr
    for service in ("api", "worker", "sandbox", "n8n", "temporal", "postgres"):
        assert f"{service}: stopped" in down.stdout, down.stdout
    assert not port_open(api_port) and not port_open(temporal_port)
    assert not (home / "pg" / "postmaster.pid").exists()
