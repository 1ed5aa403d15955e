"""The README's codec-server steps, done in Chromium on the Temporal UI the dev server serves
(UI 2.54): a watcher's input is ciphertext until the person, signed in to the API in the same
browser, opens the UI's Codec Server settings, chooses "Use my browser setting and ignore
Cluster-level setting.", pastes the API's ``/codec`` endpoint again and turns on "Include
cross-origin credentials"; then the history shows the input decoded. Another person signed in the
same way still sees ciphertext. Screenshots: ``artifacts/screenshots/temporal-codec-*.png``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from countersign.api import UserStore
from countersign.api.testing import ALICE, BOB, ApiHarness, chromium, harness, sign_in
from countersign.durable import EncryptionCodec, connect, payload_codec, start_watcher
from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.durable.worker import watch_input_for
from countersign.kernel import Intent, Policy
from countersign.kernel.process import free_port
from countersign.n8n import N8nHandle
from countersign.planner.testing import signed_plan
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

pytestmark = pytest.mark.slow

SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
#: what the Input pane shows while a payload is still sealed: the ciphertext, base64 (alone, or
#: with its metadata when the endpoint could not be reached)
SEALED = re.compile(r'"[A-Za-z0-9+/=]{200,}"')


def sealed(pane: str) -> bool:
    """The pane shows the watcher's input as ciphertext, nothing of it in clear."""
    return bool(SEALED.search(pane)) and '"watch_visa_slots"' not in pane and "lisbon" not in pane


def decoded(pane: str) -> bool:
    """The pane shows the watcher's input as JSON in clear."""
    return not SEALED.search(pane) and '"watch_visa_slots"' in pane and "lisbon" in pane


@dataclass
class UiStack:
    """The served API (codec endpoint for the UI's origin), the dev server and its UI."""

    api: ApiHarness
    ui: str
    address: str
    codec: EncryptionCodec


@pytest.fixture
def ui_stack(
    tmp_path: Path,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
) -> Iterator[UiStack]:
    """As ``countersign up`` wires them: the dev server's UI names the API's ``/codec`` as its
    cluster-level codec endpoint, and the API answers CORS for the UI's origin only. No n8n: the
    codec endpoint and the login link need none (the handle below is never reached)."""
    codec = payload_codec(tmp_path / "keys")
    port, ui_port = free_port(), free_port()
    ui = f"http://127.0.0.1:{ui_port}"
    unused = N8nHandle(base_url="http://127.0.0.1:9", api_key="-", data_dir=tmp_path, pid=0)
    smtp = CredentialRef(id="unused", name="unused")
    with harness(
        unused,
        db,
        registry,
        keyring,
        radicale,
        smtp_server,
        smtp,
        payload_codec=codec,
        codec_origin=ui,
    ) as api:
        folder = tmp_path / "temporal"
        temporal_start(folder, port=port, ui_port=ui_port, ui_codec_endpoint=f"{api.base}/codec")
        try:
            yield UiStack(api, ui, f"127.0.0.1:{port}", codec)
        finally:
            temporal_stop(folder)


def _start_watcher(stack: UiStack, registry: Registry, keyring: KeyRing) -> str:
    """Alice's visa watcher started as the API starts it (sealed with the shared key); no worker
    is needed for its history to hold its input. Its workflow id."""
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    intent = Intent.model_validate(
        {
            "intent": "watch_visa_slots",
            "intent_id": "01JDQ3Z0000000000000C0DEC1",
            "received_at": datetime.now(UTC).strftime(fmt),
            "user_id": ALICE,
            "entities": {
                "consulate": "lisbon",
                "date_from": start.strftime(fmt),
                "date_to": (start + timedelta(days=30)).strftime(fmt),
                "notify_to": ALICE,
            },
        }
    )
    doc = signed_plan(intent, keyring, registry, LOCAL)
    inp = watch_input_for(doc, ALICE, registry=registry)

    async def go() -> str:
        client = await connect(stack.address, codec=stack.codec)
        return str((await start_watcher(client, inp)).id)

    return asyncio.run(go())


