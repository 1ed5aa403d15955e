"""The Planner: a pure function of (Intent, Evidence, Registry snapshot, Policy) -> Plan | Needs.

No clock, no randomness, no I/O (Planner SPEC). ``plan_id`` is a ULID whose time is the
intent's ``received_at`` and whose randomness is the hash of the whole input tuple;
``meta.created_at`` is ``received_at``. Evidence is treated as a set (its order does not matter).

Steps (Planner LLD §1–4):
1. resolve entities (``entities.py``): given, else a confident preference from evidence, else
   the spec's default; missing required ones become ``needs[]``;
2. expand the intent's step templates (``foreach`` fans a template out into parallel steps,
   ``when`` drops a step whose entity is absent, ``@capability`` picks the Policy's provider);
3. group writes and insert one gate (``system.approval.confirm``) before each write group;
4. order the DAG topologically (stable), number the steps, resolve ``$ref`` and ``$step``
   placeholders, label ``dry_run``, compute scopes and TTL;
5. the policy's gate rules (``kernel.rules``): each gate says ``because`` — every ``gate`` rule a
   write it guards matches (a reference counts as a match) — and a write a ``deny`` rule
   matches on known values is no plan (``PlanningError`` naming the rule); the set tests read
   the person's facts from the plan's inputs (``facts.plan_facts``: ``self``, the contacts the
   evidence names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from pydantic import JsonValue

from countersign.kernel import (
    Evidence,
    Intent,
    Needs,
    Plan,
    PlanConstraints,
    PlanMeta,
    PlanningError,
    PlanStep,
    Policy,
    StepMode,
    StepRole,
    UnknownIntentError,
    canonical_bytes,
    content_hash,
    derived_ulid,
    rule_hits,
    sha256_hex,
)
from countersign.kernel.rules import RuleFacts
from countersign.registry import IntentSpec, Operation, Registry, StepTemplate

from .entities import policy_value, resolve_entities
from .facts import plan_facts

__all__ = ["PLANNER_VERSION", "make_plan", "policy_version"]

PLANNER_VERSION: Final = "1"
GATE_USES: Final = "system.approval"
GATE_CALL: Final = "confirm"


def policy_version(policy: Policy) -> str:
    """vC: the content hash of a Policy."""
    return policy.version


@dataclass
class _Proto:
    """A step before numbering."""

    key: str  # template id, plus "#i" for foreach copies; "gate:<group>" for gates
    template: str
    uses: str
    call: str
    op: Operation
    role: StepRole
    mode: StepMode
    args: dict[str, Any]
    deps: set[str] = field(default_factory=set)
    order: float = 0.0
    gate_id: str | None = None
    group: str | None = None


def make_plan(
    intent: Intent, evidence: Sequence[Evidence], registry: Registry, policy: Policy
) -> Plan | Needs:
    """Plan an intent.

    Returns:
        A Plan, or Needs when required entities are missing.

    Raises:
        UnknownIntentError: the registry cannot plan this intent (lists the ones it can).
        PlanningError: entities of the wrong type or unknown to the intent, or a registry
            template that does not bind (names the template and the problem).
    """
    spec = registry.intents.get(intent.intent)
    if spec is None:
        raise UnknownIntentError(intent.intent, registry.intent_names())
    entities, needs = resolve_entities(spec, intent, evidence, policy)
    if needs:
        return Needs(intent=intent.intent, needs=needs)

    ev_sorted = sorted((e.to_json() for e in evidence), key=canonical_bytes)
    inputs = {
        "intent": intent.to_json(),
        "evidence": ev_sorted,
        "registry": registry.version,
        "policy": policy_version(policy),
        "planner": PLANNER_VERSION,
    }
    plan_id = derived_ulid(intent.received_at, sha256_hex(canonical_bytes(inputs)).encode())
    protos = _expand(spec, intent, entities, registry, policy, plan_id)
    ordered = _toposort(_insert_gates(protos, policy, registry))
    numbered = _number(ordered, plan_id, spec.name)
    writes_at = {s.step for s, p in zip(numbered, ordered, strict=True) if p.op.safety == "write"}
    graph = _with_reasons(numbered, writes_at, policy, plan_facts(intent, evidence))
    _check_offered_ranges(graph, registry, intent)
    writes = [p for p in ordered if p.op.safety == "write"]
    scopes = sorted({s for p in writes for s in p.op.scopes})
    watch_s = max(
        (int(p.args.get("max_lifetime_s", 0) or 0) for p in ordered if p.role == "Watcher"),
        default=0,
    )
    return Plan(
        plan_id=plan_id,
        intent=intent,
        graph=graph,
        constraints=PlanConstraints(scopes=scopes, ttl_s=policy.plan_ttl_s + watch_s),
        plugins=sorted({p.uses for p in ordered}),
        meta=PlanMeta(
            created_at=intent.received_at,
            planner_version=PLANNER_VERSION,
            registry_version=registry.version,
            policy_version=policy_version(policy),
            evidence_hash=content_hash(ev_sorted),
        ),
    )


# ---- templates --------------------------------------------------------------------------------
def _expand(
    spec: IntentSpec,
    intent: Intent,
    entities: Mapping[str, JsonValue],
    registry: Registry,
    policy: Policy,
    plan_id: str,
) -> list[_Proto]:
    keys_of: dict[str, list[str]] = {}
    protos: list[_Proto] = []
    for t in spec.steps:
        if any(entities.get(w) in (None, False) for w in t.conditions()):
            # Dropped: whoever depended on it depends on what it depended on.
            keys_of[t.id] = sorted({k for d in t.after for k in keys_of[d]})
            continue
        uses = _provider(t, policy, spec.name)
        op = registry.op(uses, t.call)
        items: list[JsonValue | None]
        if t.foreach is not None:
            seq = entities[t.foreach]
            items = list(seq) if isinstance(seq, list) else [seq]
        else:
            items = [None]
        deps = {k for d in t.after for k in keys_of[d]}
        keys: list[str] = []
        for i, item in enumerate(items):
            key = f"{t.id}#{i}" if t.foreach is not None else t.id
            fill = _Fill(intent, entities, item, policy, plan_id)
            args = {
                k: _substitute(v, fill, f"{spec.name}.{t.id}.args.{k}") for k, v in t.args.items()
            }
            args = {k: v for k, v in args.items() if v is not None}
            _check_args(spec.name, t, uses, op, args)
            protos.append(
                _Proto(
                    key=key,
                    template=t.id,
                    uses=uses,
                    call=t.call,
                    op=op,
                    role=t.role or op.role,
                    mode=t.mode or op.mode,
                    args=args,
                    deps=set(deps),
                    order=len(protos),
                    group=t.group,
                )
            )
            keys.append(key)
        keys_of[t.id] = keys
    return protos


def _provider(t: StepTemplate, policy: Policy, intent: str) -> str:
    if not t.uses.startswith("@"):
        return t.uses
    cap = t.uses[1:]
    uses = policy.providers.get(cap)
    if uses is None:
        raise PlanningError(
            f"intent {intent!r}, template {t.id!r}: the Policy names no provider for "
            f"capability {cap!r} (policy.providers has: {', '.join(sorted(policy.providers))})"
        )
    return uses


@dataclass(frozen=True)
class _Fill:
    """What a template's placeholders are filled from (one per template copy)."""

    intent: Intent
    entities: Mapping[str, JsonValue]
    item: JsonValue | None
    policy: Policy
    plan_id: str


