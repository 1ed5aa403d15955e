"""The JSON Schemas in schemas/ match the public models."""

from __future__ import annotations

import os
from pathlib import Path

from countersign.kernel import schema_snapshot
from countersign.registry import Connector, IntentSpec


def test_json_schemas_are_current() -> None:
    folder = Path(__file__).resolve().parents[1] / "schemas"
    update = os.environ.get("COUNTERSIGN_UPDATE_SCHEMAS") == "1"
    stale = schema_snapshot([Connector, IntentSpec], folder, update=update)
    assert not stale, f"schemas out of date: {stale}; rerun with COUNTERSIGN_UPDATE_SCHEMAS=1"
