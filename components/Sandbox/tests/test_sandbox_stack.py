"""The sandbox providers as ``countersign up`` starts them (background processes, logs in the
data folder): each answers over its real protocol, says it is a sandbox, a second start finds
the running set, and stop leaves nothing listening. Also ``countersign sandbox up|status|down``."""

from __future__ import annotations

import json
import smtplib
from datetime import date
from email.message import EmailMessage
from pathlib import Path

import httpx
import icalendar
import pytest
from typer.testing import CliRunner

from countersign.kernel.process import port_open
from countersign.sandbox import (
    DEMO_PEOPLE,
    SandboxPorts,
    demo_busy,
    sandbox_status,
    start_sandbox,
    stop_sandbox,
)
from countersign.sandbox.cli import app

MONDAY = date(2026, 11, 23)

pytestmark = pytest.mark.slow  # real servers in background processes


def test_start_sandbox_answers_says_sandbox_and_stops(tmp_path: Path) -> None:
    handle = start_sandbox(tmp_path, ports=SandboxPorts.any_free(), first_day=MONDAY)
    ports = [handle.ports.caldav, handle.ports.smtp, handle.ports.mailbox, handle.ports.shop]
    ports.append(handle.ports.visa)
    try:
        assert start_sandbox(tmp_path) == handle  # a second start finds the running set
        s = handle.connector_settings()
        assert s == {
            "caldav_base_url": handle.caldav_url,
            "smtp_host": "127.0.0.1",
            "smtp_port": str(handle.ports.smtp),
            "smtp_from": "countersign@example.com",
            "shop_base_url": handle.shop_url,
            "visa_base_url": handle.visa_url,
            "mailbox_url": handle.mailbox_url,
        }
        status = sandbox_status(tmp_path)
        assert status["running"] and status["connector_settings"] == s
        # SMTP -> the mailbox page
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = s["smtp_from"], "bob@example.com", "Sync"
        msg.set_content("hello")
        with smtplib.SMTP(s["smtp_host"], int(s["smtp_port"]), timeout=10) as smtp:
            smtp.send_message(msg)
        box = httpx.get(handle.mailbox_url + "/messages", timeout=10).json()
        assert box["sandbox"] is True and box["messages"][0]["subject"] == "Sync"
        page = httpx.get(handle.mailbox_url, timeout=10).text
        assert "Countersign sandbox — not a real mail server" in page and "Sync" in page
        assert list((tmp_path / "sandbox" / "mail").glob("*.eml"))  # kept on disk
        # shop: the price changed over HTTP is the one searched
        shop = httpx.Client(base_url=s["shop_base_url"], timeout=10)
        shop.put("/_sandbox/prices/cable-a", json={"price": "14.00"})
        offers = shop.get("/search", params={"q": "cable"}).json()
        assert offers["sandbox"] is True and offers["offers"][0]["price"] == "14.00"
        assert "not a real shop" in shop.get("/").text
        # visa: a slot appears at the third search, inside the window asked for
        url = s["visa_base_url"] + "/consulates/berlin/slots"
        window = {"from": "2026-12-01", "to": "2026-12-31"}
        found = [httpx.get(url, params=window, timeout=10).json()["slots"] for _ in range(3)]
        assert found[:2] == [[], []] and found[2][0]["at"] == "2026-12-01T09:00:00Z"
        # CalDAV: each demo person's busy time, as demo_busy says
        blocks = demo_busy(MONDAY)
        for person in DEMO_PEOPLE:
            text = httpx.get(f"{s['caldav_base_url']}/{person}/calendar/", timeout=10).text
            got = {
                (ev.decoded("DTSTART"), ev.decoded("DTEND"))
                for ev in icalendar.Calendar.from_ical(text).walk("VEVENT")
            }
            assert got == {(b.start, b.end) for b in blocks if b.person == person}, person
    finally:
        stopped = stop_sandbox(tmp_path)
    assert stopped == ["caldav", "mail", "shop", "visa"]
    assert not sandbox_status(tmp_path)["running"]
    assert [p for p in ports if port_open(p)] == []
    for name in ("caldav", "mail", "shop", "visa"):
        assert (tmp_path / "sandbox" / f"{name}.log").exists(), name
    assert "GET /search" in (tmp_path / "sandbox" / "shop.log").read_text()
    assert stop_sandbox(tmp_path) == []  # nothing left to stop


def test_sandbox_cli_up_status_down(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"COUNTERSIGN_HOME": str(tmp_path)}
    up = runner.invoke(app, ["up", "--free-ports"], env=env)
    try:
        assert up.exit_code == 0, up.output
        shown = json.loads(up.output)
        assert set(shown["urls"]) == {"caldav", "smtp", "mailbox", "shop", "visa"}
        assert httpx.get(shown["urls"]["visa"] + "/healthz", timeout=10).json()["ok"] is True
        status = runner.invoke(app, ["status"], env=env)
        assert status.exit_code == 0 and json.loads(status.output)["running"] is True
    finally:
        down = runner.invoke(app, ["down"], env=env)
    assert down.exit_code == 0 and down.output.strip() == "stopped: caldav, mail, shop, visa"
    after = runner.invoke(app, ["status"], env=env)
    assert after.exit_code == 1 and json.loads(after.output)["running"] is False
    assert runner.invoke(app, ["down"], env=env).output.strip() == "not running"
