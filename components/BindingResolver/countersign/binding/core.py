"""BindingResolver: a plan step ``{uses, call, args}`` + registry -> the n8n node to run.

Pure. The output separates what the registry author wrote (``parameters``: constants, trusted,
placed in the node as they are) from what comes from people or deployments (``data``: each entry
says which node parameter gets which arg / template / setting / formatter). The WorkflowBuilder
feeds ``data`` to the node as JSON values through fixed expressions it writes itself, so person
text never reaches a place where n8n evaluates expressions (BindingResolver SPEC).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, JsonValue

from countersign.kernel import BindingError, Contract, PlanStep
from countersign.registry import Idempotency, ParamSpec, Registry, template_fields

__all__ = ["BoundNode", "DataBinding", "resolve_step", "set_path"]

_SEG = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$", re.ASCII)


class DataBinding(Contract):
    """Where a node parameter's value comes from at run time (never a constant)."""

    kind: Literal["arg", "template", "setting", "fn"]
    name: str | None = None
    template: str | None = None
    fn: str | None = None
    fn_args: dict[str, str] = Field(default_factory=dict)


class BoundNode(Contract):
    """A plan step bound to an n8n node."""

    step: int
    uses: str
    call: str
    node_type: str
    type_version: float
    credential: str | None
    safety: Literal["read", "write"]
    previewable: bool
    gate: bool
    parameters: dict[str, JsonValue]
    data: dict[str, DataBinding]
    settings: list[str]
    idempotency: Idempotency | None


def set_path(target: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a.b[0].c`` in nested dicts/lists, creating what is missing."""
    cur: Any = target
    parts = path.split(".")
    for i, part in enumerate(parts):
        m = _SEG.match(part)
        if m is None:
            raise BindingError(f"bad parameter path {path!r} at {part!r}")
        name, index = m.group(1), m.group(2)
        last = i == len(parts) - 1
        if index is None:
            if last:
                cur[name] = value
            else:
                cur = cur.setdefault(name, {})
            continue
        lst = cur.setdefault(name, [])
        idx = int(index)
        while len(lst) <= idx:
            lst.append({})
        if last:
            lst[idx] = value
        else:
            cur = lst[idx]


def resolve_step(
    step: PlanStep, registry: Registry, *, settings: Mapping[str, str] | None = None
) -> BoundNode:
    """Bind one plan step.

    Args:
        step: the plan step.
        registry: the registry snapshot the plan was made with.
        settings: deployment settings; when given, every ``{@setting}`` the op needs must be
            present.

    Raises:
        BindingError: unknown connector/op, a required arg missing, an arg the op does not
            take, or a setting missing; the message names the step and the binding.
    """
    op = registry.op(step.uses, step.call, step=step.step)
    where = f"step {step.step} ({step.uses}.{step.call})"
    missing = [a for a in op.args.required if a not in step.args]
    if missing:
        raise BindingError(f"{where}: missing required arg(s) {missing}")
    extra = sorted(set(step.args) - op.args.all())
    if extra:
        raise BindingError(f"{where}: arg(s) {extra} are not bound by the registry")
    params: dict[str, Any] = {}
    if op.resource is not None:
        params["resource"] = op.resource
    if op.operation is not None:
        params["operation"] = op.operation
    data: dict[str, DataBinding] = {}
    needed: set[str] = set()
    for path, spec in op.params.items():
        if spec.const is not None:
            set_path(params, path, spec.const)
            continue
        binding = _data_binding(path, spec, step.args, needed, where)
        if binding is not None:
            data[path] = binding
    if settings is not None:
        absent = sorted(needed - set(settings))
        if absent:
            raise BindingError(f"{where}: deployment setting(s) {absent} are not configured")
    return BoundNode(
        step=step.step,
        uses=step.uses,
        call=step.call,
        node_type=op.node.type,
        type_version=op.node.type_version,
        credential=op.node.credential,
        safety=op.safety,
        previewable=op.previewable,
        gate=op.gate,
        parameters=params,
        data=data,
        settings=sorted(needed),
        idempotency=op.idempotency,
    )


def _data_binding(
    path: str, spec: ParamSpec, args: Mapping[str, Any], needed: set[str], where: str
) -> DataBinding | None:
    """Where the value of the node parameter at ``path`` comes from at run time (None: an
    optional arg this step does not set); the deployment settings it reads are added to
    ``needed``."""
    if spec.arg is not None:
        return DataBinding(kind="arg", name=spec.arg) if spec.arg in args else None
    if spec.template is not None:
        for is_setting, name in template_fields(spec.template):
            if is_setting:
                needed.add(name)
            elif name not in args:
                raise BindingError(f"{where}: parameter {path} needs arg {name!r}")
        return DataBinding(kind="template", template=spec.template)
    if spec.setting is not None:
        needed.add(spec.setting)
        return DataBinding(kind="setting", name=spec.setting)
    if spec.fn is not None:
        return DataBinding(kind="fn", fn=spec.fn, fn_args=spec.fn_args)
    return None
