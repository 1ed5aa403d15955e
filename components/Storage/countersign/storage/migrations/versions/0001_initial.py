"""Initial schema: plans, steps, approval ledger, gate decisions, idempotency ledger, audit chain,
outcomes, plan library (with a pgvector column), preferences, consents.

Revision ID: 0001
Revises:
"""

from alembic import context, op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TABLES = [
    "plan_library",
    "outcomes",
    "audit_head",
    "audit_log",
    "idempotency_keys",
    "gate_decisions",
    "approval_tokens",
    "plan_steps",
    "plans",
    "profile_prefs",
    "consents",
]


def upgrade() -> None:
    dim = int(context.config.attributes.get("embedding_dim", 384))
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute(
        """
        CREATE TABLE plans (
          plan_id varchar(26) PRIMARY KEY,
          plan_hash varchar(64) NOT NULL,
          canonical bytea NOT NULL,
          envelope jsonb NOT NULL,
          user_id varchar(128) NOT NULL,
          intent varchar(64) NOT NULL,
          registry_version varchar(64) NOT NULL,
          policy_version varchar(64) NOT NULL,
          status varchar(32) NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL
        );
        CREATE INDEX plans_user_created ON plans (user_id, created_at DESC);
        CREATE TABLE plan_steps (
          plan_id varchar(26) NOT NULL REFERENCES plans(plan_id) ON DELETE CASCADE,
          step integer NOT NULL,
          status varchar(32) NOT NULL,
          output jsonb,
          fingerprint varchar(64),
          updated_at timestamptz NOT NULL,
          PRIMARY KEY (plan_id, step)
        );
        CREATE TABLE approval_tokens (
          token_hash varchar(64) PRIMARY KEY,
          plan_id varchar(26) NOT NULL,
          plan_hash varchar(64) NOT NULL,
          gate_id varchar(16) NOT NULL,
          user_id varchar(128) NOT NULL,
          scopes jsonb NOT NULL,
          choice jsonb,
          issued_at timestamptz NOT NULL,
          expires_at timestamptz NOT NULL,
          consumed_at timestamptz
        );
        CREATE INDEX approval_tokens_plan_gate ON approval_tokens (plan_id, gate_id);
        CREATE TABLE gate_decisions (
          plan_id varchar(26) NOT NULL,
          gate_id varchar(16) NOT NULL,
          plan_hash varchar(64) NOT NULL,
          user_id varchar(128) NOT NULL,
          decision varchar(16) NOT NULL CHECK (decision IN ('approved', 'rejected')),
          choice jsonb,
          reason varchar(500),
          decided_at timestamptz NOT NULL,
          PRIMARY KEY (plan_id, gate_id)
        );
        CREATE TABLE idempotency_keys (
          key varchar(200) PRIMARY KEY,
          request_hash varchar(64) NOT NULL,
          state varchar(16) NOT NULL
            CHECK (state IN ('in_progress', 'completed', 'failed', 'unknown')),
          owner varchar(128) NOT NULL,
          lease_until timestamptz NOT NULL,
          sent_at timestamptz,
          result jsonb,
          error text,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL
        );
        CREATE INDEX idempotency_keys_state ON idempotency_keys (state, updated_at);
        CREATE TABLE audit_log (
          seq bigint PRIMARY KEY,
          ts timestamptz NOT NULL,
          kind varchar(48) NOT NULL,
          plan_id varchar(26),
          step integer,
          op varchar(160),
          status varchar(32) NOT NULL,
          actor varchar(128) NOT NULL,
          reason varchar(500),
          latency_ms integer,
          retries integer NOT NULL DEFAULT 0,
          details jsonb NOT NULL,
          content_hash varchar(64) NOT NULL,
          prev_hash varchar(64) NOT NULL,
          row_hash varchar(64) NOT NULL
        );
        CREATE INDEX audit_log_plan ON audit_log (plan_id, seq);
        CREATE TABLE audit_head (
          id integer PRIMARY KEY CHECK (id = 1),
          seq bigint NOT NULL,
          last_hash varchar(64) NOT NULL
        );
        INSERT INTO audit_head (id, seq, last_hash) VALUES (1, 0, repeat('0', 64));
        CREATE TABLE outcomes (
          id bigserial PRIMARY KEY,
          plan_id varchar(26) NOT NULL,
          step integer NOT NULL,
          provider varchar(64) NOT NULL,
          status varchar(16) NOT NULL,
          result jsonb NOT NULL,
          created_at timestamptz NOT NULL
        );
        CREATE INDEX outcomes_plan ON outcomes (plan_id);
        CREATE TABLE profile_prefs (
          user_id varchar(128) NOT NULL,
          key varchar(128) NOT NULL,
          value jsonb NOT NULL,
          updated_at timestamptz NOT NULL,
          PRIMARY KEY (user_id, key)
        );
        CREATE TABLE consents (
          user_id varchar(128) NOT NULL,
          purpose varchar(64) NOT NULL,
          granted boolean NOT NULL,
          granted_at timestamptz,
          revoked_at timestamptz,
          PRIMARY KEY (user_id, purpose)
        );
        """
    )
    op.execute(
        f"""
        CREATE TABLE plan_library (
          plan_id varchar(26) PRIMARY KEY,
          user_id varchar(128) NOT NULL,
          intent varchar(64) NOT NULL,
          text text NOT NULL,
          tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
          embedding vector({dim}),
          success_count integer NOT NULL DEFAULT 0,
          failure_count integer NOT NULL DEFAULT 0,
          last_used_at timestamptz,
          created_at timestamptz NOT NULL
        );
        CREATE INDEX plan_library_tsv ON plan_library USING gin (tsv);
        CREATE INDEX plan_library_embedding ON plan_library USING hnsw (embedding vector_cosine_ops);
        CREATE INDEX plan_library_user ON plan_library (user_id, intent);
        """
    )


def downgrade() -> None:
    for table in _TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
