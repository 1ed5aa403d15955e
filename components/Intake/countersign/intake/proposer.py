"""The seam for a model that proposes the Intent (``llm.LitellmProposer`` is one; Intake SPEC).

A proposer sees the message, the registry's catalogue (intent names, titles, entity names, types
and questions — never a secret, token, key or another user's data), what the conversation has
settled, ``received_at`` and the caller's zone. What it answers reaches the Understanding only
through ``check_proposal``: the intent must be in the registry, every entity declared by it, every
value of its declared type (n8n expression syntax and other markup in text is refused, not
escaped). Intake asks it at most twice (one retry after an invalid answer), then answers on the
deterministic path, which stays the default and the fallback.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from countersign.kernel import format_utc
from countersign.registry import Registry

__all__ = ["IntentProposer", "Proposal", "ProposalError", "catalogue", "check_proposal"]

_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
#: text a workflow engine or a template could read as code: refused in proposed values
_MARKUP = re.compile(r"\{\{|\}\}|\$\{|^\s*=|<script|\$json|\$env", re.I)


@dataclass(frozen=True)
class Proposal:
    """What a model proposes: an intent (None: nothing fits), entities, its confidence 0…1."""

    intent: str | None
    entities: Mapping[str, Any] = field(default_factory=dict)
    confidence: float = 0.0


class ProposalError(ValueError):
    """A proposal that does not hold against the registry (the message names what)."""


class IntentProposer(Protocol):
    """Anything that proposes an Intent for a message (a model client, a test script)."""

    def propose(
        self,
        text: str,
        *,
        catalogue: Sequence[Mapping[str, Any]],
        known: Mapping[str, Any],
        received_at: datetime,
        tz: str,
    ) -> Proposal: ...


def catalogue(registry: Registry) -> list[dict[str, Any]]:
    """What a proposer may know of the registry: per intent its name, title, description and
    entities (name, type, required, question) — nothing else."""
    out = []
    for name in sorted(registry.intents):
        spec = registry.intents[name]
        out.append(
            {
                "intent": name,
                "title": spec.title,
                "description": spec.description,
                "entities": [
                    {"name": e.name, "type": e.type, "required": req, "question": e.question}
                    for req, group in ((True, spec.required), (False, spec.optional))
                    for e in group
                ],
            }
        )
    return out


def _integer(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 10**7:
        raise ProposalError(f"entity {name!r}: expected a positive whole number, got {value!r}")
    return value


def _email(name: str, value: Any) -> Any:
    if not isinstance(value, str) or not _EMAIL.match(value):
        raise ProposalError(f"entity {name!r}: expected an e-mail address, got {value!r}")
    return value


def _number(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ProposalError(f"entity {name!r}: expected a number, got {value!r}")
    return value


def _boolean(name: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ProposalError(f"entity {name!r}: expected true or false, got {value!r}")
    return value


def _datetime(name: str, value: Any) -> Any:
    """An ISO 8601 date-time with a zone, typed as the extractors type it (``format_utc``)."""
    if not isinstance(value, str):
        raise ProposalError(f"entity {name!r}: expected an ISO 8601 date-time, got {value!r}")
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise ProposalError(f"entity {name!r}: {value!r} is not an ISO 8601 date-time") from e
    if at.tzinfo is None:
        raise ProposalError(f"entity {name!r}: {value!r} has no time zone")
    return format_utc(at)


def _list(name: str, value: Any) -> Any:
    """A non-empty list of at most 50 items: e-mail addresses for participants, else text."""
    if not isinstance(value, list) or not value or len(value) > 50:
        raise ProposalError(f"entity {name!r}: expected a non-empty list, got {value!r}")
    item = _email if name == "participants" else _text
    return [item(name, v) for v in value]


def _text(name: str, value: Any) -> Any:
    """Text of 1 to 500 characters, stripped; template or expression syntax is refused."""
    if not isinstance(value, str) or not 0 < len(value.strip()) <= 500:
        raise ProposalError(f"entity {name!r}: expected text of 1 to 500 characters")
    if _MARKUP.search(value):
        raise ProposalError(f"entity {name!r}: text with template or expression syntax is refused")
    return value.strip()


#: the check of each declared type; any other type is text
_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "integer": _integer,
    "email": _email,
    "number": _number,
    "boolean": _boolean,
    "datetime": _datetime,
    "list": _list,
}


def _value(name: str, kind: str, value: Any) -> Any:
    """``value`` typed as the extractors would type an entity of type ``kind``."""
    return _CHECKS.get(kind, _text)(name, value)


def check_proposal(proposal: Any, registry: Registry) -> tuple[str | None, dict[str, Any], float]:
    """The proposal as (intent, typed entities, confidence), or ``ProposalError`` naming what
    does not hold: an unknown intent, an entity the intent does not declare, a value of the
    wrong type, a confidence outside 0…1."""
    if not isinstance(proposal, Proposal):
        raise ProposalError(f"a proposer must return a Proposal, not {type(proposal).__name__}")
    conf = proposal.confidence
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.0 <= conf <= 1.0:
        raise ProposalError(f"confidence must be a number from 0 to 1, got {conf!r}")
    if proposal.intent is None:
        return None, {}, float(conf)
    spec = registry.intents.get(proposal.intent)
    if spec is None:
        raise ProposalError(f"intent {proposal.intent!r} is not in the registry")
    declared = {e.name: e.type for e in (*spec.required, *spec.optional)}
    if not isinstance(proposal.entities, Mapping):
        raise ProposalError("entities must be an object")
    entities: dict[str, Any] = {}
    for name, value in proposal.entities.items():
        if name not in declared:
            raise ProposalError(f"intent {proposal.intent!r} has no entity {name!r}")
        entities[name] = _value(name, declared[name], value)
    return proposal.intent, entities, float(conf)
