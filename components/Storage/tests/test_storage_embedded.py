"""Embedded PostgreSQL lifetimes: the test fixture leaves no server behind; ``countersign up``'s does.

Each test runs the code under test in a child process (a whole pytest session, or the start of
``Database.open`` as ``countersign up`` runs it), then looks in ``ps`` for a live postgres whose
command line names that run's data folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from countersign.storage import embedded_server

INNER = textwrap.dedent(
    """
    import os
    import subprocess
    from pathlib import Path

    from sqlalchemy import text


    def test_inner(db):
        with db.tx() as c:
            folder = c.execute(text("SHOW data_directory")).scalar_one()
        ps = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
        # the outer test's ps check would see this server (it is not vacuous)
        assert any(folder in line and "postgres" in line for line in ps.splitlines())
        Path(os.environ["PG_FOLDER_OUT"]).write_text(folder)
        outcome = os.environ["INNER_OUTCOME"]
        if outcome == "fail":
            raise AssertionError("a failing test must not leak the server either")
        if outcome == "interrupt":
            raise KeyboardInterrupt
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COUNTERSIGN_") and k != "DATABASE_URL"
    }
    env.update(extra)
    return env


def _live_postgres(folder: str) -> list[str]:
    """``ps`` lines of live (not zombie) processes whose command line names ``folder``
    (``-ww``: never cut to a terminal width, or the folder would silently not match)."""
    ps = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [
        line
        for line in ps.splitlines()
        if folder in line and "postgres" in line and not line.split()[1].startswith("Z")
    ]


@pytest.mark.parametrize("outcome", ["pass", "fail", "interrupt"])
def test_fixture_stops_the_server_it_started(tmp_path: Path, outcome: str) -> None:
    (tmp_path / "test_inner_session.py").write_text(INNER)
    out = tmp_path / "pg_folder.txt"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "countersign.storage.testing",
            "--basetemp",
            str(tmp_path / "bt"),
            "test_inner_session.py",
        ],
        cwd=tmp_path,
        env=_env(PG_FOLDER_OUT=str(out), INNER_OUTCOME=outcome),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    expected_rc = {"pass": 0, "fail": 1, "interrupt": 2}[outcome]
    assert run.returncode == expected_rc, run.stdout + run.stderr
    folder = out.read_text()  # the server really ran: the inner test asked it for its folder
    assert folder.startswith(str(tmp_path / "bt"))
    assert _live_postgres(folder) == []


def test_up_keeps_its_server_running(tmp_path: Path) -> None:
    """``Database.open`` (what ``countersign up`` and the API use) leaves the server running for
    the next process; ``embedded_server`` on the same folder then stops it."""
    home = tmp_path / "home"
    code = "from countersign.kernel import Settings\nfrom countersign.storage import Database\n"
    code += "Database.open(Settings()).dispose()\n"
    run = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(COUNTERSIGN_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    folder = str((home / "pg").resolve())
    try:
        assert run.returncode == 0, run.stderr
        assert len(_live_postgres(folder)) >= 1, "countersign up's server must outlive the process"
    finally:
        with embedded_server(home / "pg"):
            pass
    assert _live_postgres(folder) == []
