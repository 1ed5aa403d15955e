"""The chaos suite's time limit grows with its runs: the bounded run in the normal suite keeps the
project's 300 s limit, a long run (``COUNTERSIGN_CHAOS_RUNS``) gets 150 s more per run, so it is
not cut at the fifth run (a run on this 2-core machine takes 45–70 s under load)."""

from __future__ import annotations

import os

import pytest

RUNS = int(os.environ.get("COUNTERSIGN_CHAOS_RUNS", "1"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in item.nodeid and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(300 + 150 * max(RUNS - 1, 0)))