def _substitute(v: JsonValue, fill: _Fill, where: str) -> Any:
    """Fill registry-authored placeholders. Substituted values are never re-scanned: only a string
    the registry wrote may be a ``$text:`` template, in which ``{plan_id}`` and ``{card_url}`` (the
    plan's card: the Policy's ``card_url`` with ``{plan_id}`` filled, ``/plans/<plan_id>`` when
    unset) are the only placeholders."""
    if isinstance(v, str):
        return _placeholder(v, fill, where)
    if isinstance(v, dict):
        return dict(v) if "$ref" in v else {k: _substitute(x, fill, where) for k, x in v.items()}
    if isinstance(v, list):
        return [_substitute(x, fill, where) for x in v]
    return v


def _placeholder(v: str, fill: _Fill, where: str) -> Any:
    """One registry-authored string: a placeholder's value, or the string itself."""
    if v.startswith("$text:"):
        card = (fill.policy.card_url or "/plans/{plan_id}").replace("{plan_id}", fill.plan_id)
        return (
            v.removeprefix("$text:").replace("{card_url}", card).replace("{plan_id}", fill.plan_id)
        )
    if v.startswith("$entities."):
        return fill.entities.get(v.removeprefix("$entities."))
    if v.startswith("$policy."):
        return policy_value(v, fill.policy, where=where)
    exact: dict[str, Any] = {
        "$item": fill.item,
        "$intent.user_id": fill.intent.user_id,
        "$intent.tz": fill.intent.tz,
    }
    return exact.get(v, v)


