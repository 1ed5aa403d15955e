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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

__all__ = ["ArgTest", "GateRule", "RuleHit", "rule_hits"]

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
