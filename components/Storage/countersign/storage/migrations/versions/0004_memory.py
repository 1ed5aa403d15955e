"""Memory (ContextRAG SPEC §1): outcome history per plan step, facts and contacts per user, and the
columns ContextRAG needs on the existing preferences and consents.

``history_facts`` is "what actually happened", PII-light: one row per (plan, step, key), written
idempotently by PlanWriter through ``countersign.contextrag.store.record_history``.
``memory_facts`` holds facts a person (or a derivation) stated, each with a tier, a consent
purpose for private-derived facts, a confidence, a source reference and a time to live.
``contacts`` holds a person's contacts. Forget (``countersign.contextrag.MemoryStore.forget``) deletes
from all of them. ``audit_log.redacted`` marks a row whose personal content a forget removed
(Audit SPEC: the chain still verifies, through the stored content hash, for rows a later
``memory_forgotten`` row names).

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE history_facts (
          user_id varchar(128) NOT NULL,
          plan_id varchar(26) NOT NULL,
          step integer NOT NULL,
          intent varchar(64) NOT NULL,
          key varchar(128) NOT NULL,
          value jsonb NOT NULL,
          status varchar(16) NOT NULL,
          created_at timestamptz NOT NULL,
          PRIMARY KEY (plan_id, step, key)
        );
        CREATE INDEX history_facts_user ON history_facts (user_id, created_at DESC);
        CREATE TABLE memory_facts (
          fact_id varchar(26) PRIMARY KEY,
          user_id varchar(128) NOT NULL,
          tier varchar(2) NOT NULL CHECK (tier IN ('T2', 'T3', 'T4', 'T5')),
          type varchar(32) NOT NULL,
          key varchar(128) NOT NULL,
          value jsonb NOT NULL,
          subject varchar(200),
          purpose varchar(64),
          confidence double precision NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
          source_ref varchar(200) NOT NULL,
          ttl_days integer CHECK (ttl_days IS NULL OR ttl_days > 0),
          created_at timestamptz NOT NULL
        );
        CREATE INDEX memory_facts_user
          ON memory_facts (user_id, tier, confidence DESC, created_at DESC);
        CREATE TABLE contacts (
          contact_id varchar(26) PRIMARY KEY,
          user_id varchar(128) NOT NULL,
          name varchar(200) NOT NULL,
          email varchar(320),
          phone varchar(40),
          relation varchar(64),
          created_at timestamptz NOT NULL
        );
        CREATE INDEX contacts_user ON contacts (user_id);
        ALTER TABLE audit_log ADD COLUMN redacted boolean NOT NULL DEFAULT false;
        """
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE audit_log DROP COLUMN IF EXISTS redacted; DROP TABLE IF EXISTS contacts; DROP TABLE IF EXISTS memory_facts; "
        "DROP TABLE IF EXISTS history_facts;"
    )
