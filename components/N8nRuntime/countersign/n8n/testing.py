"""Pytest plugin: one real n8n for the whole test run (installed in the cache on first use)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from countersign.kernel import Settings

from .runtime import N8nHandle, install, start, stop

__all__ = ["n8n"]


@pytest.fixture(scope="session")
def n8n(tmp_path_factory: pytest.TempPathFactory) -> Iterator[N8nHandle]:
    """A started, bootstrapped n8n on a free loopback port with a fresh data folder."""
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    inst = install(cache)
    data = tmp_path_factory.mktemp("n8n-data")
    handle = start(inst, data)
    try:
        yield handle
    finally:
        stop(data)