def _check_args(
    intent: str, t: StepTemplate, uses: str, op: Operation, args: Mapping[str, Any]
) -> None:
    accepted = op.args.all()
    extra = sorted(set(args) - accepted)
    if extra:
        raise PlanningError(
            f"intent {intent!r}, template {t.id!r}: {uses}.{t.call} does not take arg(s) {extra}"
        )
    missing = sorted(set(op.args.required) - set(args))
    if missing:
        raise PlanningError(
            f"intent {intent!r}, template {t.id!r}: {uses}.{t.call} needs arg(s) {missing}"
        )


# ---- what can be offered -----------------------------------------------------------------------
def _check_offered_ranges(graph: list[PlanStep], registry: Registry, intent: Intent) -> None:
    """A step that offers time slots (registry ``offers: {kind: range}``) must be able to offer
    one: its window ends after it starts and after the intent was received (the planner's only
    "now"), and is at least the signed duration long. Otherwise the plan is refused, naming both
    (the approval and the execute check the same against the clock)."""
    for s in graph:
        spec = registry.op(s.uses, s.call).offers
        if spec is None or spec.kind != "range" or spec.window is None:
            continue
        start, end = (_instant(s.args.get(a)) for a in spec.window)
        minutes = s.args.get(spec.duration_arg or "")
        where = f"step {s.step} ({s.uses}.{s.call})"
        if start is None or end is None:
            raise PlanningError(f"{where}: the window {spec.window} must be two date-times")
        if isinstance(minutes, bool) or not isinstance(minutes, int) or minutes <= 0:
            raise PlanningError(
                f"{where}: {spec.duration_arg} must be a positive number of minutes"
            )
        if end <= start:
            raise PlanningError(f"{where}: the window ends ({end.isoformat()}) before it starts")
        if end <= intent.received_at:
            raise PlanningError(
                f"{where}: the window {start.isoformat()} – {end.isoformat()} is in the past "
                f"(asked at {intent.received_at.isoformat()}); give a time still to come"
            )
        if end - start < timedelta(minutes=minutes):
            raise PlanningError(
                f"{where}: a {minutes}-minute slot does not fit in the window "
                f"{start.isoformat()} – {end.isoformat()}"
            )


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


# ---- gates ------------------------------------------------------------------------------------
def _insert_gates(protos: list[_Proto], policy: Policy, registry: Registry) -> list[_Proto]:
    by_key = {p.key: p for p in protos}
    group_of: dict[str, str] = {}
    for p in protos:
        if p.op.safety != "write":
            continue
        if policy.gating == "per_write":
            group_of[p.key] = p.key
        elif p.group is not None:
            group_of[p.key] = "label:" + p.group
        else:
            dep_groups = {group_of.get(d) for d in p.deps}
            only_writes = p.deps and all(by_key[d].op.safety == "write" for d in p.deps)
            if only_writes and len(dep_groups) == 1 and None not in dep_groups:
                group_of[p.key] = next(iter(g for g in dep_groups if g is not None))
            else:
                group_of[p.key] = p.key
    groups: dict[str, list[_Proto]] = {}
    for p in protos:
        if p.key in group_of:
            p.group = group_of[p.key]
            groups.setdefault(group_of[p.key], []).append(p)
    gate_op = registry.op(GATE_USES, GATE_CALL)
    out = list(protos)
    for n, (gname, members) in enumerate(groups.items()):
        if n >= 26 * 27:
            raise PlanningError("too many write groups in one plan")
        gate_id = "gate-" + _letters(n)
        member_keys = {m.key for m in members}
        outside = {d for m in members for d in m.deps if d not in member_keys}
        gate = _Proto(
            key=f"gate:{gname}",
            template=gate_id,
            uses=GATE_USES,
            call=GATE_CALL,
            op=gate_op,
            role=gate_op.role,
            mode=members[0].mode,
            args={},
            deps=outside,
            order=min(m.order for m in members) - 0.5,
            gate_id=gate_id,
            group=gname,
        )
        for m in members:
            inside = {d for d in m.deps if d in member_keys}
            m.deps = inside or {gate.key}
        out.append(gate)
    return out


