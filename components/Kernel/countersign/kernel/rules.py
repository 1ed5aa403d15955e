"""Gate rules: policy a person can read, evaluated over the canonical plan (GLOBAL_SPEC §9).

A rule names the writes it is about (``op``: a glob over ``<connector>.<call>``), optional tests
on their arguments (``where``: every test must hold), what follows (``then``: ``gate`` — the
write is approved at a gate that says ``because``; ``deny`` — it never runs), and ``because``
(the sentence the card shows). The language is small and total: a test compares one argument
with a constant (``gt``/``ge``/``lt``/``le`` on numbers and amounts, ``eq``/``ne``, ``in``/
``not_in``, ``matches``/``not_matches`` as globs on text), or with a named set of the person's
facts (``in_set``/``not_in_set``, below); no expression is evaluated, nothing is read but the
arguments and the facts the caller gives, every input gives an answer.

Set tests (``in_set: contacts``, ``not_in_set: [contacts, self]``) test an argument against a
named set of the person's facts (``RuleFacts``: set name → normalized strings, e-mail addresses
and calendar ids compared case-insensitively), or the union of several named sets. The caller
gives the facts: the Planner from the plan's inputs (``self``: the plan's user; ``contacts``: the
contacts the evidence names), the executors from the live store at the write (a contact removed
after the approval counts as removed). ``in_set`` holds for a text in the set, or a list whose
every element is a text in the set (the empty list: nobody is outside); anything else (a number,
a missing argument) is not in it. ``not_in_set`` is its exact negation: a list fails it — the rule
applies — as soon as ANY element is outside (one recipient outside the contacts is enough). A set
the caller did not give, or a list element that is still a reference while no known element
decides, makes the test *unknown*, as a reference does (below).

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

import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fnmatch import translate
from functools import cached_property
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

__all__ = [
    "DEFAULT_ON_FAILURE",
    "FAILURE_CLASSES",
    "MAIL_OUTSIDE_CONTACTS",
    "OTHERS_CALENDAR",
    "ArgTest",
    "FailureAction",
    "FailureActions",
    "FailureClass",
    "GateRule",
    "OnFailure",
    "RuleFacts",
    "RuleHit",
    "failure_actions",
    "person_facts",
    "rule_hits",
    "set_names",
]

_NUMERIC = ("gt", "ge", "lt", "le")
#: a named set of the person's facts (``self``, ``contacts``, …)
_SET_NAME = r"^[a-z][a-z0-9_-]{0,31}$"
SetNames = str | list[str]


def norm(value: str) -> str:
    """A fact or an argument as sets compare it: trimmed, case folded (``Bob@X`` is ``bob@x``)."""
    return value.strip().casefold()


@dataclass(frozen=True)
class RuleFacts:
    """The person's facts the set tests read: set name → normalized strings (``of`` builds it).
    A name not here is a set the caller does not know: its tests are unknown."""

    sets: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, sets: Mapping[str, Iterable[str]]) -> RuleFacts:
        """The facts from plain values (each normalized with ``norm``)."""
        return cls(MappingProxyType({k: frozenset(norm(v) for v in vs) for k, vs in sets.items()}))

    def named(self, names: Sequence[str]) -> tuple[frozenset[str], ...] | None:
        """The named sets (their union is what a test reads); None when one was not given."""
        found = [self.sets.get(n) for n in names]
        sets = tuple(f for f in found if f is not None)
        return sets if len(sets) == len(found) else None


def person_facts(user_id: str, contacts: Iterable[str] | None = None) -> RuleFacts:
    """The facts about one person: ``self`` (their own address and calendar: the user id) and,
    when given, ``contacts`` (the e-mail addresses of their address book)."""
    sets: dict[str, Iterable[str]] = {"self": [user_id]}
    if contacts is not None:
        sets["contacts"] = contacts
    return RuleFacts.of(sets)


_NO_FACTS = RuleFacts()


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
    in_set: SetNames | None = None
    not_in_set: SetNames | None = None

    @model_validator(mode="after")
    def _one(self) -> ArgTest:
        given = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"an argument test sets exactly one of gt, ge, lt, le, eq, ne, in, "
                f"not_in, matches, not_matches, in_set, not_in_set (got {given or 'none'})"
            )
        names = self.set_names()
        is_set = self.in_set is not None or self.not_in_set is not None
        if is_set and (not 1 <= len(names) <= 8 or any(not re.match(_SET_NAME, n) for n in names)):
            raise ValueError(
                f"a set test names 1 to 8 sets, each like 'contacts' (got {list(names)})"
            )
        return self

    @cached_property
    def names(self) -> tuple[str, ...]:
        """``set_names()``, computed once (a test is evaluated for every write)."""
        return self.set_names()

    def set_names(self) -> tuple[str, ...]:
        """The sets a set test names (none for a test against constants)."""
        given = self.in_set if self.in_set is not None else self.not_in_set
        if given is None:
            return ()
        return (given,) if isinstance(given, str) else tuple(given)

    def check(self, value: Any, facts: RuleFacts = _NO_FACTS) -> bool | None:
        """Whether ``value`` passes; None when that is unknown (a reference, a set the caller
        did not give)."""
        if _is_ref(value):
            return None
        names = self.names
        if not names:
            return self.holds(value)
        known = facts.named(names)
        if known is None:
            return None
        inside = _all_in(value, known)
        return inside if inside is None or self.in_set is not None else not inside

    def holds(self, value: Any) -> bool:
        """Whether ``value`` (a known argument) passes; a value of the wrong kind does not."""
        return self.predicate(value)

    @cached_property
    def predicate(self) -> Callable[[Any], bool]:
        """``holds`` as one function, chosen once from the field that is set (a test runs for
        every write of every plan: no field is looked up again)."""
        name = next((k for k in _PREDICATES if getattr(self, k) is not None), None)
        if name is None:  # a set test: ``check`` reads the facts, it has no constant to hold
            return _never
        return _PREDICATES[name](getattr(self, name))


class GateRule(_Rule):
    """One rule (module docstring)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    op: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.*?-]+$")
    where: dict[str, ArgTest] = Field(default_factory=dict, max_length=16)
    then: Literal["gate", "deny"]
    because: str = Field(min_length=1, max_length=200)

    @cached_property
    def op_pattern(self) -> Callable[[str], object]:
        """The ``op`` glob, compiled once (``fnmatchcase``'s own translation)."""
        return re.compile(translate(self.op)).match

    def matches(
        self, op: str, args: Mapping[str, Any], facts: RuleFacts = _NO_FACTS
    ) -> bool | None:
        """True when the rule is about this write; None when a test is unknown (an argument
        still a reference until the write runs, a set of facts not given); False otherwise."""
        if not self.op_pattern(op):
            return False
        return self.where_matches(args, facts)

    def where_matches(self, args: Mapping[str, Any], facts: RuleFacts = _NO_FACTS) -> bool | None:
        """``matches`` once the op matched: the tests of ``where`` (all must hold)."""
        unknown = False
        for name, test in self.where.items():
            passed = test.check(args.get(name), facts)
            if passed is False:
                return False
            unknown = unknown or passed is None
        return None if unknown else True


