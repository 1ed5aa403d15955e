"""Which resources writes lock (StepRunner SPEC, resource locks; held by both runtimes).

Each write op may declare a ``lock`` template in the registry (``calendar:{user}``,
``shop:cart``, ``visa:{consulate}``); a write step's key is that template filled with the step's
arguments as they will be sent (references resolved from what was read and chosen). A placeholder
whose argument is not a plain value locks the whole resource kind (``calendar:*``): coarser is
never wrong, only slower. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from countersign.binding import resolve_refs
from countersign.kernel import CountersignError, Plan
from countersign.registry import Registry, template_fields

__all__ = ["lock_keys", "step_lock_key"]


def _filled(template: str, args: Mapping[str, Any]) -> str:
    out = template
    for is_setting, name in template_fields(template):
        value = None if is_setting else args.get(name)
        plain = isinstance(value, str | int) and not isinstance(value, bool)
        shown = str(value) if plain and str(value) else "*"
        out = out.replace("{" + ("@" if is_setting else "") + name + "}", shown)
    return out


def step_lock_key(template: str | None, args: Mapping[str, Any]) -> str | None:
    """The key ``template`` names for a write sent with ``args`` (None: the op locks nothing)."""
    return None if template is None else _filled(template, args)


def lock_keys(
    plan: Plan,
    steps: Iterable[int],
    registry: Registry,
    outputs: Mapping[int, Any],
    choices: Mapping[str, Any],
) -> list[str]:
    """The sorted, distinct keys the write steps ``steps`` of ``plan`` lock."""
    keys: set[str] = set()
    for n in steps:
        step = plan.step(n)
        op = registry.op(step.uses, step.call, step=n)
        try:
            args = resolve_refs(step.args, outputs, choices)
        except CountersignError:
            args = dict(step.args)  # an unresolved reference locks the whole kind
        key = step_lock_key(op.lock, args if isinstance(args, Mapping) else {})
        if key is not None:
            keys.add(key)
    return sorted(keys)