def _letters(n: int) -> str:
    s = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(65 + r) + s
    return s


def _toposort(protos: list[_Proto]) -> list[_Proto]:
    """Kahn's algorithm, ties broken by template order: deterministic and dependency-safe."""
    pending = {p.key: p for p in protos}
    done: set[str] = set()
    out: list[_Proto] = []
    while pending:
        ready = [p for p in pending.values() if p.deps <= done]
        if not ready:
            raise PlanningError(f"dependency cycle among {sorted(pending)}")
        nxt = min(ready, key=lambda p: (p.order, p.key))
        out.append(nxt)
        done.add(nxt.key)
        del pending[nxt.key]
    return out


def _gate_summary(covered: list[_Proto], number: Mapping[str, int]) -> str:
    parts = [f"step {number[c.key]}: {c.uses}.{c.call}" for c in covered]
    return "approve " + "; ".join(parts)


# ---- numbering -------------------------------------------------------------------------------
def _number(ordered: list[_Proto], plan_id: str, intent: str) -> list[PlanStep]:
    """The ordered proto-steps as numbered plan steps: references and ``$step.uid`` resolved with
    the final numbers (one uid per step template: every item of a ``foreach`` shares its first
    step's), each gate's args the summary of the writes it covers (Planner LLD §4)."""
    number = {p.key: i + 1 for i, p in enumerate(ordered)}
    by_template: dict[str, list[str]] = {}
    for p in ordered:
        by_template.setdefault(p.template, []).append(p.key)
    gate_of_group = {p.group: p.gate_id for p in ordered if p.gate_id}
    graph: list[PlanStep] = []
    ancestors: dict[str, set[str]] = {}
    for p in ordered:
        ancestors[p.key] = set().union(*({d, *ancestors[d]} for d in p.deps)) if p.deps else set()
        if p.gate_id is not None:
            covered = [q for q in ordered if q.group == p.group and q.gate_id is None]
            args = {"summary": _gate_summary(covered, number)}
        else:
            ctx = _RefContext(
                uid_step=number[by_template[p.template][0]],
                plan_id=plan_id,
                number=number,
                by_template=by_template,
                gate=gate_of_group.get(p.group),
                ancestors=ancestors[p.key],
                where=f"intent {intent}, template {p.template!r}",
            )
            args = {k: _resolve_refs(v, ctx) for k, v in p.args.items()}
        graph.append(
            PlanStep(
                step=number[p.key],
                mode=p.mode,
                role=p.role,
                uses=p.uses,
                call=p.call,
                args=args,
                after=sorted(number[d] for d in p.deps),
                gate_id=p.gate_id,
                dry_run=p.op.safety == "read" and not p.op.gate,
            )
        )
    return graph


