"""The JSON Schema in schemas/ matches the public model of a normalized outcome fact."""

from __future__ import annotations

import os
from pathlib import Path

from countersign.kernel import schema_snapshot
from countersign.planwriter import OutcomeFact


def test_json_schemas_are_current() -> None:
    folder = Path(__file__).resolve().parents[1] / "schemas"
    stale = schema_snapshot(
        [OutcomeFact], folder, update=os.environ.get("COUNTERSIGN_UPDATE_SCHEMAS") == "1"
    )
    assert not stale, f"schemas out of date: {stale}; rerun with COUNTERSIGN_UPDATE_SCHEMAS=1"
