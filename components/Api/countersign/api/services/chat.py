"""Chat text in a conversation (Api SPEC, chat text; Intake SPEC).

Intake reads the text in the caller's time zone, in its conversation: what earlier turns settled
carries over, and while no intent is settled every message since the last plan or refusal is read
together. The people it may name are the caller's own contacts (ContextRAG), then — only when the
entry point gives them (the sandbox runs) — the sandbox's demo people whose first name none of
the caller's own has; the caller is the person asking (``me``). The answer is a refusal (what it
cannot do, or text addressed to the system: a plain answer, never a plan, and the conversation
keeps nothing of it), the questions still open (what the person's preferences fill is not
asked), what this service can do, or — when the text says enough — a signed, previewed plan; each
with what was understood, as a person reads it (``understood.py``). A message that starts
"change / make it / move it / instead / switch" after a plan revises that plan ("change it to
april").
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from countersign.intake import Contact, IntentProposer, Refusal, Understanding, change_request

from ..conversations import Conversation, ConversationStore
from ..understood import asked, understood
from .planning import Observe, Planning, Proposal, unobserved
from .runtime import Runtime

__all__ = ["Chat", "People", "Refused", "me_of", "merged", "unrefused"]

#: hears each refusal a chat message got: ``(kind, what)`` (the app's metrics)
Refused = Callable[[str, str], None]
#: a user id that is an e-mail address (the providers know such a person by it)
_ADDRESS = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,255}$")
#: a refusal's ``kind`` / ``what`` as a metrics label (declared words; anything else is "other")
_LABEL = re.compile(r"^[a-z_]{1,32}$")


def unrefused(_kind: str, _what: str) -> None:
    """A ``Refused`` that counts nothing (callers without metrics)."""


def _first(name: str) -> str:
    return (name.split() or [""])[0].casefold()


def merged(own: Sequence[Contact], demo: Sequence[Contact]) -> list[Contact]:
    """The person's own contacts first, then each demo person whose first name and address no
    own contact has (a person's own "Carol" wins over the sandbox's)."""
    firsts = {_first(c.name) for c in own}
    emails = {c.email.casefold() for c in own}
    return [
        *own,
        *(c for c in demo if _first(c.name) not in firsts and c.email.casefold() not in emails),
    ]


def me_of(user_id: str, own: Sequence[Contact] = ()) -> Contact | None:
    """The person asking, as Intake takes them: their user id is the address the calendar and
    mail providers know them by (the sandbox's calendars are ``/<user id>/calendar/``); the name
    is their own contact card's, if they saved one, else read from the address
    ("robin.asker@…" → "Robin Asker"). None for a user id that is no address (``countersign
    up``'s ``local``): no provider knows them, so they cannot be an attendee."""
    if not _ADDRESS.match(user_id):
        return None
    for c in own:
        if c.email.casefold() == user_id.casefold():
            return Contact(c.name, user_id)
    local = re.split(r"[._+\-]+", user_id.split("@", maxsplit=1)[0])
    return Contact(" ".join(p.capitalize() for p in local if p) or user_id, user_id)


@dataclass(frozen=True)
class People:
    """Whom one message may name: the contacts (own first) and the person asking."""

    contacts: list[Contact]
    me: Contact | None

    @property
    def known(self) -> list[Contact]:
        """Everyone a reply can show by name and address (the person asking first)."""
        return [self.me, *self.contacts] if self.me else list(self.contacts)


@dataclass
class Chat:
    """Conversations of the caller: understand each message, refuse, ask, or plan."""

    conversations: ConversationStore
    planning: Planning
    runtime: Runtime
    clock: Callable[[], datetime]
    #: the sandbox's demo people (the entry point gives them only when the sandbox runs): chat
    #: text may name them after the caller's own contacts
    contacts: Sequence[Contact] = ()
    #: the time zone chat text is read in when the request names none
    tz: str = "UTC"
    #: a model that proposes the intent of chat text (``COUNTERSIGN_LLM_MODEL``); None = the
    #: deterministic Intake alone
    proposer: IntentProposer | None = None

    def show(self, conversation_id: str, user_id: str) -> dict[str, Any]:
        """A conversation: its turns and what it has settled so far."""
        return self.conversations.show(conversation_id, user_id)

    def people(self, user_id: str) -> People:
        """The caller's contacts (their own, read from ContextRAG in one indexed statement, then
        the demo people ``merged`` after them) and the caller as ``me``."""
        own = [Contact(n, e) for n, e in self.planning.memory.contacts(user_id)]
        return People(merged(own, self.contacts), me_of(user_id, own))

    def understand(
        self, text: str, conv: Conversation, people: People, *, tz: str | None = None
    ) -> Understanding:
        """Read one chat message in its conversation (what earlier turns settled carries over;
        while no intent is settled, every message since the last plan or refusal is read
        together)."""
        said = text if conv.intent else "\n".join([*conv.person_texts, text])
        return self.runtime.intake.understand(
            said,
            received_at=self.clock(),
            tz=tz or self.tz,
            contacts=people.contacts,
            intent=conv.intent,
            known=conv.entities,
            proposer=self.proposer,
            me=people.me,
        )

    async def converse(
        self,
        text: str,
        user_id: str,
        conversation_id: str | None,
        tz: str | None,
        *,
        observe: Observe = unobserved,
        refused: Refused = unrefused,
    ) -> tuple[int, dict[str, Any]]:
        """One message: the HTTP status (201 a plan, 200 an answer, a question or what it can
        do) and the reply, recorded as the conversation's turn."""
        conv, people = await asyncio.gather(
            asyncio.to_thread(self.conversations.open, conversation_id, user_id),
            asyncio.to_thread(self.people, user_id),
        )
        zone = tz or self.tz
        if conv.intent is None and conv.plan_id and change_request(text) is not None:
            revised = await self._revision(text, conv, people, user_id, zone, observe)
            if revised is not None:
                return revised
        u = self.understand(text, conv, people, tz=zone)
        if u.refusal is not None:
            return await self._refuse(text, u.refusal, u, conv, refused)
        words = {**conv.words, **{e.entity: e.words for e in u.explained}}
        reply: dict[str, Any] = {
            "conversation_id": conv.conversation_id,
            "intent": u.intent,
            "confidence": round(u.confidence, 3),
            "understood_by": u.source,
            "entities": u.entities,
            "explained": [
                {"entity": e.entity, "value": e.value, "words": e.words} for e in u.explained
            ],
            "understood": self._understood(u.intent, u.entities, words, people, zone),
        }
        status, summary = await self._answer(u, conv, reply, user_id, zone, observe)
        await asyncio.to_thread(self.conversations.record, conv, text, reply, summary=summary)
        return status, reply

    async def _refuse(
        self, text: str, r: Refusal, u: Understanding, conv: Conversation, refused: Refused
    ) -> tuple[int, dict[str, Any]]:
        """A refusal: a plain answer with no plan and no question, recorded as the turn; the
        conversation keeps no intent or entity, and later messages are read without this one
        (``ConversationStore``: turns after the last refusal); counted by kind and what."""
        reply: dict[str, Any] = {
            "conversation_id": conv.conversation_id,
            "intent": None,
            "confidence": 0.0,
            "understood_by": u.source,
            "refusal": {"kind": r.kind, "what": r.what, "message": r.message, "words": r.words},
            "answer": r.message,
        }
        if u.can_do:
            reply["can_do"] = u.can_do
        conv.intent, conv.entities = None, {}
        await asyncio.to_thread(self.conversations.record, conv, text, reply, summary=r.message)
        kind = r.kind if _LABEL.match(r.kind) else "other"
        refused(kind, r.what if _LABEL.match(r.what) else "other")
        return 200, reply

    def _kinds(self, intent: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """The intent's entities (required, then optional) with their registry types, and the
        currencies its amount entities declare."""
        spec = self.runtime.registry.intents.get(intent) if intent else None
        ents = [*spec.required, *spec.optional] if spec else []
        currencies = {e.name: c for e in ents if (c := getattr(e, "currency", None))}
        return {e.name: e.type for e in ents}, currencies

    def _understood(
        self,
        intent: str | None,
        entities: Mapping[str, Any],
        words: Mapping[str, str],
        people: People,
        zone: str,
        changed: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """What was understood, as a person reads it (``understood.understood``)."""
        kinds, currencies = self._kinds(intent)
        return understood(
            entities,
            words,
            kinds=kinds,
            tz=zone,
            people=people.known,
            changed=changed,
            currencies=currencies,
        )

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
            spec = self.runtime.registry.intents.get(u.intent) if u.intent else None
            kinds, currencies = self._kinds(u.intent)
            reply["needs"] = [
                asked(
                    {"entity": n.entity, "question": n.question, "options": n.options}
                    | ({"heard": n.heard} if n.heard is not None else {}),
                    title=spec.title if spec else None,
                    kind=kinds.get(n.entity),
                    tz=zone,
                    currency=currencies.get(n.entity),
                )
                for n in needs
            ]
            conv.intent, conv.entities = u.intent, dict(u.entities)
            return 200, " ".join(n["ask"] for n in reply["needs"])
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

    async def revise(
        self,
        plan_id: str,
        changes: Mapping[str, Any],
        user_id: str,
        *,
        observe: Observe = unobserved,
    ) -> Proposal:
        """The card's change of an understood entity (``POST …/revise``): a revision planned,
        signed and previewed as a new plan (``Planning.revise``), with what it now understands
        (the changed entities marked)."""
        proposal = await self.planning.revise(plan_id, changes, user_id, observe=observe)
        if proposal.planned:
            people = await asyncio.to_thread(self.people, user_id)
            self._attach(proposal.body, {}, people, sorted(changes))
        return proposal

    def _attach(
        self,
        body: dict[str, Any],
        words: Mapping[str, str],
        people: People,
        changed: Sequence[str],
    ) -> None:
        """Put on a planned revision what its intent now holds, as a person reads it."""
        intent = body["plan"]["intent"]
        body["understood"] = self._understood(
            intent["intent"], intent.get("entities", {}), words, people, intent["tz"], changed
        )

    async def _revision(
        self,
        text: str,
        conv: Conversation,
        people: People,
        user_id: str,
        zone: str,
        observe: Observe,
    ) -> tuple[int, dict[str, Any]] | None:
        """ "change it to april": a revision of the conversation's last plan (signed anew); None
        when the rest of the message names no change."""
        if conv.plan_id is None:
            return None
        changes, words = self._changes(text, conv.plan_id, people, user_id, zone)
        if not changes:
            return None
        proposal = await self.planning.revise(conv.plan_id, changes, user_id, observe=observe)
        out = proposal.body
        answer = {"conversation_id": conv.conversation_id, "understood_by": "intake", **out}
        if out.get("plan_id"):
            conv.plan_id = out["plan_id"]
            self._attach(answer, words, people, ())
        summary = (
            f"Here is {conv.plan_id}, revising {out['revises']['plan_id']} "
            f"({', '.join(out['revises']['changed'])})."
            if out.get("revises")
            else "More is needed."
        )
        await asyncio.to_thread(self.conversations.record, conv, text, answer, summary=summary)
        return _status(proposal), answer

    def _changes(
        self, text: str, plan_id: str, people: People, user_id: str, zone: str
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The entities a change message names, read as a request of the plan's own intent
        (what follows "change it (to)" — "to april" reads as "in april", "to porto" as "in
        porto"), and the words each came from. Nothing when the rest is refused: the message is
        then read as a new one, and answered with the refusal."""
        parent = self.planning.views.document(plan_id, user_id)["plan"]
        rest = change_request(text) or ""
        for said_text in (rest, f"in {rest}"):
            said = self.runtime.intake.understand(
                said_text,
                received_at=self.clock(),
                tz=zone,
                contacts=people.contacts,
                intent=parent["intent"]["intent"],
                known={},
                me=people.me,
            )
            if said.refusal is not None:
                return {}, {}
            changes = {e.entity: said.entities[e.entity] for e in said.explained}
            if changes:
                return changes, {e.entity: e.words for e in said.explained}
        return {}, {}


def _status(proposal: Proposal) -> int:
    return 201 if proposal.planned else 200
