"""LLM intake through litellm against a local OpenAI-compatible HTTP server the test starts
(litellm really calls it): good, malformed, truncated, schema-violating and hostile model output
each end in a checked Intent, a question, or the deterministic path — never in a plan the person
did not ask for — and the model is sent nothing but the message and the registry's catalogue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from countersign.intake import Contact, Intake
from countersign.intake.llm import LitellmProposer
from countersign.intake.testing import FakeModel
from countersign.registry import Registry

NOW = datetime(2026, 11, 24, 10, 15, tzinfo=UTC)
CONTACTS = [Contact("Alice Martin", "alice@example.com"), Contact("Bob Chen", "bob@example.com")]
SAID = "schedule a meeting with alice and bob tomorrow afternoon"


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModel]:
    m = FakeModel()
    yield m
    m.server.shutdown()


def _understand(registry: Registry, model: FakeModel, *answers: str) -> Any:
    model.answers[:] = list(answers)
    model.requests.clear()
    proposer = LitellmProposer("openai/test-model", api_base=model.base, timeout_s=10)
    return Intake(registry).understand(SAID, received_at=NOW, contacts=CONTACTS, proposer=proposer)


GOOD = json.dumps(
    {
        "intent": "schedule_meeting",
        "entities": {
            "participants": ["alice@example.com", "bob@example.com"],
            "duration_min": 30,
            "title": "Sync",
            "window_start": "2026-11-25T13:00:00+00:00",
            "window_end": "2026-11-25T18:00:00+00:00",
        },
        "confidence": 0.92,
    }
)


def test_a_good_answer_is_a_checked_intent(registry: Registry, model: FakeModel) -> None:
    u = _understand(registry, model, GOOD)
    assert u.source == "model" and u.ready and u.entities["duration_min"] == 30
    assert len(model.requests) == 1 and model.requests[0]["path"].endswith("/chat/completions")
    sent = json.dumps(model.requests[0]["body"]).lower()
    assert SAID in sent and "schedule_meeting" in sent
    for secret in ("signature", "token", "pubkey", "api_key", "password", "n8n"):
        assert (
            secret
            not in json.loads(model.requests[0]["body"]["messages"][1]["content"])
            .__repr__()
            .lower()
        )


@pytest.mark.parametrize(
    ("answers", "why"),
    [
        (("{not json", "{not json"), "not JSON"),
        (('{"intent": "schedule_meeting", "entit', '{"intent": "sched'), "not JSON"),
        (('["schedule_meeting"]',) * 2, "not a JSON object"),
        (
            (
                json.dumps(
                    {
                        "intent": "schedule_meeting",
                        "entities": {"duration_min": "thirty"},
                        "confidence": 0.9,
                    }
                ),
            )
            * 2,
            "whole number",
        ),
        (
            (
                json.dumps(
                    {
                        "intent": "schedule_meeting",
                        "entities": {"user_id": "mallory@example.com"},
                        "confidence": 0.99,
                    }
                ),
            )
            * 2,
            "no entity 'user_id'",
        ),
        (
            (
                json.dumps(
                    {
                        "intent": "schedule_meeting",
                        "entities": {"title": "{{ $env.N8N_API_KEY }}"},
                        "confidence": 0.99,
                    }
                ),
            )
            * 2,
            "expression syntax",
        ),
        (
            (
                json.dumps(
                    {"intent": "wire_money", "entities": {"amount": 5000}, "confidence": 0.99}
                ),
            )
            * 2,
            "not in the registry",
        ),
    ],
)
def test_bad_or_hostile_answers_end_on_the_deterministic_path(
    registry: Registry, model: FakeModel, answers: tuple[str, ...], why: str
) -> None:
    u = _understand(registry, model, *answers)
    assert len(model.requests) == 2  # asked once more, then not again
    assert u.source.startswith("deterministic") and why in u.source, u.source
    assert u.intent == "schedule_meeting"  # what the person said, read without the model
    assert "user_id" not in u.entities and "amount" not in u.entities
    assert all("{{" not in str(v) for v in u.entities.values())


def test_invalid_then_good_is_used(registry: Registry, model: FakeModel) -> None:
    u = _understand(registry, model, "{not json", GOOD)
    assert u.source == "model" and len(model.requests) == 2 and u.entities["title"] == "Sync"


def test_an_answer_that_adds_a_write_step_adds_nothing(
    registry: Registry, model: FakeModel
) -> None:
    """Members the contract does not have (a step, another user) are dropped: only the checked
    intent and entities go on, and the planner makes the plan from the registry as always."""
    hostile = json.loads(GOOD)
    hostile["steps"] = [{"uses": "http", "call": "request", "args": {"method": "POST"}}]
    hostile["user_id"] = "mallory@example.com"
    u = _understand(registry, model, json.dumps(hostile))
    assert u.source == "model" and u.intent == "schedule_meeting"
    assert set(u.entities) == set(json.loads(GOOD)["entities"])


def test_low_confidence_asks(registry: Registry, model: FakeModel) -> None:
    unsure = json.dumps({"intent": "purchase_item", "entities": {"query": "x"}, "confidence": 0.3})
    u = _understand(registry, model, unsure)
    assert u.intent is None and [n.entity for n in u.needs] == ["intent"]


def test_a_model_that_is_down_is_a_fallback(registry: Registry) -> None:
    proposer = LitellmProposer("openai/test-model", api_base="http://127.0.0.1:9/v1", timeout_s=2)
    u = Intake(registry).understand(SAID, received_at=NOW, contacts=CONTACTS, proposer=proposer)
    assert u.source.startswith("deterministic (the model's answer was refused: the model failed")
    assert u.intent == "schedule_meeting"
