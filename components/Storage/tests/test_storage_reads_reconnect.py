"""The API's read pool after PostgreSQL dropped its connections (a restart, a terminated
backend): the next reads are answered on fresh connections, none fails."""

from __future__ import annotations

from sqlalchemy import text

from countersign.storage import Database, ReadPool, libpq_url


def test_reads_survive_their_connections_being_closed_by_the_server(db: Database) -> None:
    reads = ReadPool.open(libpq_url(db), size=2)
    try:
        pids = set()
        for _ in range(2):
            row = reads.one("SELECT pg_backend_pid() AS pid", {})
            assert row is not None
            pids.add(int(row["pid"]))
        with db.engine.begin() as c:  # what a PostgreSQL restart does to every pooled one
            c.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() "
                    "AND pid = ANY(:pids)"
                ),
                {"pids": list(pids)},
            )
        for _ in range(4):
            assert reads.one("SELECT 1 AS one", {}) == {"one": 1}
    finally:
        reads.close()
