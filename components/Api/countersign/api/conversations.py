"""Conversations (runs SQL: a store): each person's chat turns and what the readiness dialogue has
settled so far (the intent, the entities found, the plan it led to)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from ulid import ULID

from countersign.kernel import format_utc
from countersign.storage import Database

from .errors import ConversationNotFoundError

__all__ = ["Conversation", "ConversationStore"]

#: the turns since the last reply that ended a request — a plan (``plan_id``) or a refusal: what
#: came before it is never read again with later messages (a hostile text stays answered)
_SINCE_LAST_ANSWER = text(
    "SELECT role, text, reply -> 'explained' AS explained FROM conversation_turns "
    "WHERE conversation_id = :c AND seq > coalesce((SELECT max(seq) FROM conversation_turns "
    "WHERE conversation_id = :c AND role = 'assistant' AND (jsonb_typeof(reply -> 'refusal') "
    "= 'object' OR reply ->> 'plan_id' IS NOT NULL)), 0) ORDER BY seq"
)


@dataclass
class Conversation:
    """One conversation's state."""

    conversation_id: str
    user_id: str
    intent: str | None = None
    entities: dict[str, Any] = field(default_factory=dict)
    plan_id: str | None = None
    #: the person's messages since the conversation's last plan or refusal (read together
    #: while no intent is settled)
    person_texts: list[str] = field(default_factory=list)
    #: the words each entity settled since then came from (the replies' ``explained``)
    words: dict[str, str] = field(default_factory=dict)


@dataclass
class ConversationStore:
    """Conversations in Postgres."""

    db: Database
    clock: Callable[[], datetime]

    def open(self, conversation_id: str | None, user_id: str) -> Conversation:
        """The caller's conversation (another's is not found), or a new one."""
        now = self.clock()
        with self.db.tx() as c:
            if conversation_id is None:
                cid = str(ULID.from_datetime(now))
                c.execute(
                    text(
                        "INSERT INTO conversations (conversation_id, user_id, created_at, "
                        "updated_at) VALUES (:c, :u, :t, :t)"
                    ),
                    {"c": cid, "u": user_id, "t": now},
                )
                return Conversation(cid, user_id)
            row = c.execute(
                text("SELECT * FROM conversations WHERE conversation_id = :c AND user_id = :u"),
                {"c": conversation_id[:26], "u": user_id},
            ).first()
            if row is None:
                raise ConversationNotFoundError(f"no conversation {conversation_id[:40]!r}")
            turns = c.execute(_SINCE_LAST_ANSWER, {"c": row.conversation_id}).all()
        conv = Conversation(
            row.conversation_id, user_id, row.intent, dict(row.entities or {}), row.plan_id
        )
        for t in turns:
            if t.role == "person":
                conv.person_texts.append(t.text)
            for e in t.explained if isinstance(t.explained, list) else []:
                if isinstance(e, dict) and isinstance(e.get("words"), str):
                    conv.words[str(e.get("entity"))] = e["words"]
        return conv

    def record(
        self,
        conv: Conversation,
        person: str,
        reply: Mapping[str, Any],
        *,
        summary: str,
    ) -> None:
        """Store the person's message, the assistant's reply and the dialogue's state."""
        now = self.clock()
        with self.db.tx() as c:
            seq = c.execute(
                text(
                    "SELECT coalesce(max(seq), 0) FROM conversation_turns "
                    "WHERE conversation_id = :c"
                ),
                {"c": conv.conversation_id},
            ).scalar_one()
            for i, (role, said, body) in enumerate(
                [("person", person, None), ("assistant", summary, json.dumps(reply, default=str))]
            ):
                c.execute(
                    text(
                        "INSERT INTO conversation_turns (conversation_id, seq, role, text, reply, ts)"
                        " VALUES (:c, :s, :r, :t, CAST(:b AS jsonb), :ts)"
                    ),
                    {
                        "c": conv.conversation_id,
                        "s": seq + 1 + i,
                        "r": role,
                        "t": said,
                        "b": body,
                        "ts": now,
                    },
                )
            c.execute(
                text(
                    "UPDATE conversations SET intent = :i, entities = CAST(:e AS jsonb), "
                    "plan_id = :p, updated_at = :t WHERE conversation_id = :c"
                ),
                {
                    "i": conv.intent,
                    "e": json.dumps(conv.entities),
                    "p": conv.plan_id,
                    "t": now,
                    "c": conv.conversation_id,
                },
            )

    def show(self, conversation_id: str, user_id: str) -> dict[str, Any]:
        """The conversation with its turns (oldest first)."""
        conv = self.open(conversation_id, user_id)
        with self.db.tx() as c:
            turns = c.execute(
                text(
                    "SELECT seq, role, text, reply, ts FROM conversation_turns "
                    "WHERE conversation_id = :c ORDER BY seq"
                ),
                {"c": conv.conversation_id},
            ).mappings()
            out = [{**dict(t), "ts": format_utc(t["ts"])} for t in turns]
        return {
            "conversation_id": conv.conversation_id,
            "intent": conv.intent,
            "entities": conv.entities,
            "plan_id": conv.plan_id,
            "turns": out,
        }
