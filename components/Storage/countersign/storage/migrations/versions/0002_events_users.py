"""The plan's event log (fed by the audit chain, in the same transaction) and API users.

``plan_events`` is the ordered log a plan's status is derived from: one row per audit row that
names a plan, numbered 1, 2, 3 … per plan, written by a trigger on ``audit_log`` so it commits or
rolls back with the change the audit row records, and linked to it by ``audit_seq``. Every insert
notifies channel ``plan_events`` with ``<plan_id>:<seq>`` so a listener (the API's event stream)
learns of it without polling. Appends to ``audit_log`` are serialized by the audit head lock, so
the per-plan numbering has no gaps and no races.

``registry_docs`` holds registry files edited through the API: every edit is a new revision (the
effective registry is the shipped files overlaid with the newest revision of each edited file).

``api_users`` holds the people and programs that call the API: the key is stored as its sha256
(a key is 256 random bits, so a plain digest is enough), never the key itself.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE plan_events (
          plan_id varchar(26) NOT NULL,
          seq integer NOT NULL,
          ts timestamptz NOT NULL,
          kind varchar(48) NOT NULL,
          step integer,
          op varchar(160),
          status varchar(32) NOT NULL,
          actor varchar(128) NOT NULL,
          reason varchar(500),
          details jsonb NOT NULL,
          audit_seq bigint NOT NULL,
          PRIMARY KEY (plan_id, seq)
        );
        CREATE INDEX plan_events_audit_seq ON plan_events (audit_seq);
        CREATE FUNCTION plan_events_from_audit() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
          next_seq integer;
        BEGIN
          IF NEW.plan_id IS NULL THEN
            RETURN NULL;
          END IF;
          SELECT coalesce(max(seq), 0) + 1 INTO next_seq
            FROM plan_events WHERE plan_id = NEW.plan_id;
          INSERT INTO plan_events
            (plan_id, seq, ts, kind, step, op, status, actor, reason, details, audit_seq)
          VALUES (NEW.plan_id, next_seq, NEW.ts, NEW.kind, NEW.step, NEW.op, NEW.status, NEW.actor,
                  NEW.reason, NEW.details, NEW.seq);
          PERFORM pg_notify('plan_events', NEW.plan_id || ':' || next_seq);
          RETURN NULL;
        END
        $$;
        CREATE TRIGGER audit_log_plan_events AFTER INSERT ON audit_log
          FOR EACH ROW EXECUTE FUNCTION plan_events_from_audit();
        INSERT INTO plan_events
          (plan_id, seq, ts, kind, step, op, status, actor, reason, details, audit_seq)
        SELECT plan_id, row_number() OVER (PARTITION BY plan_id ORDER BY seq), ts, kind, step, op,
               status, actor, reason, details, seq
          FROM audit_log WHERE plan_id IS NOT NULL;
        CREATE TABLE api_users (
          user_id varchar(128) PRIMARY KEY,
          key_hash varchar(64) NOT NULL UNIQUE,
          admin boolean NOT NULL DEFAULT false,
          created_at timestamptz NOT NULL,
          revoked_at timestamptz
        );
        CREATE TABLE api_sessions (
          session_hash varchar(64) PRIMARY KEY,
          user_id varchar(128) NOT NULL REFERENCES api_users(user_id) ON DELETE CASCADE,
          csrf varchar(64) NOT NULL,
          created_at timestamptz NOT NULL,
          expires_at timestamptz NOT NULL
        );
        CREATE TABLE registry_docs (
          kind varchar(16) NOT NULL CHECK (kind IN ('connectors', 'intents')),
          name varchar(64) NOT NULL,
          revision integer NOT NULL,
          document jsonb NOT NULL,
          author varchar(128) NOT NULL,
          registry_version varchar(64) NOT NULL,
          created_at timestamptz NOT NULL,
          PRIMARY KEY (kind, name, revision)
        );
        CREATE TABLE login_links (
          link_hash varchar(64) PRIMARY KEY,
          user_id varchar(128) NOT NULL REFERENCES api_users(user_id) ON DELETE CASCADE,
          expires_at timestamptz NOT NULL,
          used_at timestamptz
        );
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE IF EXISTS login_links;
        DROP TABLE IF EXISTS registry_docs;
        DROP TABLE IF EXISTS api_sessions;
        DROP TABLE IF EXISTS api_users;
        DROP TRIGGER IF EXISTS audit_log_plan_events ON audit_log;
        DROP FUNCTION IF EXISTS plan_events_from_audit();
        DROP TABLE IF EXISTS plan_events;
        """
    )
