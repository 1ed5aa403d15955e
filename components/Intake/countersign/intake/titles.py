"""A meeting's title (Intake SPEC, "Titles"): in quotes; after "called", "titled", "named", "call
it", "title:", "subject:", "topic:", "re:"; what a meeting is "about" or "to talk about / go over /
review / work on"; or a kind of meeting more specific than a generic word ("for the design crit",
"a 2h strategy session", "schedule standup prep with ..."). Generic words (meeting, call, chat,
sync, catch-up, 1:1, coffee, lunch) give no title. Pure."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["title"]

_QUOTED = re.compile(r"(?:^|[\s(:])[\"“'‘]([^\"”'’]{2,80})[\"”'’](?=[\s,.;:)!?]|$)")
#: where a title after "called" / "about" ends: punctuation, or a word that starts another part
_END = (
    r"(?=[ \t]*(?:[.;?!—(\n]|,|\s-\s|$)|\s+(?:with|w/|on|at|next|tomorrow|tmrw|today|this|from|"
    r"between|before|after|in|for\s+(?:an?|one|two|half|[0-9]+)|and\s+(?:send|mail|invite))\b)"
)
_NAMED = re.compile(
    r"\b(?:called|titled|named|call\s+it|title:|subject:|topic:|re:|agenda:)\s*(.{2,80}?)" + _END,
    re.I,
)
_ABOUT = re.compile(
    r"\b(?:about|(?:to\s+)?(?:talk\s+about|discuss|go\s+over|review|work(?:ing)?\s+on|"
    r"look\s+at|plan))\s+(?:the\s+|our\s+|my\s+)?(.{2,60}?)" + _END,
    re.I,
)
_GENERIC = {
    "meeting", "call", "chat", "catch-up", "catchup", "sync", "1:1", "coffee", "lunch", "meet",
    "slot", "time", "hour", "hours", "window", "minutes", "mins", "room", "it", "that", "this",
    "one", "meeting?", "session", "something",
}  # fmt: skip
#: a kind of meeting: "for a/the <kind>", "<verb> a <kind> with", "schedule <kind> with"
_KIND = re.compile(
    r"\b(?:for|schedule|book|set\s+up|arrange|plan|find\s+\w+\s+for)\s+(?:an?\s+|the\s+)?"
    r"(?:[0-9.]+\s*(?:-\s*)?(?:h|hr|hrs|hours?|m|min|mins|minutes?)\s+|quick\s+|short\s+)?"
    r"([a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2}?)(?=\s+(?:with\b|w/|on\b|at\b|for\b|tomorrow\b|next\b)|\s*[,.;]|\s*$)",
    re.I,
)
_KIND_END = re.compile(
    r"\b(?:review|crit|panel|workshop|interview|prep|session|planning|retro|retrospective|"
    r"kickoff|kick-off|demo|brainstorm|onboarding|offsite|training|standup|stand-up|huddle|"
    r"check-in|debrief|presentation|pitch)$",
    re.I,
)


def title(text: str) -> Any:
    """The title and the words that gave it, or None."""
    if m := _QUOTED.search(text):
        return m.group(1).strip(), m.group(0).strip()
    if m := _NAMED.search(text):  # named outright: taken as said, even "Sync"
        return m.group(1).strip(" '\""), m.group(0).strip()
    m = _ABOUT.search(text)
    if m and _meaningful(m.group(1)):
        return m.group(1).strip(" '\""), m.group(0).strip()
    for m in _KIND.finditer(text):
        kind = m.group(1).strip()
        if _KIND_END.search(kind) and _meaningful(kind):
            return kind, m.group(0).strip()
    return None


def _meaningful(words: str) -> bool:
    """Not a generic word, a duration or a time ("an hour", "30 min", "it")."""
    low = words.lower().strip(" '\"")
    last = low.split()[-1] if low.split() else ""
    duration = re.match(r"^(?:an?|one|two|half|[0-9.]+)\b.*\b(?:hours?|hrs?|minutes?|mins?)\b", low)
    return (
        bool(low)
        and last not in _GENERIC
        and not duration
        and not re.match(r"^(?:an?\s+)?[0-9]", low)
    )