def _signed_in(browser: Browser, stack: UiStack, user: str) -> Page:
    """A browser page signed in to the API as ``user`` by a login link (the session cookie)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    link = UserStore(stack.api.db, clock=lambda: datetime.now(UTC)).login_link(user)
    sign_in(page, f"{stack.api.base}/login?token={link}")
    page.wait_for_selector("#text")
    return page


def _input_pane(page: Page, stack: UiStack, workflow_id: str) -> str:
    """The watcher's page in the UI; the text of its Input pane once the UI has shown it."""
    page.goto(f"{stack.ui}/namespaces/default/workflows/{workflow_id}")
    pane = page.get_by_test_id("input-and-result")
    pane.wait_for()
    page.wait_for_function(
        '() => /encryption-key-id|watch_visa_slots|"[A-Za-z0-9+\\/=]{200,}"/.test('
        "document.querySelector('[data-testid=input-and-result]')?.innerText || '')",
        timeout=30_000,
    )
    return pane.inner_text()


def _configure_codec(page: Page, endpoint: str) -> None:
    """The README's steps in the UI's Codec Server dialog (the icon in the top bar)."""
    page.get_by_role("button", name=re.compile("Codec Server")).click()
    page.get_by_text("Use my browser setting and ignore Cluster-level setting.").wait_for()
    page.get_by_text("Use my browser setting and ignore Cluster-level setting.").click()
    assert page.get_by_label(
        "Use my browser setting and ignore Cluster-level setting."
    ).is_checked()
    page.get_by_placeholder("Paste your endpoint here").fill(endpoint)
    page.get_by_text("Include cross-origin credentials").click()
    assert page.get_by_role("switch", name="Include cross-origin credentials").is_checked()
    assert not page.get_by_role("switch", name="Pass the user access token").is_checked()
    SHOTS.mkdir(parents=True, exist_ok=True)
    dialog = page.locator("dialog[open]").filter(has_text="Include cross-origin credentials")
    dialog.screenshot(path=str(SHOTS / "temporal-codec-settings.png"))
    page.get_by_role("button", name="Apply").click()


def _local_setting(page: Page) -> dict[str, Any]:
    """What the UI keeps in the browser for the codec (its localStorage entries)."""
    stored: dict[str, Any] = page.evaluate(
        "() => Object.fromEntries(Object.keys(localStorage)"
        ".filter(k => /codec|endpoint|credentials|override/i.test(k))"
        ".map(k => [k, localStorage.getItem(k)]))"
    )
    return stored


def test_the_readme_codec_steps_show_a_person_their_own_watcher_in_clear(
    ui_stack: UiStack, registry: Registry, keyring: KeyRing
) -> None:
    workflow_id = _start_watcher(ui_stack, registry, keyring)
    endpoint = f"{ui_stack.api.base}/codec"
    with chromium() as browser:
        alice = _signed_in(browser, ui_stack, ALICE)
        # the cluster-level endpoint alone: the UI asks without the cookie, the input stays sealed
        before = _input_pane(alice, ui_stack, workflow_id)
        assert sealed(before), before
        SHOTS.mkdir(parents=True, exist_ok=True)
        alice.screenshot(path=str(SHOTS / "temporal-codec-sealed.png"), full_page=True)
        _configure_codec(alice, endpoint)
        stored = _local_setting(alice)
        assert endpoint in json.dumps(stored), stored
        after = _input_pane(alice, ui_stack, workflow_id)
        assert decoded(after), after
        alice.screenshot(path=str(SHOTS / "temporal-codec-decoded.png"), full_page=True)
        alice.close()
        # Bob does the same steps in his browser: Alice's watcher stays sealed for him
        bob = _signed_in(browser, ui_stack, BOB)  # a page of its own: its own cookies
        bob.goto(ui_stack.ui)
        _configure_codec(bob, endpoint)
        theirs = _input_pane(bob, ui_stack, workflow_id)
        assert sealed(theirs), theirs
