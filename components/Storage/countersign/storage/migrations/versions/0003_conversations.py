"""Conversations: the chat turns per user and conversation (Tier-1 context) and what the
readiness dialogue has settled so far (the intent and the entities found).

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE conversations (
          conversation_id varchar(26) PRIMARY KEY,
          user_id varchar(128) NOT NULL,
          intent varchar(64),
          entities jsonb NOT NULL DEFAULT '{}'::jsonb,
          plan_id varchar(26),
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL
        );
        CREATE INDEX conversations_user ON conversations (user_id, updated_at DESC);
        CREATE TABLE conversation_turns (
          conversation_id varchar(26) NOT NULL
            REFERENCES conversations(conversation_id) ON DELETE CASCADE,
          seq integer NOT NULL,
          role varchar(16) NOT NULL CHECK (role IN ('person', 'assistant')),
          text text NOT NULL,
          reply jsonb,
          ts timestamptz NOT NULL,
          PRIMARY KEY (conversation_id, seq)
        );
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS conversation_turns; DROP TABLE IF EXISTS conversations;")
