"""Signed approval receipts and the choice hash (GLOBAL_SPEC §8, Approvals SPEC §4).

``approval_tokens.choice_hash`` and ``gate_decisions.choice_hash``: sha256 hex of the RFC 8785
bytes of the stored choice (a null choice hashes ``null``); redemption refuses a row whose choice
no longer has its hash. Existing rows are filled in here from their stored choice, then the
columns become NOT NULL.

``gate_receipts``: one chain of signed receipts per plan (``seq`` from 1, PK (plan_id, seq)),
written by ``countersign.approvals.Approvals`` in the transaction of the decision. ``user_id`` is
the decider (forget and export find the rows by it and by plan).

Revision ID: 0005
Revises: 0004
"""

from alembic import op
from sqlalchemy import text

from countersign.kernel import content_hash

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _backfill(table: str, key: str) -> None:
    bind = op.get_bind()
    rows = bind.execute(text(f"SELECT {key} AS k, choice FROM {table}")).all()  # noqa: S608 - fixed text
    for row in rows:
        bind.execute(
            text(f"UPDATE {table} SET choice_hash = :h WHERE {key} = :k"),  # noqa: S608 - fixed text
            {"h": content_hash(row.choice), "k": row.k},
        )


def upgrade() -> None:
    op.execute(
        "ALTER TABLE approval_tokens ADD COLUMN choice_hash varchar(64); "
        "ALTER TABLE gate_decisions ADD COLUMN choice_hash varchar(64);"
    )
    _backfill("approval_tokens", "token_hash")
    _backfill("gate_decisions", "plan_id || ':' || gate_id")
    op.execute(
        """
        ALTER TABLE approval_tokens ALTER COLUMN choice_hash SET NOT NULL;
        ALTER TABLE gate_decisions ALTER COLUMN choice_hash SET NOT NULL;
        CREATE TABLE gate_receipts (
          plan_id varchar(26) NOT NULL,
          seq integer NOT NULL CHECK (seq >= 1),
          gate_id varchar(16) NOT NULL,
          user_id varchar(128) NOT NULL,
          receipt jsonb NOT NULL,
          signature jsonb NOT NULL,
          receipt_hash varchar(64) NOT NULL,
          created_at timestamptz NOT NULL,
          PRIMARY KEY (plan_id, seq)
        );
        CREATE INDEX gate_receipts_user ON gate_receipts (user_id);
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP TABLE IF EXISTS gate_receipts; "
        "ALTER TABLE gate_decisions DROP COLUMN IF EXISTS choice_hash; "
        "ALTER TABLE approval_tokens DROP COLUMN IF EXISTS choice_hash;"
    )