@dataclass(frozen=True, slots=True)
class RuleHit:
    """A rule a write matched (``sure``: on known values)."""

    rule: str
    then: Literal["gate", "deny"]
    because: str
    sure: bool


#: rules → op → the rules whose ``op`` glob matches it (a policy's rules are one tuple for its
#: lifetime: a write's args are tested against those rules only); bounded, kept with the tuple
#: so its id is not reused while cached
_BY_OP: dict[int, tuple[Sequence[GateRule], dict[str, tuple[GateRule, ...]]]] = {}


def _about(rules: Sequence[GateRule], op: str) -> tuple[GateRule, ...]:
    """The rules whose ``op`` glob matches ``op``, in order (cached per tuple of rules: a
    policy's; a list may change in place and is read each time)."""
    if not isinstance(rules, tuple):
        return tuple(r for r in rules if r.op_pattern(op))
    held = _BY_OP.get(id(rules))
    if held is None or held[0] is not rules:
        if len(_BY_OP) >= 64:
            _BY_OP.clear()
        held = (rules, {})
        _BY_OP[id(rules)] = held
    found = held[1].get(op)
    if found is None:
        found = tuple(r for r in rules if r.op_pattern(op))
        if len(held[1]) < 1024:
            held[1][op] = found
    return found


def rule_hits(
    rules: Sequence[GateRule],
    op: str,
    args: Mapping[str, Any],
    facts: RuleFacts | None = None,
) -> list[RuleHit]:
    """The rules that are about the write ``op`` with ``args`` (the person's ``facts`` for the
    set tests; None: no set is known), in the policy's order."""
    out: list[RuleHit] = []
    for r in _about(rules, op):
        m = r.where_matches(args, facts or _NO_FACTS)
        if m is not False:
            out.append(RuleHit(r.id, r.then, r.because, m is True))
    return out


