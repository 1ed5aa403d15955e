"""A model behind the proposer seam, through ``litellm`` (any provider it supports: a local
Ollama or vLLM server, an OpenAI-compatible endpoint, a hosted model) — optional: configured
with ``COUNTERSIGN_LLM_MODEL`` (and ``COUNTERSIGN_LLM_API_BASE`` for a local server), installed
with the ``llm`` extra.

The model is asked for one JSON object ``{"intent", "entities", "confidence"}`` in answer to the
message, the registry's catalogue, what the conversation settled, ``received_at`` and the zone —
nothing else of the service (no plan, signature, token, key or credential). Its answer is parsed
here and checked by ``check_proposal`` in Intake; anything else it writes (extra keys, steps,
another user) is dropped or refused there, never planned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from countersign.kernel import DocumentError, loads_strict

from .proposer import Proposal, ProposalError

__all__ = ["LitellmProposer"]

SYSTEM = (
    "You turn one chat message into an intent for a planning service. Answer with one JSON "
    'object only: {"intent": <one of the catalogue\'s intent names, or null when none fits>, '
    '"entities": {<entity name>: <value>}, "confidence": <0..1>}. Use only the entity names the '
    "chosen intent declares, with their types: integer → a JSON number, datetime → ISO 8601 with "
    "an offset in the user's time zone, email → an address, list → a JSON list. Leave out what "
    "the message does not say. Never add anything else."
)


class LitellmProposer:
    """``IntentProposer`` over ``litellm.completion`` (JSON mode, temperature 0)."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 20.0,
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.timeout_s = timeout_s

    def propose(
        self,
        text: str,
        *,
        catalogue: Sequence[Mapping[str, Any]],
        known: Mapping[str, Any],
        received_at: datetime,
        tz: str,
    ) -> Proposal:
        # never fetch litellm's model price list from the internet at import
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm  # noqa: PLC0415 - optional extra, imported only when a model is configured

        ask = {
            "message": text,
            "catalogue": list(catalogue),
            "known": dict(known),
            "received_at": received_at.isoformat(),
            "time_zone": tz,
        }
        response = litellm.completion(
            model=self.model,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": json.dumps(ask, ensure_ascii=False, default=str)},
            ],
            api_base=self.api_base,
            api_key=self.api_key or "none",
            response_format={"type": "json_object"},
            temperature=0,
            timeout=self.timeout_s,
            num_retries=0,
        )
        content = response.choices[0].message.content or ""
        return parse_answer(content)


def parse_answer(content: str) -> Proposal:
    """The model's text as a Proposal; ``ProposalError`` naming what is wrong with it (not JSON,
    cut off, not an object, wrong member types). Unknown members are ignored."""
    try:
        # strict (GLOBAL_SPEC §11a): an answer naming "intent" twice has two readings
        data = loads_strict(content, what="the model's answer")
    except DocumentError as e:
        raise ProposalError(f"the model's answer is not JSON: {e.message}") from e
    if not isinstance(data, dict):
        raise ProposalError("the model's answer is not a JSON object")
    intent = data.get("intent")
    entities = data.get("entities") or {}
    confidence = data.get("confidence", 0.0)
    if intent is not None and not isinstance(intent, str):
        raise ProposalError("the model's intent is not a name")
    if not isinstance(entities, dict):
        raise ProposalError("the model's entities are not an object")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
        raise ProposalError("the model's confidence is not a number")
    return Proposal(intent, entities, float(confidence))
