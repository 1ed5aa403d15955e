"""The one wall clock. Stores and cores take a ``Clock`` as a required argument; only composition
roots (the CLI, the API's stack, the Temporal worker, test fixtures) pass ``system_clock``, so a
test that wants to set the time can set it everywhere."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "system_clock"]

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """Now, in UTC."""
    return datetime.now(UTC)
