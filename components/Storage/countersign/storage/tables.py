"""Tables (SQLModel). The schema itself is created by the alembic migrations in ``migrations/``;
these models are the typed view the code reads and writes through (Storage LLD §1)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, DateTime, Integer, LargeBinary, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

__all__ = [
    "ApprovalTokenRow",
    "AuditHeadRow",
    "AuditRow",
    "ConsentRow",
    "GateDecisionRow",
    "IdempotencyRow",
    "OutcomeRow",
    "PlanLibraryRow",
    "PlanRow",
    "PlanStepRow",
    "PreferenceRow",
]


def _ts(nullable: bool = False) -> Any:
    return Field(default=None, sa_column=Column(DateTime(timezone=True), nullable=nullable))


class PlanRow(SQLModel, table=True):
    """A signed plan, byte for byte as signed."""

    __tablename__ = "plans"
    plan_id: str = Field(primary_key=True, max_length=26)
    plan_hash: str = Field(max_length=64, index=True)
    canonical: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    envelope: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False))
    user_id: str = Field(max_length=128, index=True)
    intent: str = Field(max_length=64)
    registry_version: str = Field(max_length=64)
    policy_version: str = Field(max_length=64)
    status: str = Field(max_length=32)
    created_at: datetime = _ts()
    updated_at: datetime = _ts()


class PlanStepRow(SQLModel, table=True):
    """Per-step status, output and the preview fingerprint of reads."""

    __tablename__ = "plan_steps"
    plan_id: str = Field(primary_key=True, foreign_key="plans.plan_id", max_length=26)
    step: int = Field(primary_key=True)
    status: str = Field(max_length=32)
    output: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    fingerprint: str | None = Field(default=None, max_length=64)
    updated_at: datetime = _ts()


class ApprovalTokenRow(SQLModel, table=True):
    """The consumption ledger of approval tokens (only a hash of each token is stored)."""

    __tablename__ = "approval_tokens"
    token_hash: str = Field(primary_key=True, max_length=64)
    plan_id: str = Field(max_length=26, index=True)
    plan_hash: str = Field(max_length=64)
    gate_id: str = Field(max_length=16)
    user_id: str = Field(max_length=128)
    scopes: list[str] = Field(sa_column=Column(JSONB, nullable=False))
    choice: Any = Field(default=None, sa_column=Column(JSONB, nullable=True))
    issued_at: datetime = _ts()
    expires_at: datetime = _ts()
    consumed_at: datetime | None = _ts(nullable=True)


class GateDecisionRow(SQLModel, table=True):
    """What the person decided at a gate, once redeemed (approved) or rejected."""

    __tablename__ = "gate_decisions"
    plan_id: str = Field(primary_key=True, max_length=26)
    gate_id: str = Field(primary_key=True, max_length=16)
    plan_hash: str = Field(max_length=64)
    user_id: str = Field(max_length=128)
    decision: str = Field(max_length=16)
    choice: Any = Field(default=None, sa_column=Column(JSONB, nullable=True))
    reason: str | None = Field(default=None, max_length=500)
    decided_at: datetime = _ts()


class IdempotencyRow(SQLModel, table=True):
    """Stripe-style idempotency ledger shared by n8n and Temporal executions."""

    __tablename__ = "idempotency_keys"
    key: str = Field(primary_key=True, max_length=200)
    request_hash: str = Field(max_length=64)
    state: str = Field(max_length=16, index=True)
    owner: str = Field(max_length=128)
    lease_until: datetime = _ts()
    sent_at: datetime | None = _ts(nullable=True)
    result: Any = Field(default=None, sa_column=Column(JSONB, nullable=True))
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = _ts()
    updated_at: datetime = _ts()


class AuditRow(SQLModel, table=True):
    """One decision, hash-chained to the previous row."""

    __tablename__ = "audit_log"
    seq: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    ts: datetime = _ts()
    kind: str = Field(max_length=48)
    plan_id: str | None = Field(default=None, max_length=26, index=True)
    step: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    op: str | None = Field(default=None, max_length=160)
    status: str = Field(max_length=32)
    actor: str = Field(max_length=128)
    reason: str | None = Field(default=None, max_length=500)
    latency_ms: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    retries: int = Field(default=0)
    details: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False))
    content_hash: str = Field(max_length=64)
    prev_hash: str = Field(max_length=64)
    row_hash: str = Field(max_length=64)


class AuditHeadRow(SQLModel, table=True):
    """The chain's head: last sequence number and hash (detects a deleted last row)."""

    __tablename__ = "audit_head"
    id: int = Field(primary_key=True)
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    last_hash: str = Field(max_length=64)


class OutcomeRow(SQLModel, table=True):
    """History: what actually happened, as normalized facts."""

    __tablename__ = "outcomes"
    id: int | None = Field(
        default=None, sa_column=Column(BigInteger, primary_key=True, autoincrement=True)
    )
    plan_id: str = Field(max_length=26, index=True)
    step: int
    provider: str = Field(max_length=64)
    status: str = Field(max_length=16)
    result: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False))
    created_at: datetime = _ts()


class PlanLibraryRow(SQLModel, table=True):
    """A plan in the library: text for BM25, an embedding, success/failure counts, recency."""

    __tablename__ = "plan_library"
    plan_id: str = Field(primary_key=True, max_length=26)
    user_id: str = Field(max_length=128, index=True)
    intent: str = Field(max_length=64)
    text: str = Field(sa_column=Column(Text, nullable=False))
    success_count: int = 0
    failure_count: int = 0
    last_used_at: datetime | None = _ts(nullable=True)
    created_at: datetime = _ts()


class PreferenceRow(SQLModel, table=True):
    """A user's stable preference (tier 2)."""

    __tablename__ = "profile_prefs"
    user_id: str = Field(primary_key=True, max_length=128)
    key: str = Field(primary_key=True, max_length=128)
    value: Any = Field(sa_column=Column(JSONB, nullable=False))
    updated_at: datetime = _ts()


class ConsentRow(SQLModel, table=True):
    """Recorded consent for a context tier / purpose (tier 5 needs one)."""

    __tablename__ = "consents"
    user_id: str = Field(primary_key=True, max_length=128)
    purpose: str = Field(primary_key=True, max_length=64)
    granted: bool
    granted_at: datetime | None = _ts(nullable=True)
    revoked_at: datetime | None = _ts(nullable=True)
