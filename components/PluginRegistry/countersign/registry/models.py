"""Registry contracts: connectors (ops bound to n8n nodes) and the intents the planner can plan.

Every file under ``registry/`` is one of these, validated here. Cross-file rules (an intent step
names an op that exists, a compensation names a write of the same connector, ...) live in
``loader.py``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, JsonValue, field_validator, model_validator

from countersign.kernel import Contract, StepMode, StepRole

__all__ = [
    "ArgSpec",
    "Compensation",
    "Connector",
    "EntitySpec",
    "Idempotency",
    "IntentSpec",
    "NodeBinding",
    "Offers",
    "Operation",
    "ParamSpec",
    "StepTemplate",
    "template_fields",
]

_ID = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"
_FIELD = re.compile(r"\{(@?)([a-z][a-z0-9_.]*)\}")


def template_fields(template: str) -> list[tuple[bool, str]]:
    """The ``{arg}`` / ``{@setting}`` placeholders of a template, as ``(is_setting, name)``."""
    return [(m.group(1) == "@", m.group(2)) for m in _FIELD.finditer(template)]


class NodeBinding(Contract):
    """The n8n node an op runs as."""

    type: str = Field(pattern=r"^[A-Za-z0-9@/_.-]+$")
    type_version: float = Field(ge=1)
    credential: str | None = None


class ParamSpec(Contract):
    """Where one n8n node parameter gets its value from. Exactly one source is set.

    - ``const``: a literal written by the registry author (trusted; may be an n8n expression).
    - ``arg``: the plan step's argument of that name (person-supplied data, never evaluated).
    - ``template``: text with ``{arg}`` and ``{@setting}`` placeholders, filled with data.
    - ``setting``: a deployment setting (a base URL, a sender address), filled at run time.
    - ``fn``: a built-in pure formatter (e.g. ``ics_event``) over the named args.
    """

    const: JsonValue = None
    arg: str | None = None
    template: str | None = None
    setting: str | None = None
    fn: Literal["caldav_query", "ics_event", "ics_invite", "json_body", "mail_text"] | None = None
    fn_args: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> ParamSpec:
        given = [
            n
            for n, v in (
                ("const", self.const),
                ("arg", self.arg),
                ("template", self.template),
                ("setting", self.setting),
                ("fn", self.fn),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"exactly one of const/arg/template/setting/fn must be set (got {given or 'none'})"
            )
        if self.fn_args and self.fn is None:
            raise ValueError("fn_args given without fn")
        return self

    def arg_names(self) -> set[str]:
        """Plan args this parameter reads."""
        if self.arg is not None:
            return {self.arg}
        if self.template is not None:
            return {n for s, n in template_fields(self.template) if not s}
        if self.fn is not None:
            return set(self.fn_args.values())
        return set()


class ArgSpec(Contract):
    """Which plan args an op takes."""

    required: list[str] = Field(default_factory=list)
    optional: list[str] = Field(default_factory=list)

    def all(self) -> set[str]:
        """Every accepted arg name."""
        return {*self.required, *self.optional}


class Idempotency(Contract):
    """How the idempotency key (``plan_id:step:arg_hash``) reaches the provider.

    - ``ledger``: the provider has no key; only Countersign's ledger prevents a second call.
    - ``header``: sent as the HTTP header ``field``.
    - ``natural_key``: a provider-side unique id derived from the key goes into param ``field``
      (e.g. a CalDAV event UID with ``If-None-Match: *``), so a replay is refused by the provider.
    """

    via: Literal["ledger", "header", "natural_key"]
    field: str | None = None

    @model_validator(mode="after")
    def _field(self) -> Idempotency:
        if self.via != "ledger" and not self.field:
            raise ValueError(f"idempotency via {self.via!r} needs 'field'")
        return self


class Compensation(Contract):
    """The op that undoes a write, and where its args come from.

    ``args`` maps the compensating op's arg to ``args.<name>`` (the original step's args) or
    ``result.id`` / ``result.link`` (the original write's Execute wrapper).
    """

    call: str = Field(pattern=_ID)
    args: dict[str, str] = Field(default_factory=dict)

    @field_validator("args")
    @classmethod
    def _sources(cls, v: dict[str, str]) -> dict[str, str]:
        for k, src in v.items():
            if not (src.startswith("args.") or src in {"result.id", "result.link"}):
                raise ValueError(f"{k}: source must be 'args.<name>', 'result.id' or 'result.link'")
        return v


class Budget(Contract):
    """A spending limit a write enforces before its gate is approved and again before it runs.

    ``arg`` names the op's own (signed) argument that holds the limit, e.g. ``max_total``;
    ``total`` names the field, in the outputs of the plan's earlier writes, that reports what
    would be charged now (the latest one counts), e.g. the cart's ``cart_total``.
    """

    arg: str = Field(pattern=_ID)
    total: str = Field(pattern=_ID)


class Offers(Contract):
    """What a read op's output offers a person to choose from at the gate after it (GLOBAL_SPEC
    §8, "the choice at a gate"): the only choices that gate's approval accepts.

    - ``kind: option`` — the choice is one of the offers, projected through ``pick`` (choice path
      → offer field): ``pick: {item: item}`` makes ``{"item": <offer.item>}``, ``pick: {slot.id:
      id}`` makes ``{"slot": {"id": <offer.id>}}``.
    - ``kind: range`` — each offer is a free stretch ``{start, end}``; the choice is
      ``{"start", "end"}`` inside one stretch, exactly ``duration_arg`` minutes long (the op's own
      signed argument), inside the ``window`` args when given, and not in the past.
    """

    kind: Literal["option", "range"]
    #: the field of the op's output that lists the offers
    list: str = Field(pattern=_ID)
    pick: dict[str, str] = Field(default_factory=dict)
    duration_arg: str | None = Field(default=None, pattern=_ID)
    window: tuple[str, str] | None = None

    @model_validator(mode="after")
    def _complete(self) -> Offers:
        if self.kind == "option" and not self.pick:
            raise ValueError("an 'option' offer must say what the choice picks ('pick')")
        if self.kind == "range" and (self.duration_arg is None or self.pick):
            raise ValueError("a 'range' offer names its 'duration_arg' and picks nothing")
        for path, fld in self.pick.items():
            if not re.fullmatch(_ID, path) or not re.fullmatch(_ID, fld):
                raise ValueError(f"pick {path!r}: {fld!r} must be dotted lower-case names")
        return self

    def arg_names(self) -> set[str]:
        """The op args this declaration reads."""
        return {a for a in (self.duration_arg, *(self.window or ())) if a is not None}


class Operation(Contract):
    """One logical operation of a connector, bound to an n8n node."""

    description: str = ""
    node: NodeBinding
    resource: str | None = None
    operation: str | None = None
    safety: Literal["read", "write"]
    previewable: bool
    gate: bool = False
    role: StepRole
    mode: StepMode = "interactive"
    scopes: list[str] = Field(default_factory=list)
    args: ArgSpec = Field(default_factory=ArgSpec)
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    idempotency: Idempotency | None = None
    compensation: Compensation | None = None
    lock: str | None = None
    #: a write its provider can be asked about afterwards — by its natural key or its
    #: idempotency key, a read, never a re-send (ExecuteOrchestrator's probes) — in every
    #: deployment, not only the sandbox; its workflow then saves no progress in n8n
    #: (WorkflowBuilder SPEC "What n8n keeps")
    probe: bool = False
    #: a spending limit checked before the gate is approved and before the write runs
    budget: Budget | None = None
    #: what a read's output offers the person at the gate after it (the valid choices)
    offers: Offers | None = None
    #: How the orchestrator turns the node's raw output into the step's normalized output:
    #: ``json`` (the HTTP body parsed as JSON, or the node's item), ``text`` (the body as a
    #: string), ``ics_busy`` (busy intervals from an iCalendar body), ``status`` (status code
    #: only).
    output: Literal["json", "text", "ics_busy", "status"] = "json"

    @model_validator(mode="after")
    def _safety_rules(self) -> Operation:
        self._check_safety()
        self._check_declared_reads()
        return self

    def _check_safety(self) -> None:
        """A write is never previewable, declares its idempotency and scopes; only a write has a
        compensation; a gate op does not write."""
        if self.safety == "write":
            if self.previewable:
                raise ValueError("a write op cannot be previewable")
            if self.idempotency is None:
                raise ValueError("a write op must declare 'idempotency'")
            if not self.scopes:
                raise ValueError("a write op must declare the 'scopes' it needs")
        elif self.compensation is not None:
            raise ValueError("only write ops have a compensation")
        if self.gate and self.safety != "read":
            raise ValueError("a gate op is not itself a write")
        if self.probe and self.safety != "write":
            raise ValueError("only a write op is probed")

    def _check_declared_reads(self) -> None:
        """Params, budget, offers and lock read only declared args (and only a write has a
        budget)."""
        accepted = self.args.all()
        for path, spec in self.params.items():
            missing = spec.arg_names() - accepted
            if missing:
                raise ValueError(f"params.{path} reads undeclared arg(s) {sorted(missing)}")
        if self.budget is not None:
            if self.safety != "write":
                raise ValueError("only write ops have a budget")
            if self.budget.arg not in accepted:
                raise ValueError(f"budget.arg reads undeclared arg {self.budget.arg!r}")
        if self.offers is not None and self.offers.arg_names() - accepted:
            raise ValueError(
                f"offers reads undeclared arg(s) {sorted(self.offers.arg_names() - accepted)}"
            )
        if self.lock is not None:
            missing = {n for s, n in template_fields(self.lock) if not s} - accepted
            if missing:
                raise ValueError(f"lock reads undeclared arg(s) {sorted(missing)}")


class Connector(Contract):
    """A registry file under ``registry/connectors/``: one provider, its ops."""

    id: str = Field(pattern=_ID)
    title: str
    description: str = ""
    sandbox: bool = False
    ops: dict[str, Operation] = Field(min_length=1)

    @field_validator("ops")
    @classmethod
    def _op_names(cls, v: dict[str, Operation]) -> dict[str, Operation]:
        for name in v:
            if not re.match(_ID, name):
                raise ValueError(f"op name {name!r} must match {_ID}")
        return v


class EntitySpec(Contract):
    """One entity an intent takes."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    type: Literal["string", "integer", "number", "boolean", "datetime", "email", "list"]
    question: str
    default: JsonValue = None
    #: an amount's currency (ISO 4217), for an amount entity: Intake reads an amount written in
    #: another currency as a question, never converting it (Intake SPEC, "Amounts")
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$")


