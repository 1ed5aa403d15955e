"""What a chat reply shows of what was understood (``countersign.api.understood``, pure): each
entity as a person reads it, with the words it came from; each question naming what is missing
and why; the person's own contacts before the sandbox's demo people; the person asking."""

from __future__ import annotations

from countersign.api.services.chat import me_of, merged
from countersign.api.understood import asked, label_of, shown, understood
from countersign.intake import Contact

KINDS = {
    "participants": "list",
    "duration_min": "integer",
    "window_start": "datetime",
    "window_end": "datetime",
    "title": "string",
}
PEOPLE = [Contact("Alice", "alice@example.com"), Contact("Bob", "bob@example.com")]


def test_each_entity_reads_as_a_person_reads_it_with_its_words() -> None:
    items = understood(
        {
            "title": "Sync",
            "participants": ["alice@example.com", "bob@example.com", "zoe@example.org"],
            "duration_min": 75,
            "window_start": "2026-11-26T12:00:00Z",
        },
        {"duration_min": "an hour and a quarter", "participants": "Alice, Bob, zoe@example.org"},
        kinds=KINDS,
        tz="Europe/Berlin",
        people=PEOPLE,
    )
    by = {i["entity"]: i for i in items}
    # the intent's order, not the dictionary's
    assert [i["entity"] for i in items] == ["participants", "duration_min", "window_start", "title"]
    assert by["duration_min"]["line"] == "Duration: 1 h 15 min — from “an hour and a quarter”"
    assert by["duration_min"]["edit"] == 75 and by["duration_min"]["type"] == "integer"
    assert by["participants"]["shown"] == (
        "Alice <alice@example.com>, Bob <bob@example.com>, zoe@example.org"
    )
    # an instant in the person's zone, and the same local time in the edit field
    assert by["window_start"]["shown"] == "Thu 26 Nov 2026, 13:00 (Europe/Berlin)"
    assert by["window_start"]["edit"] == "2026-11-26T13:00"
    assert by["window_start"]["value"] == "2026-11-26T12:00:00Z"
    assert by["title"]["line"] == "Title: Sync"  # no words: none claimed


def test_amounts_spans_places_and_changes() -> None:
    budget = understood(
        {"max_price": "20"},
        {"max_price": "max 20 euros"},
        kinds={"max_price": "string"},
        tz="UTC",
        currencies={"max_price": "EUR"},
    )
    assert budget[0]["line"] == "Budget: 20.00 EUR — from “max 20 euros”"
    assert shown("max_price", "15", currency="EUR") == "15.00 EUR"
    assert shown("max_price", "15") == "15.00"  # no currency declared: none guessed
    assert shown("max_price", {"amount": "15", "currency": "USD"}) == "15.00 USD"
    assert shown("max_lifetime_s", 259200) == "3 days"
    assert shown("poll_interval_s", 600) == "10 min"
    assert shown("consulate", {"country": "Italy", "city": "Chicago"}) == "Italy, Chicago"
    assert shown("hold", True) == "yes"
    assert label_of("max_price") == "Budget" and label_of("some_thing_min") == "Some thing"
    changed = understood(
        {"duration_min": 60},
        {"duration_min": "45 min"},
        kinds=KINDS,
        tz="UTC",
        changed=["duration_min"],
    )
    assert changed[0]["line"] == "Duration: 1 h — changed by you"


def test_a_question_names_what_is_missing_and_why_and_what_was_heard() -> None:
    need = asked(
        {"entity": "duration_min", "question": "How long should the meeting be, in minutes?"},
        title="Schedule a meeting",
    )
    assert need["ask"] == (
        "To schedule a meeting I still need the meeting's length: "
        "how long should the meeting be, in minutes?"
    )
    heard = asked(
        {
            "entity": "max_price",
            "question": "The shop takes EUR: what is the most you want to spend?",
            "heard": {"amount": "15", "currency": "USD"},
        },
        title="Buy an item",
        currency="EUR",
    )
    assert heard["heard_shown"] == "15.00 USD" and heard["label"] == "Budget"
    which = asked({"entity": "intent", "question": "Which did you mean: A; B?"}, title=None)
    assert which["ask"] == "Which did you mean: A; B?"


def test_own_contacts_come_first_and_win_a_first_name() -> None:
    own = [Contact("Carol Own", "carol.own@corp.example"), Contact("Zoe", "zoe@corp.example")]
    demo = [Contact("Alice", "alice@example.com"), Contact("Carol", "carol@example.com")]
    assert merged(own, demo) == [*own, Contact("Alice", "alice@example.com")]
    assert merged([], demo) == demo and merged(own, []) == own


def test_the_person_asking() -> None:
    assert me_of("alice@example.com") == Contact("Alice", "alice@example.com")
    assert me_of("robin.asker@example.com") == Contact("Robin Asker", "robin.asker@example.com")
    own = [Contact("Robin A. Asker", "Robin.Asker@example.com")]
    assert me_of("robin.asker@example.com", own) == Contact(
        "Robin A. Asker", "robin.asker@example.com"
    )
    assert me_of("local") is None  # no address: no provider knows them
