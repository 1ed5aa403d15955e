"""JSON Schema snapshots of a component's public models (``components/<Name>/schemas/``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

__all__ = ["schema_snapshot"]


def schema_snapshot(models: Sequence[type[BaseModel]], folder: Path, *, update: bool) -> list[str]:
    """Compare (or, with ``update``, rewrite) ``<folder>/<Model>.json`` for each model.

    Returns:
        The names of the files that differ from the models (empty when all match).
    """
    folder.mkdir(parents=True, exist_ok=True)
    stale: list[str] = []
    for model in models:
        text = json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
        path = folder / f"{model.__name__}.json"
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            if update:
                path.write_text(text, encoding="utf-8")
            else:
                stale.append(path.name)
    return stale
