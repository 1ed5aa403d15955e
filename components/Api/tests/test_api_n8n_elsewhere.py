"""n8n elsewhere (Api SPEC "n8n elsewhere"): ``COUNTERSIGN_N8N_URL`` / ``_API_KEY`` / ``_DB_URL``
choose the n8n the API uses and where a forget edits n8n's records; a wrong URL or key stops the
start naming the setting, and the key is never said. Unset, the local n8n of the data folder, as
before. (The API serving a meeting this way: ``tests/test_e2e_scaled_stack.py``.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from countersign.api.stack import check_n8n, n8n_endpoint, n8n_execution_store
from countersign.kernel import InputError, Settings
from countersign.kernel.process import free_port
from countersign.n8n import N8nUnavailableError
from countersign.n8n.keeping import PostgresExecutionStore, SqliteExecutionStore

KEY = "n8n-key-zq7"


def _settings(home: Path, **kw: Any) -> Settings:
    return Settings(home=home, **kw)


class _FakeN8n(BaseHTTPRequestHandler):
    """Healthy, and its public API takes only ``KEY``."""

    def do_GET(self) -> None:
        if self.path == "/healthz":
            code = 200
        elif self.path.startswith("/api/v1/workflows"):
            code = 200 if self.headers.get("X-N8N-API-KEY") == KEY else 401
        else:
            code = 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"data": []}')

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def fake_n8n() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeN8n)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_url_and_key_are_used_when_set(tmp_path: Path, fake_n8n: str) -> None:
    s = _settings(tmp_path, n8n_url=fake_n8n + "/", n8n_api_key=SecretStr(KEY))
    assert n8n_endpoint(s) == (fake_n8n, KEY)
    check_n8n(s)  # answers and takes the key: nothing to say


def test_unset_means_the_local_n8n_of_the_data_folder(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    check_n8n(s)  # nothing to check before the start
    with pytest.raises(N8nUnavailableError, match="no n8n running"):
        n8n_endpoint(s)
    store = n8n_execution_store(s, None)
    assert isinstance(store, SqliteExecutionStore)
    assert store.path == tmp_path / "n8n" / ".n8n" / "database.sqlite"


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"n8n_url": "http://127.0.0.1:{port}", "n8n_api_key": KEY}, "COUNTERSIGN_N8N_URL"),
        ({"n8n_url": "ftp://n8n-main:5678", "n8n_api_key": KEY}, "COUNTERSIGN_N8N_URL"),
        ({"n8n_url": "{fake}"}, "COUNTERSIGN_N8N_API_KEY"),
        ({"n8n_url": "{fake}", "n8n_api_key": "wrong-" + KEY}, "COUNTERSIGN_N8N_API_KEY"),
    ],
)
def test_a_wrong_url_or_key_is_refused_naming_the_setting(
    tmp_path: Path, fake_n8n: str, kw: dict[str, str], named: str
) -> None:
    given: dict[str, Any] = {
        k: v.format(port=free_port(), fake=fake_n8n) for k, v in kw.items() if k == "n8n_url"
    }
    if "n8n_api_key" in kw:
        given["n8n_api_key"] = SecretStr(kw["n8n_api_key"])
    with pytest.raises(InputError) as caught:
        check_n8n(_settings(tmp_path, **given), timeout_s=3)
    said = caught.value.one_line()
    assert named in said, said
    assert KEY not in said  # a key is never said


def test_the_n8n_database_url_is_where_a_forget_edits_n8ns_records(tmp_path: Path) -> None:
    dsn = "postgresql://n8n:pw@postgres:5432/n8n"
    s = _settings(
        tmp_path,
        n8n_url="http://n8n-main:5678",
        n8n_api_key=SecretStr(KEY),
        n8n_db_url=SecretStr(dsn.replace("postgresql://", "postgresql+psycopg://")),
    )
    store = n8n_execution_store(s, "postgresql://countersign@db/countersign")
    assert isinstance(store, PostgresExecutionStore) and store.dsn == dsn
    assert "pw" not in repr(store)
    # n8n elsewhere without its database: no store (a forget that must redact answers 503)
    remote = _settings(tmp_path, n8n_url="http://n8n-main:5678", n8n_api_key=SecretStr(KEY))
    assert n8n_execution_store(remote, "postgresql://countersign@db/countersign") is None