class StepTemplate(Contract):
    """One step of an intent's plan, before expansion.

    ``args`` values may be ``"$entities.<name>"``, ``"$item"`` (the ``foreach`` element),
    ``"$intent.user_id"``, ``"$intent.tz"``, ``"$policy.watcher.<field>"``, references
    ``{"$ref": "steps.<template id>"}`` / ``{"$ref": "gate.choice"}``, or literals.
    ``uses`` may be ``"@<capability>"``: the provider the Policy names for that capability.
    """

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    uses: str
    call: str = Field(pattern=_ID)
    role: StepRole | None = None
    mode: StepMode | None = None
    foreach: str | None = None
    args: dict[str, JsonValue] = Field(default_factory=dict)
    after: list[str] = Field(default_factory=list)
    group: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    #: the step is planned only when each named entity is given and not ``false``
    when: str | list[str] | None = None

    def conditions(self) -> list[str]:
        """The entities ``when`` names (none: always planned)."""
        if self.when is None:
            return []
        return [self.when] if isinstance(self.when, str) else list(self.when)


class IntentSpec(Contract):
    """A registry file under ``registry/intents/``: an intent the planner can plan."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str
    description: str = ""
    required: list[EntitySpec] = Field(default_factory=list)
    optional: list[EntitySpec] = Field(default_factory=list)
    steps: list[StepTemplate] = Field(min_length=1)
    examples: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _internal(self) -> IntentSpec:
        names = [e.name for e in (*self.required, *self.optional)]
        if len(names) != len(set(names)):
            raise ValueError("entity names must be unique")
        seen: set[str] = set()
        for i, t in enumerate(self.steps):
            if t.id in seen:
                raise ValueError(f"steps[{i}].id {t.id!r} is used twice")
            for dep in t.after:
                if dep not in seen:
                    raise ValueError(f"steps[{i}].after names {dep!r}, not an earlier step")
            if t.foreach is not None and t.foreach not in names:
                raise ValueError(f"steps[{i}].foreach names unknown entity {t.foreach!r}")
            for w in t.conditions():
                if w not in names:
                    raise ValueError(f"steps[{i}].when names unknown entity {w!r}")
            seen.add(t.id)
        return self
