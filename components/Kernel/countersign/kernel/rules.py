"""Gate rules: policy a person can read, evaluated over the canonical plan (GLOBAL_SPEC §9).

A rule names the writes it is about (``op``: a glob over ``<connector>.<call>``), optional tests
on their arguments (``where``: every test must hold), what follows (``then``: ``gate`` — the
write is approved at a gate that says ``because``; ``deny`` — it never runs), and ``because``
(the sentence the card shows). The language is small and total: a test compares one argument
with a constant (``gt``/``ge``/``lt``/``le`` on numbers and amounts, ``eq``/``ne``, ``in``/
``not_in``, ``matches``/``not_matches`` as globs on text); no expression is evaluated, nothing
is read but the arguments, every input gives an answer.

An argument that is still a reference (``{"$ref": …}``: a gate's choice, an earlier step's
output) is *unknown* at planning: a ``gate`` rule then applies (the safe side: one reason too
many on a gate), a ``deny`` rule waits for the value, which the executor has. The Planner puts
every ``gate`` rule a write matches on the gate that guards it (its ``because``), refuses a plan
with a write a ``deny`` rule matches; the executors evaluate the rules again on the arguments as
sent, and refuse a write a rule denies or gates when its gate does not name that rule.

Failure actions (issue 26 §3, GLOBAL_SPEC §9a): what follows a failed step of each failure class
(``steps.failures`` classifies the connector's answer) — ``retry`` with a capped backoff (only
where the ledger says nothing happened), ``replan`` (a new revision, a new approval),
``compensate`` (undo what was written, stop) or ``ask`` (the person, with the reason). A table of
data like the rules: ``FailureActions``; a class it does not name is ``ask``; an outcome that is
unknown is never retried (the table refuses it: at most once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

__all__ = [
    "DEFAULT_ON_FAILURE",
    "FAILURE_CLASSES",
    "ArgTest",
    "FailureAction",
    "FailureActions",
    "FailureClass",
    "GateRule",
    "OnFailure",
    "RuleHit",
    "failure_actions",
    "rule_hits",
]

_NUMERIC = ("gt", "ge", "lt", "le")


class _Rule(BaseModel):
    """The contracts' settings (frozen, unknown fields refused), written by alias (``in``)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True
    )


class ArgTest(_Rule):
    """One test of one argument; exactly one field is set."""

    gt: Decimal | None = None
    ge: Decimal | None = None
    lt: Decimal | None = None
    le: Decimal | None = None
    eq: JsonValue = None
    ne: JsonValue = None
    in_: list[JsonValue] | None = Field(default=None, alias="in", max_length=200)
    not_in: list[JsonValue] | None = Field(default=None, max_length=200)
    matches: str | None = Field(default=None, max_length=200)
    not_matches: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _one(self) -> ArgTest:
        given = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"an argument test sets exactly one of gt, ge, lt, le, eq, ne, in, "
                f"not_in, matches, not_matches (got {given or 'none'})"
            )
        return self

    def holds(self, value: Any) -> bool:
        """Whether ``value`` (a known argument) passes; a value of the wrong kind does not."""
        for name in _NUMERIC:
            limit = getattr(self, name)
            if limit is not None:
                n = _number(value)
                return n is not None and _compare(name, n, limit)
        if self.in_ is not None:
            return value in self.in_
        if self.not_in is not None:
            return value not in self.not_in
        if self.matches is not None:
            return isinstance(value, str) and fnmatchcase(value, self.matches)
        if self.not_matches is not None:
            return not (isinstance(value, str) and fnmatchcase(value, self.not_matches))
        return bool(value == self.eq) if self.eq is not None else bool(value != self.ne)


class GateRule(_Rule):
    """One rule (module docstring)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    op: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.*?-]+$")
    where: dict[str, ArgTest] = Field(default_factory=dict, max_length=16)
    then: Literal["gate", "deny"]
    because: str = Field(min_length=1, max_length=200)

    def matches(self, op: str, args: Mapping[str, Any]) -> bool | None:
        """True when the rule is about this write; None when an argument it tests is still a
        reference (unknown until the write runs); False otherwise."""
        if not fnmatchcase(op, self.op):
            return False
        unknown = False
        for name, test in self.where.items():
            value = args.get(name)
            if isinstance(value, Mapping) and "$ref" in value:
                unknown = True
                continue
            if not test.holds(value):
                return False
        return None if unknown else True


class RuleHit(_Rule):
    """A rule a write matched (``sure``: on known values)."""

    rule: str
    then: Literal["gate", "deny"]
    because: str
    sure: bool


def rule_hits(rules: Sequence[GateRule], op: str, args: Mapping[str, Any]) -> list[RuleHit]:
    """The rules that are about the write ``op`` with ``args``, in the policy's order."""
    out: list[RuleHit] = []
    for r in rules:
        m = r.matches(op, args)
        if m is not False:
            out.append(RuleHit(rule=r.id, then=r.then, because=r.because, sure=m is True))
    return out


