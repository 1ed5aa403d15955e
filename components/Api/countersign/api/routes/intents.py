"""``POST /v1/intents`` (a structured intent, or chat text) and the conversations it keeps."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from ..bodies import StrictJsonRoute
from ..deps import Caller, Svc, Telemetry
from ..errors import TextNotSupportedError
from ..models import IntentRequest
from ..responses import json_response

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.post(
    "/v1/intents",
    status_code=201,
    tags=["plans"],
    response_model=dict[str, Any],
    responses={200: {"description": "more input is needed: {needs, intent}"}},
)
async def post_intent(body: IntentRequest, who: Caller, svc: Svc, metrics: Telemetry) -> Response:
    """Plan a structured intent (``{"intent": {...}}``), sign and store it, and preview it
    (read-only); or understand chat text (``{"text": ..., "conversation_id"?}``): a plan when
    the text says enough, else the questions still open, what this service can do, or a
    refusal (an answer, never a plan); each with what was understood (``understood``)."""
    if body.text is not None:
        if body.intent is not None:
            raise TextNotSupportedError("send either text or a structured intent, not both")
        status, reply = await svc.chat.converse(
            body.text,
            who.user_id,
            body.conversation_id,
            body.tz,
            observe=metrics.engine,
            refused=metrics.chat_refusal,
        )
        return json_response(reply, status=status)
    if body.intent is None:
        raise TextNotSupportedError(
            'send a structured intent as {"intent": {...}} or chat text as {"text": ...}'
        )
    proposal = await svc.planning.propose(body.intent, who.user_id, observe=metrics.engine)
    return json_response(
        proposal.body,
        status=201 if proposal.planned else 200,
        # the engines' share of this request (plan, sign, store, preview), for clients and
        # the benchmark that measures what the API adds around them
        headers={"Server-Timing": f"engine;dur={proposal.engine_ms:.2f}"},
    )


@router.get("/v1/conversations/{conversation_id}", tags=["plans"])
def get_conversation(conversation_id: str, who: Caller, svc: Svc) -> dict[str, Any]:
    """A conversation: its turns and what it has settled so far."""
    return svc.chat.show(conversation_id, who.user_id)
