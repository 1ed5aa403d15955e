"""The JSON Schemas in schemas/ match the public request models."""

from __future__ import annotations

import os
from pathlib import Path

from countersign.contextrag import ForgetRequest, MemoryWrite, PrefsUpdate
from countersign.kernel import schema_snapshot


def test_json_schemas_are_current() -> None:
    folder = Path(__file__).resolve().parents[1] / "schemas"
    stale = schema_snapshot(
        [MemoryWrite, PrefsUpdate, ForgetRequest],
        folder,
        update=os.environ.get("COUNTERSIGN_UPDATE_SCHEMAS") == "1",
    )
    assert not stale, f"schemas out of date: {stale}; rerun with COUNTERSIGN_UPDATE_SCHEMAS=1"
