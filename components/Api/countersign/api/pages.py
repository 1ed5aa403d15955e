"""The HTML pages (Api SPEC, the chat page): plain HTML that loads the chat page's scripts or
``static/memory.js`` for a signed-in person; no external asset, no build step."""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import Response

__all__ = ["CHAT", "MEMORY", "STATIC", "page"]

STATIC = Path(__file__).parent / "static"
#: the chat page's scripts, in the order they load (deferred: all run before DOMContentLoaded;
#: chat.js, last, starts the page)
CHAT_SCRIPTS = ("dag.js", "reads.js", "card.js", "gates.js", "evidence.js", "settle.js", "chat.js")
MEMORY_SCRIPTS = ("memory.js",)

CHAT = """
<section aria-label="conversation"><div id="log" aria-live="polite"></div>
<form id="say" autocomplete="off"><label for="text" class="meta">Message</label>
<input id="text" name="text" placeholder="find 30 minutes with Alice and Bob next week" required>
<button type="submit">Send</button></form></section>
<section aria-label="your plans"><h2>Your plans</h2><ul id="plans"></ul></section>
<p class="meta"><a href="/memory">Preferences and consent</a></p>
"""

MEMORY = """
<section aria-label="preferences" id="memory"><h2>Preferences</h2>
<p class="meta">What the planner may use when you ask for something. Values are JSON
(<code>30</code>, <code>"https://meet.example/me"</code>, <code>{"start": "09:00", "end": "17:00"}</code>).</p>
<table id="prefs"><thead><tr><th>preference</th><th>value</th><th></th></tr></thead><tbody></tbody></table>
<form id="pref-add" autocomplete="off"><label>name <input id="pref-key" required
pattern="[a-z][a-z0-9_.]{0,127}" placeholder="default_meeting_length"></label>
<label>value <input id="pref-value" required placeholder="30"></label>
<button type="submit">Save preference</button></form>
<h2>Consent</h2>
<p class="meta">Private content (T5) is used only for a purpose you have granted.</p>
<ul id="consent"></ul>
<form id="consent-add" autocomplete="off"><label>purpose <input id="consent-purpose" required
pattern="[a-z][a-z0-9_.\\-]{0,63}" placeholder="mail_insights"></label>
<button type="submit">Grant</button></form>
<h2>Your data</h2>
<p><a href="/v1/memory/export" download="countersign-export.json">Export everything (JSON)</a></p>
<form id="forget-subject" autocomplete="off"><label>forget a subject <input id="subject"
minlength="3" required placeholder="carol"></label><button type="submit">Forget it</button></form>
<p id="memory-status" class="meta" aria-live="polite"></p>
<p class="meta"><a href="/">Back to the chat</a></p></section>
"""


def page(
    body: str,
    *,
    who: str | None = None,
    plan_id: str | None = None,
    status: int = 200,
    temporal_ui: str | None = None,
    memory: bool = False,
) -> Response:
    """One page around ``body``: who is signed in, the plan it shows, the Temporal UI link."""
    user = f"<span class='meta'>signed in as {html.escape(who)}</span>" if who else ""
    data = f" data-plan='{html.escape(plan_id)}'" if plan_id else ""
    if temporal_ui and who:
        data += f" data-temporal-ui='{html.escape(temporal_ui)}'"
    names = MEMORY_SCRIPTS if memory else CHAT_SCRIPTS
    script = "".join(f"<script src='/static/{n}' defer></script>" for n in names) if who else ""
    text = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>Countersign</title><link rel='stylesheet' href='/static/chat.css'>"
        f"{script}</head><body{data}><header><h1>Countersign</h1>{user}</header>"
        f"<main>{body}</main></body></html>"
    )
    return Response(text, status_code=status, media_type="text/html; charset=utf-8")
