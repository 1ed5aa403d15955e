"""A chat message that changes the conversation's last plan ("change it to april", "instead …",
"make it 45 minutes"): whether a message is one, and what it asks to change (Intake LLD,
"Revisions"). Pure; the Api's chat service plans the revision."""

from __future__ import annotations

import re

__all__ = ["change_request"]

_CHANGE = re.compile(r"^\s*(?:please\s+)?(?:change|instead|make\s+it|move\s+it|switch)\b", re.I)
_CHANGE_LEAD = re.compile(
    r"^\s*(?:please\s+)?(?:change|instead|make|move|switch)\b(?:\s+(?:it|the\s+\w+))?"
    r"(?:\s+(?:to|into))?",
    re.I,
)


def change_request(text: str) -> str | None:
    """What a change message asks for, without its lead ("change it to april" → "april");
    None when the message is not a change of the last plan."""
    if not _CHANGE.match(text):
        return None
    return _CHANGE_LEAD.sub("", text).strip()