#: a rule form over the person's facts, ready for a policy's ``rules`` (GLOBAL_SPEC §9): a mail to
#: anyone outside the contacts (and not to oneself) needs the gate to say so. Not a default rule
#: (it would add a reason to the use cases' gates)
MAIL_OUTSIDE_CONTACTS = GateRule.model_validate(
    {
        "id": "mail-outside-contacts",
        "op": "*.send",
        "where": {"to": {"not_in_set": ["contacts", "self"]}},
        "then": "gate",
        "because": "a recipient is not in your contacts",
    }
)
#: the same for a write in a calendar that is not the person's own (its owner's consent, a second
#: approver, is not asked: the gate is the person's)
OTHERS_CALENDAR = GateRule.model_validate(
    {
        "id": "others-calendar",
        "op": "*.create_event",
        "where": {"user": {"not_in_set": "self"}},
        "then": "gate",
        "because": "it writes in someone else's calendar",
    }
)


def set_names(rules: Sequence[GateRule]) -> frozenset[str]:
    """Every set the rules' tests name (a caller reads only the facts the policy needs)."""
    return frozenset(n for r in rules for t in r.where.values() for n in t.set_names())


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and "$ref" in value


def _in(value: str, known: tuple[frozenset[str], ...]) -> bool:
    v = norm(value)
    return any(v in k for k in known)


def _all_in(value: Any, known: tuple[frozenset[str], ...]) -> bool | None:
    """A text in one of the ``known`` sets, or a list of texts each in one: True; a non-text, or
    one element known to be outside: False; else (an element still a reference) None."""
    if isinstance(value, str):
        return _in(value, known)
    if not isinstance(value, list):
        return False
    unknown = False
    for v in value:
        if _is_ref(v):
            unknown = True
        elif not (isinstance(v, str) and _in(v, known)):
            return False
    return None if unknown else True


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


_COMPARE: dict[str, Callable[[Decimal, Decimal], bool]] = {
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
}


def _numeric(compare: Callable[[Decimal, Decimal], bool], limit: Decimal, value: Any) -> bool:
    n = _number(value)
    return n is not None and compare(n, limit)


def _never(value: Any) -> bool:
    return False


def _not_member(items: list[Any], value: Any) -> bool:
    return value not in items


def _glob(match: Callable[[str], object], inside: bool, value: Any) -> bool:
    """``matches`` (``inside``) or ``not_matches``: ``fnmatchcase`` on text, compiled once."""
    hit = isinstance(value, str) and match(value) is not None
    return hit if inside else not hit


def _globbed(inside: bool) -> Callable[[str], Callable[[Any], bool]]:
    return lambda glob: functools.partial(_glob, re.compile(translate(glob)).match, inside)


#: an ``ArgTest`` field → the predicate its value makes (``ArgTest.predicate``)
_PREDICATES: dict[str, Callable[[Any], Callable[[Any], bool]]] = {
    **{k: functools.partial(functools.partial, _numeric, f) for k, f in _COMPARE.items()},
    "in_": lambda items: items.__contains__,
    "not_in": lambda items: functools.partial(_not_member, items),
    "matches": _globbed(True),
    "not_matches": _globbed(False),
    "eq": lambda v: functools.partial(operator.eq, v),
    "ne": lambda v: functools.partial(operator.ne, v),
}


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
