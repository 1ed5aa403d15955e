"""Chat text in a conversation (Api SPEC, chat text; Intake SPEC).

Intake reads the text in the caller's time zone, in its conversation: what earlier turns settled
carries over, and while no intent is settled every message is read together. The answer is the
questions still open (what the person's preferences fill is not asked), what this service can do,
or — when the text says enough — a signed, previewed plan. A message that starts "change / make
it / move it / instead / switch" after a plan revises that plan ("change it to april").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from countersign.intake import Contact, IntentProposer, Understanding, change_request

from ..conversations import Conversation, ConversationStore
from .planning import Observe, Planning, Proposal, unobserved
from .runtime import Runtime

__all__ = ["Chat"]


@dataclass
class Chat:
    """Conversations of the caller: understand each message, ask, or plan."""

    conversations: ConversationStore
    planning: Planning
    runtime: Runtime
    clock: Callable[[], datetime]
    #: the people chat text may name (none unless the entry point gives some: the sandbox stack
    #: gives the sandbox's demo people)
    contacts: Sequence[Contact] = ()
    #: the time zone chat text is read in when the request names none
    tz: str = "UTC"
    #: a model that proposes the intent of chat text (``COUNTERSIGN_LLM_MODEL``); None = the
    #: deterministic Intake alone
    proposer: IntentProposer | None = None

    def show(self, conversation_id: str, user_id: str) -> dict[str, Any]:
        """A conversation: its turns and what it has settled so far."""
        return self.conversations.show(conversation_id, user_id)

    def understand(self, text: str, conv: Conversation, *, tz: str | None = None) -> Understanding:
        """Read one chat message in its conversation (what earlier turns settled carries over;
        while no intent is settled, every message of the conversation is read together)."""
        said = text if conv.intent else " ".join([*conv.person_texts, text])
        return self.runtime.intake.understand(
            said,
            received_at=self.clock(),
            tz=tz or self.tz,
            contacts=self.contacts,
            intent=conv.intent,
            known=conv.entities,
            proposer=self.proposer,
        )

    async def converse(
        self,
        text: str,
        user_id: str,
        conversation_id: str | None,
        tz: str | None,
        *,
        observe: Observe = unobserved,
    ) -> tuple[int, dict[str, Any]]:
        """One message: the HTTP status (201 a plan, 200 a question or what it can do) and the
        reply, recorded as the conversation's turn."""
        conv = await asyncio.to_thread(self.conversations.open, conversation_id, user_id)
        zone = tz or self.tz
        if conv.intent is None and conv.plan_id and change_request(text) is not None:
            revised = await self._revision(text, conv, user_id, zone, observe)
            if revised is not None:
                return revised
        u = self.understand(text, conv, tz=zone)
        reply: dict[str, Any] = {
            "conversation_id": conv.conversation_id,
            "intent": u.intent,
            "confidence": round(u.confidence, 3),
            "understood_by": u.source,
            "entities": u.entities,
            "explained": [
                {"entity": e.entity, "value": e.value, "words": e.words} for e in u.explained
            ],
        }
        status, summary = await self._answer(u, conv, reply, user_id, zone, observe)
        await asyncio.to_thread(self.conversations.record, conv, text, reply, summary=summary)
        return status, reply

    async def _answer(
        self,
        u: Understanding,
        conv: Conversation,
        reply: dict[str, Any],
        user_id: str,
        zone: str,
        observe: Observe,
    ) -> tuple[int, str]:
        """Fill ``reply`` with what it can do, the questions still open, or the plan; the
        status and the turn's summary."""
        needs = list(u.needs)
        if u.intent is not None and needs:
            # what the person's preferences fill is not asked for (ContextRAG evidence)
            filled = await asyncio.to_thread(
                self.planning.filled_by_memory, u.intent, u.entities, zone, user_id
            )
            needs = [n for n in needs if n.entity not in filled]
        if u.intent is None and not u.needs:
            reply["can_do"] = u.can_do
            return 200, "I can: " + "; ".join(u.can_do)
        if needs:
            reply["needs"] = [
                {"entity": n.entity, "question": n.question, "options": n.options} for n in needs
            ]
            conv.intent, conv.entities = u.intent, dict(u.entities)
            return 200, " ".join(n.question for n in needs)
        body = {
            "intent": u.intent,
            "entities": u.entities,
            "tz": zone,
            "context_budget": self.planning.chat_context_budget,
        }
        proposal = await self.planning.propose(body, user_id, observe=observe)
        reply |= proposal.body
        conv.intent, conv.entities = None, {}  # the next message starts a new request
        conv.plan_id = proposal.body.get("plan_id")
        summary = f"Here is the plan {conv.plan_id}." if conv.plan_id else "More is needed."
        return _status(proposal), summary

    async def _revision(
        self, text: str, conv: Conversation, user_id: str, zone: str, observe: Observe
    ) -> tuple[int, dict[str, Any]] | None:
        """ "change it to april": a revision of the conversation's last plan (signed anew); None
        when the rest of the message names no change."""
        if conv.plan_id is None:
            return None
        changes = self._changes(text, conv.plan_id, user_id, zone)
        if not changes:
            return None
        proposal = await self.planning.revise(conv.plan_id, changes, user_id, observe=observe)
        out = proposal.body
        answer = {"conversation_id": conv.conversation_id, "understood_by": "intake", **out}
        if out.get("plan_id"):
            conv.plan_id = out["plan_id"]
        summary = (
            f"Here is {conv.plan_id}, revising {out['revises']['plan_id']} "
            f"({', '.join(out['revises']['changed'])})."
            if out.get("revises")
            else "More is needed."
        )
        await asyncio.to_thread(self.conversations.record, conv, text, answer, summary=summary)
        return _status(proposal), answer

    def _changes(self, text: str, plan_id: str, user_id: str, zone: str) -> dict[str, Any]:
        """The entities a change message names, read as a request of the plan's own intent:
        what follows "change it (to)" — "to april" reads as "in april", "to porto" as "in
        porto"."""
        parent = self.planning.views.document(plan_id, user_id)["plan"]
        rest = change_request(text) or ""
        for said_text in (rest, f"in {rest}"):
            said = self.runtime.intake.understand(
                said_text,
                received_at=self.clock(),
                tz=zone,
                contacts=self.contacts,
                intent=parent["intent"]["intent"],
                known={},
            )
            changes = {e.entity: said.entities[e.entity] for e in said.explained}
            if changes:
                return changes
        return {}


def _status(proposal: Proposal) -> int:
    return 201 if proposal.planned else 200
