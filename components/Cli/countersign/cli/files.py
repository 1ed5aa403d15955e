"""How the CLI reads a person's files: strictly, by suffix (Cli LLD). Light on purpose: the
Signer's ``verify`` reads through it without loading the planner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from countersign.kernel import InputError, loads_strict, loads_yaml_strict

__all__ = ["read_document"]


def read_document(path: Path) -> Any:
    """Read a JSON (or YAML, by suffix) file strictly; InputError naming the file on any problem.

    Strict (``countersign.kernel.loads_strict``): UTF-8 only, no duplicate keys, bounded depth,
    so a plan, intent or policy has one reading and a bad file ends in one line, never a traceback.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    if path.suffix in {".yaml", ".yml"}:
        return loads_yaml_strict(data, what=str(path))
    return loads_strict(data, what=str(path))
