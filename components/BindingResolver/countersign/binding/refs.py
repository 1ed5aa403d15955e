"""Resolve the planner's references inside step args, given what earlier steps and gates yielded.

``{"$ref": "steps.3.output.slots"}`` → the normalized output of step 3, field ``slots``;
``{"$ref": "gates.gate-A.choice.start"}`` → field ``start`` of what the person chose at gate-A.
Pure. A missing step output or choice, or a path that does not exist, is a BindingError that
names the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from countersign.kernel import BindingError, ascii_digits

__all__ = ["referenced_steps", "resolve_refs"]


def _walk(value: Any, path: list[str], ref: str) -> Any:
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and ascii_digits(part) and int(part) < len(value):
            value = value[int(part)]
        else:
            raise BindingError(f"reference {ref!r}: no {part!r} in the value it points to")
    return value


def _one(ref: str, outputs: Mapping[int, Any], choices: Mapping[str, Any]) -> Any:
    parts = ref.split(".")
    if len(parts) >= 3 and parts[0] == "steps" and ascii_digits(parts[1]) and parts[2] == "output":
        n = int(parts[1])
        if n not in outputs:
            raise BindingError(f"reference {ref!r}: step {n} has no output yet")
        return _walk(outputs[n], parts[3:], ref)
    if len(parts) >= 3 and parts[0] == "gates" and parts[2] == "choice":
        if parts[1] not in choices:
            raise BindingError(f"reference {ref!r}: no choice was recorded at {parts[1]}")
        return _walk(choices[parts[1]], parts[3:], ref)
    raise BindingError(f"reference {ref!r} is not steps.<n>.output… or gates.<gate>.choice…")


def resolve_refs(value: Any, outputs: Mapping[int, Any], choices: Mapping[str, Any]) -> Any:
    """``value`` with every ``{"$ref": ...}`` replaced by what it points to."""
    if isinstance(value, Mapping):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            return _one(value["$ref"], outputs, choices)
        return {k: resolve_refs(v, outputs, choices) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, outputs, choices) for v in value]
    return value


def referenced_steps(value: Any) -> set[int]:
    """Step numbers whose outputs ``value`` refers to."""
    if isinstance(value, Mapping):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            parts = value["$ref"].split(".")
            return {int(parts[1])} if parts[0] == "steps" and ascii_digits(parts[1]) else set()
        return set().union(*(referenced_steps(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(referenced_steps(v) for v in value)) if value else set()
    return set()