def _number(value: Any) -> Decimal | None:
    """A number, an amount (``{"amount": "120.00", "currency": …}``) or numeric text."""
    if isinstance(value, Mapping):
        value = value.get("amount")
    if isinstance(value, bool) or value is None:
        return None
    try:
        n = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return n if n.is_finite() else None


def _compare(name: str, n: Decimal, limit: Decimal) -> bool:
    return {"gt": n > limit, "ge": n >= limit, "lt": n < limit, "le": n <= limit}[name]


# ---- failure actions ---------------------------------------------------------------------------

FailureClass = Literal[
    "transient",
    "rate_limited",
    "auth",
    "conflict",
    "validation",
    "stale",
    "unknown_outcome",
    "provider_down",
]
#: every failure class, in the order the table and the docs list them
FAILURE_CLASSES: tuple[FailureClass, ...] = (
    "transient",
    "rate_limited",
    "auth",
    "conflict",
    "validation",
    "stale",
    "unknown_outcome",
    "provider_down",
)
FailureAction = Literal["retry", "replan", "compensate", "ask"]


class OnFailure(_Rule):
    """What follows a failure of one class. ``retry``: at most ``attempts`` sends in all (the
    first included), waiting ``backoff_s`` doubled each time (or the provider's Retry-After),
    never longer than ``max_wait_s`` — a provider that asks for longer is asked about instead."""

    then: FailureAction
    attempts: int = Field(default=3, ge=1, le=10)
    backoff_s: float = Field(default=0.5, ge=0.0, le=60.0)
    max_wait_s: float = Field(default=8.0, ge=0.0, le=300.0)

    def wait_s(self, sent: int, retry_after_s: float | None) -> float | None:
        """How long to wait before send number ``sent + 1``; None: do not send again (not a
        retry, attempts used up, or the provider asks for longer than ``max_wait_s``)."""
        if self.then != "retry" or sent >= self.attempts:
            return None
        if retry_after_s is not None:
            return float(retry_after_s) if 0 <= retry_after_s <= self.max_wait_s else None
        return min(self.backoff_s * 2.0 ** (sent - 1), self.max_wait_s)


class FailureActions(_Rule):
    """The failure table: class → ``OnFailure`` (a class not named: ``ask``)."""

    classes: dict[FailureClass, OnFailure] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _at_most_once(self) -> FailureActions:
        held = self.classes.get("unknown_outcome")
        if held is not None and held.then == "retry":
            raise ValueError(
                "unknown_outcome cannot be retried: the write may have happened (at most once); "
                "use ask (a person or the reconciler settles it) or compensate"
            )
        return self

    def action(self, cls: FailureClass) -> OnFailure:
        """What follows a failure of ``cls``."""
        return self.classes.get(cls) or OnFailure(then="ask")


#: the table a policy has unless it says otherwise
DEFAULT_ON_FAILURE = FailureActions.model_validate(
    {
        "classes": {
            "transient": {"then": "retry", "attempts": 3, "backoff_s": 0.5, "max_wait_s": 4},
            "provider_down": {"then": "retry", "attempts": 3, "backoff_s": 1, "max_wait_s": 4},
            "rate_limited": {"then": "retry", "attempts": 3, "backoff_s": 1, "max_wait_s": 10},
            "conflict": {"then": "replan"},
            "stale": {"then": "replan"},
            "auth": {"then": "ask"},
            "validation": {"then": "ask"},
            "unknown_outcome": {"then": "ask"},
        }
    }
)


def failure_actions(policy: object) -> FailureActions:
    """The failure table of ``policy`` (its ``on_failure``), or the default one."""
    table = getattr(policy, "on_failure", None)
    return table if isinstance(table, FailureActions) else DEFAULT_ON_FAILURE
