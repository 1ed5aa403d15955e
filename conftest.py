"""Repository-wide pytest plugins: session fixtures for the real servers (Postgres, n8n, ...),
and the ``slow`` mark for every test that uses one."""

import pytest

pytest_plugins: list[str] = [
    "countersign.planner.testing",
    "countersign.n8n.testing",
    "countersign.sandbox.testing",
    "countersign.storage.testing",
    "countersign.api.testing",
]

#: fixtures that start or use a real server: a test that asks for one is marked ``slow``
_SERVER_FIXTURES = {
    "pg_url",
    "db",
    "n8n",
    "radicale",
    "smtp_server",
    "api",
    "sandbox",
    "shop_sandbox",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a real server ``slow`` (``make test`` still runs them all)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        temporal = "DurableOrchestrator" in str(item.path)  # time-skipping or dev servers
        if names & _SERVER_FIXTURES or temporal:
            item.add_marker(pytest.mark.slow)