# ---- policy rules -----------------------------------------------------------------------------
def _with_reasons(
    graph: list[PlanStep], writes: set[int], policy: Policy, facts: RuleFacts
) -> list[PlanStep]:
    """Each gate's ``because``: the policy's ``gate`` rules the writes it guards match, in the
    policy's order, each with the steps it is about; a write a ``deny`` rule matches refuses."""
    gates = {s.step: s for s in graph if s.gate_id}
    reasons: dict[int, dict[str, dict[str, Any]]] = {g: {} for g in gates}
    for s in graph:
        if s.step not in writes:
            continue
        guard = _guard_of(s, graph, gates)
        for hit in rule_hits(policy.rules, f"{s.uses}.{s.call}", s.args, facts):
            if hit.then == "deny" and hit.sure:
                raise PlanningError(
                    f"policy rule {hit.rule!r} forbids step {s.step} ({s.uses}.{s.call}): "
                    f"{hit.because}"
                )
            if hit.then == "gate" and guard is not None:
                entry = reasons[guard].setdefault(
                    hit.rule, {"rule": hit.rule, "because": hit.because, "steps": []}
                )
                entry["steps"].append(s.step)
    order = {r.id: i for i, r in enumerate(policy.rules)}
    out = []
    for s in graph:
        found = sorted(reasons.get(s.step, {}).values(), key=lambda e: order[e["rule"]])
        out.append(s.model_copy(update={"args": {**s.args, "because": found}}) if found else s)
    return out


def _guard_of(s: PlanStep, graph: list[PlanStep], gates: Mapping[int, PlanStep]) -> int | None:
    """The nearest gate among the step's ancestors (the one that guards it)."""
    by = {x.step: x for x in graph}
    todo, seen = list(s.after), set[int]()
    while todo:
        n = max(todo)  # the nearest first: steps are numbered in DAG order
        todo.remove(n)
        if n in seen:
            continue
        seen.add(n)
        if n in gates:
            return n
        todo.extend(by[n].after)
    return None


# ---- references -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _RefContext:
    #: the number ``$step.uid`` is made of: the first step of the template (Planner SPEC)
    uid_step: int
    plan_id: str
    number: Mapping[str, int]
    by_template: Mapping[str, list[str]]
    gate: str | None
    ancestors: set[str]
    where: str


def _resolve_refs(v: Any, ctx: _RefContext) -> Any:
    if isinstance(v, str) and v == "$step.uid":
        return f"{ctx.plan_id.lower()}-{ctx.uid_step}"
    if isinstance(v, str) and v.startswith("$steps.") and v.endswith(".uid"):
        return _other_uid(v, ctx)
    if isinstance(v, dict):
        if set(v) == {"$ref"} and isinstance(v["$ref"], str):
            return _ref(v["$ref"], ctx)
        return {k: _resolve_refs(x, ctx) for k, x in v.items()}
    if isinstance(v, list):
        return [_resolve_refs(x, ctx) for x in v]
    return v


def _other_uid(v: str, ctx: _RefContext) -> str:
    """``$steps.<template>.uid``: the ``$step.uid`` of an earlier template this step depends on
    (an invitation names the event the create steps wrote)."""
    tid = v.removeprefix("$steps.").removesuffix(".uid")
    keys = ctx.by_template.get(tid)
    if keys is None:
        raise PlanningError(f"{ctx.where}: {v!r} names no step template")
    if not set(keys) <= ctx.ancestors:
        raise PlanningError(f"{ctx.where}: {v!r} is not a step this one runs after")
    return f"{ctx.plan_id.lower()}-{ctx.number[keys[0]]}"


def _ref(ref: str, ctx: _RefContext) -> Any:
    head, _, rest = ref.partition(".")
    if head == "steps":
        tid, _, path = rest.partition(".")
        keys = ctx.by_template.get(tid)
        if keys is None:
            raise PlanningError(f"{ctx.where}: $ref {ref!r} names no step template")
        if not set(keys) <= ctx.ancestors:
            raise PlanningError(f"{ctx.where}: $ref {ref!r} is not an earlier dependency")
        suffix = ".output" + (f".{path}" if path else "")
        refs = [{"$ref": f"steps.{ctx.number[k]}{suffix}"} for k in keys]
        return refs if len(keys) > 1 or "#" in keys[0] else refs[0]
    if head == "gate":
        if ctx.gate is None:
            raise PlanningError(f"{ctx.where}: $ref {ref!r} on a step that no gate guards")
        return {"$ref": f"gates.{ctx.gate}.{rest}"}
    raise PlanningError(f"{ctx.where}: unknown $ref {ref!r} (use steps.<id> or gate.<field>)")
