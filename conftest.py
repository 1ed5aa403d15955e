"""Repository-wide pytest plugins: session fixtures for the real servers (Postgres, n8n, ...)."""

pytest_plugins: list[str] = [
    "countersign.planner.testing",
    "countersign.n8n.testing",
    "countersign.n8n.providers",
    "countersign.storage.testing",
    "countersign.api.testing",
]
