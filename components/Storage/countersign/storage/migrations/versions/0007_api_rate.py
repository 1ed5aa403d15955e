"""The per-user rate limit every API process shares (issue 27 §4; Api SPEC, who is calling).

``api_rate``: one counter per user and wall-clock minute (``minute`` = Unix seconds // 60). The
Api's ``UserStore.count_request`` adds one and reads the previous minute in one statement; the
limiter weighs the two into a sliding one-minute window. UNLOGGED: a counter lost with a crash
costs at most one minute of leniency, and no request pays for its WAL.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE UNLOGGED TABLE api_rate ("
        " user_id varchar(128) NOT NULL,"
        " minute bigint NOT NULL,"
        " hits integer NOT NULL,"
        " PRIMARY KEY (user_id, minute))"
    )


def downgrade() -> None:
    op.execute("DROP TABLE api_rate")
