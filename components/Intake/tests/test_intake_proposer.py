"""The LLM proposer seam: whatever a model answers reaches the Understanding only as a checked
proposal; an invalid answer is asked again once, then the deterministic path answers; low
confidence asks; hostile answers (another intent, another user, expression syntax, undeclared
entities) never become entities."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from countersign.intake import Contact, Intake, IntentProposer, Proposal
from countersign.kernel import InputError
from countersign.registry import Registry

NOW = datetime(2026, 11, 24, 10, 15, tzinfo=UTC)
CONTACTS = [Contact("Alice Martin", "alice@example.com"), Contact("Bob Chen", "bob@example.com")]
GOOD = Proposal(
    "schedule_meeting",
    {
        "participants": ["alice@example.com", "bob@example.com"],
        "duration_min": 30,
        "title": "Sync",
        "window_start": "2026-11-25T13:00:00Z",
        "window_end": "2026-11-25T18:00:00+00:00",
    },
    0.9,
)


class Scripted:
    """A model that answers from a script (one answer per call; an exception is raised)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def propose(
        self,
        text: str,
        *,
        catalogue: Sequence[Mapping[str, Any]],
        known: Mapping[str, Any],
        received_at: datetime,
        tz: str,
    ) -> Proposal:
        self.calls.append({"text": text, "catalogue": catalogue, "known": known, "tz": tz})
        answer: Any = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return cast(Proposal, answer)


@pytest.fixture(scope="module")
def intake(registry: Registry) -> Intake:
    return Intake(registry)


def _read(intake: Intake, model: IntentProposer, text: str = "meet alice and bob") -> Any:
    return intake.understand(text, received_at=NOW, contacts=CONTACTS, proposer=model)


def test_a_valid_proposal_decides_and_is_explained(intake: Intake) -> None:
    model = Scripted(GOOD)
    u = _read(intake, model, "let's get the usual crowd together tomorrow afternoon")
    assert u.source == "model" and u.ready and u.intent == "schedule_meeting"
    assert u.entities["window_end"] == "2026-11-25T18:00:00.000Z"  # typed like Intake's own
    assert {e.words for e in u.explained} == {"proposed by the model"}
    assert len(model.calls) == 1
    # the model sees the registry's catalogue and nothing else of the service
    seen = repr(model.calls[0]["catalogue"]).lower()
    assert "schedule_meeting" in seen
    assert not any(word in seen for word in ("token", "signature", "key", "secret", "n8n"))


def test_invalid_then_valid_is_asked_twice(intake: Intake) -> None:
    model = Scripted(Proposal("schedule_meeting", {"duration_min": "thirty"}, 0.9), GOOD)
    u = _read(intake, model)
    assert u.source == "model" and u.entities["duration_min"] == 30 and len(model.calls) == 2


@pytest.mark.parametrize(
    ("answers", "why"),
    [
        ((Proposal("transfer_money", {"amount": 10**6}, 0.99),) * 2, "not in the registry"),
        (
            (Proposal("schedule_meeting", {"user_id": "mallory@example.com"}, 0.99),) * 2,
            "no entity",
        ),
        (
            (Proposal("schedule_meeting", {"title": "{{ $env.N8N_API_KEY }}"}, 0.99),) * 2,
            "expression syntax",
        ),
        ((Proposal("schedule_meeting", {"title": "=$json.secret"}, 0.99),) * 2, "expression"),
        ((Proposal("schedule_meeting", {"participants": "everyone"}, 0.9),) * 2, "list"),
        ((Proposal("schedule_meeting", {"window_start": "tomorrow"}, 0.9),) * 2, "ISO 8601"),
        ((Proposal("schedule_meeting", {}, 7.0),) * 2, "confidence"),
        (({"intent": "schedule_meeting"},) * 2, "must return a Proposal"),
        ((TimeoutError("model timed out"), TimeoutError("again")), "TimeoutError"),
        ((ValueError("truncated JSON"), ValueError("truncated JSON")), "ValueError"),
    ],
)
def test_hostile_or_broken_answers_end_on_the_deterministic_path(
    intake: Intake, answers: tuple[Any, ...], why: str
) -> None:
    model = Scripted(*answers)
    u = _read(intake, model, "schedule a meeting with alice and bob tomorrow afternoon")
    assert len(model.calls) == 2  # one retry, then the deterministic path
    assert u.source.startswith("deterministic") and why in u.source, u.source
    assert u.intent == "schedule_meeting"  # what the person said, read without the model
    assert "user_id" not in u.entities and "amount" not in u.entities
    assert all("{{" not in str(v) and "$json" not in str(v) for v in u.entities.values())


def test_low_confidence_asks_instead_of_guessing(intake: Intake) -> None:
    u = _read(intake, Scripted(Proposal("purchase_item", {"query": "cable"}, 0.2)))
    assert u.intent is None and u.source == "model"
    assert [n.entity for n in u.needs] == ["intent"] and u.needs[0].options == ["purchase_item"]


def test_the_model_cannot_change_a_settled_intent(intake: Intake) -> None:
    u = intake.understand(
        "30 minutes, called Sync",
        received_at=NOW,
        contacts=CONTACTS,
        intent="schedule_meeting",
        known={"participants": ["alice@example.com"]},
        proposer=Scripted(Proposal("purchase_item", {"query": "gold", "quantity": 99}, 0.99)),
    )
    assert u.intent == "schedule_meeting" and "query" not in u.entities
    assert u.entities["duration_min"] == 30


# ---- the Policy's threshold (Policy.intake_threshold, passed in by the API) ---------------------
#: find_meeting_time, its family (the meeting intents) about 0.51 of the ranking; watching a visa
#: slot the rest (a close call between sibling intents is no doubt: Intake._confidence)
BORDERLINE = "watch for a time"


def test_a_higher_threshold_asks_where_the_default_plans(registry: Registry) -> None:
    """The same borderline sentence: understood at the default 0.5, asked about at 0.6 —
    on the deterministic path and on the model's."""
    default, strict = Intake(registry), Intake(registry, threshold=0.6)
    read = default.understand(BORDERLINE, received_at=NOW, contacts=CONTACTS)
    assert read.intent == "find_meeting_time" and 0.5 <= read.confidence < 0.6, read
    asked = strict.understand(BORDERLINE, received_at=NOW, contacts=CONTACTS)
    assert asked.intent is None and [n.entity for n in asked.needs] == ["intent"]
    assert {"find_meeting_time", "watch_visa_slots"} <= set(asked.needs[0].options)
    proposal = Proposal("find_meeting_time", {"participants": ["alice@example.com"]}, 0.55)
    by_model = _read(default, Scripted(proposal), BORDERLINE)
    assert by_model.intent == "find_meeting_time" and by_model.source == "model"
    doubted = _read(strict, Scripted(proposal), BORDERLINE)
    assert doubted.intent is None and doubted.source == "model"
    assert [n.entity for n in doubted.needs] == ["intent"]
    assert doubted.needs[0].options == ["find_meeting_time"] and not doubted.entities


@pytest.mark.parametrize("threshold", [-0.01, 1.01, float("nan")])
def test_a_threshold_outside_0_to_1_is_refused(registry: Registry, threshold: float) -> None:
    with pytest.raises(InputError, match=r"threshold must be within 0\.\.1"):
        Intake(registry, threshold=threshold)
