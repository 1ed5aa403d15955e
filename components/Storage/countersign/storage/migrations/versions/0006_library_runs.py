"""Plan library counts are runs, not steps (issue 25; PlanWriter SPEC).

``plan_library`` holds one entry per signed plan, and a plan is run once (a durable run too), so
its ``success_count`` / ``failure_count`` are now 1/0 (the run's outcomes were recorded and none
failed) or 0/1 (a step failed). Rows written before counted the plan's steps ("5/5 runs
succeeded" for one five-step run): they are read the same way here — any failure makes the run a
failure, else any success makes it one success. A later record of the plan writes the same.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE plan_library SET "
        "success_count = CASE WHEN failure_count = 0 AND success_count > 0 THEN 1 ELSE 0 END, "
        "failure_count = CASE WHEN failure_count > 0 THEN 1 ELSE 0 END "
        "WHERE success_count > 1 OR failure_count > 1 "
        "OR (success_count > 0 AND failure_count > 0)"
    )


def downgrade() -> None:
    """Nothing to undo: per-run counts are valid per-step counts of a one-step reading."""
