"""Follow-up answers (issue 24, class 6): a bare answer to the question asked is taken, a "which
did you mean" is answered by naming one, and what the first message said is kept."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from countersign.intake import Intake, Understanding
from countersign.kernel import source_registry_dir
from countersign.registry import load_registry

NOW = datetime(2037, 11, 23, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def intake() -> Intake:
    return Intake(load_registry(source_registry_dir()))


def _talk(intake: Intake, *messages: str) -> Understanding:
    """A conversation as the Api holds it: messages read together until an intent is settled,
    then each reply alone with what earlier turns settled."""
    said: list[str] = []
    intent: str | None = None
    known: dict[str, Any] = {}
    u: Understanding | None = None
    for text in messages:
        said.append(text)
        u = intake.understand(
            text if intent else "\n".join(said),
            received_at=NOW,
            tz="Europe/Berlin",
            intent=intent,
            known=known,
        )
        intent = u.intent or intent
        known = dict(u.entities)
    assert u is not None
    return u


@pytest.mark.parametrize(("answer", "count"), [("2", 2), ("two", 2), ("just one", 1)])
def test_a_bare_count_answers_how_many(intake: Intake, answer: str, count: int) -> None:
    u = _talk(intake, "buy phone cases, max 20 euros", answer)  # a bare plural: how many?
    assert u.entities["quantity"] == count and u.entities["max_price"] == "20.00", u
    assert u.entities["query"] == "phone cases" and u.ready


def test_a_bare_budget_answers_the_last_question(intake: Intake) -> None:
    u = _talk(intake, "buy 2 usb hubs", "30")
    assert u.entities["max_price"] == "30.00" and u.entities["quantity"] == 2 and u.ready, u


def test_a_budget_in_another_currency_is_asked_again_not_converted(intake: Intake) -> None:
    u = _talk(intake, "buy 2 usb hubs", "max 30 dollars")
    need = next(n for n in u.needs if n.entity == "max_price")
    assert need.heard == {"amount": "30", "currency": "USD"} and "max_price" not in u.entities
    u = _talk(intake, "buy 2 usb hubs", "max 30 dollars", "25 euros")
    assert u.entities["max_price"] == "25.00" and u.ready, u


def test_the_thing_to_buy_answers_what_to_look_for(intake: Intake) -> None:
    u = _talk(intake, "buy something, max 20 euros", "a usb hub")
    assert u.entities["query"] == "usb hub" and u.entities["max_price"] == "20.00", u


def test_a_bare_city_answers_which_consulate(intake: Intake) -> None:
    u = _talk(intake, "watch for a visa slot in march", "Chicago")
    assert u.entities["consulate"] == "chicago" and "date_from" in u.entities, u


def test_naming_an_offered_intent_answers_which_did_you_mean(intake: Intake) -> None:
    first = intake.understand("watch for a time", received_at=NOW)
    strict = Intake(intake.registry, threshold=0.6)
    asked = strict.understand("watch for a time", received_at=NOW)
    assert first.intent == "find_meeting_time" and asked.intent is None
    title = intake.registry.intents["watch_visa_slots"].title
    u = strict.understand("watch for a time\n" + title, received_at=NOW)
    assert u.intent == "watch_visa_slots", u
