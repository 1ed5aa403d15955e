"""Which chat messages change the last plan, and what they ask for."""

from __future__ import annotations

import pytest

from countersign.intake import change_request


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("change it to april", "april"),
        ("Please change the date to friday", "friday"),
        ("instead porto", "porto"),
        ("make it 45 minutes", "45 minutes"),
        ("move it to 11:00", "11:00"),
        ("switch to the Lisbon consulate", "the Lisbon consulate"),
    ],
)
def test_a_change_message_names_what_changes(text: str, rest: str) -> None:
    assert change_request(text) == rest


@pytest.mark.parametrize(
    "text",
    ["book a meeting with bob", "changes nothing", "I'd like to change nothing", "makeshift", ""],
)
def test_other_messages_are_not_changes(text: str) -> None:
    assert change_request(text) is None
