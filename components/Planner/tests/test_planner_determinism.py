"""Invariant 1: the same (Intent, Evidence, Registry, Policy) gives the same bytes, hash and
signature; a change to any one of the four gives a different hash."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.kernel import Evidence, Intent, Plan, Policy, canonical_bytes
from countersign.planner import make_plan
from countersign.planner.testing import evidence_items, meeting_intents
from countersign.registry import Registry, registry_from_documents
from countersign.signer import KeyRing, plan_hash, sign_plan

HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _plan(intent: Intent, ev: list[Evidence], reg: Registry, pol: Policy) -> Plan:
    p = make_plan(intent, ev, reg, pol)
    assert isinstance(p, Plan)
    return p


@settings(max_examples=120, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents(), evidence=evidence_items())
def test_planning_twice_is_byte_identical(
    intent: Intent, evidence: list[Evidence], registry: Registry, keyring: KeyRing
) -> None:
    a = _plan(intent, evidence, registry, Policy())
    b = _plan(Intent.model_validate(intent.to_json()), list(reversed(evidence)), registry, Policy())
    assert canonical_bytes(a.to_json()) == canonical_bytes(b.to_json())
    pid, key = keyring.active()
    sa = sign_plan(a, key=key, pubkey_id=pid, signer="planner@system")
    sb = sign_plan(b, key=key, pubkey_id=pid, signer="planner@system")
    assert sa == sb


def _intent_mutations(intent: Intent) -> list[tuple[str, Intent]]:
    doc = intent.to_json()
    ents = doc["entities"]
    variants: list[tuple[str, dict[str, Any]]] = [
        (
            "intent_id",
            {
                **doc,
                "intent_id": doc["intent_id"][:-1] + ("0" if doc["intent_id"][-1] != "0" else "1"),
            },
        ),
        # earlier, so the window is still to come (a window in the past is refused)
        ("received_at", {**doc, "received_at": "2020-01-01T00:00:00.000Z"}),
        ("user_id", {**doc, "user_id": doc["user_id"] + "x"}),
        ("tz", {**doc, "tz": "Pacific/Auckland" if doc["tz"] != "Pacific/Auckland" else "UTC"}),
        ("context_budget", {**doc, "context_budget": (doc["context_budget"] + 1) % 6}),
        ("constraints", {**doc, "constraints": {"vc": "zoom"}}),
        ("title", {**doc, "entities": {**ents, "title": ents["title"] + "!"}}),
        # shorter, so it still fits the window (a longer slot than the window is refused)
        ("duration", {**doc, "entities": {**ents, "duration_min": ents["duration_min"] - 1}}),
        (
            "participants",
            {**doc, "entities": {**ents, "participants": [*ents["participants"], "zed@z.org"]}},
        ),
        ("window_end", {**doc, "entities": {**ents, "window_end": "2031-01-01T00:00:00Z"}}),
    ]
    return [(n, Intent.model_validate(d)) for n, d in variants]


@settings(max_examples=40, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents(), evidence=evidence_items(), which=st.integers(0, 10**6))
def test_changing_any_input_changes_the_hash(
    intent: Intent, evidence: list[Evidence], which: int, registry: Registry
) -> None:
    base = plan_hash(_plan(intent, evidence, registry, Policy()))
    changed: list[tuple[str, Plan]] = []
    for name, variant in _intent_mutations(intent):
        changed.append((name, _plan(variant, evidence, registry, Policy())))
    extra = Evidence(type="history", key="k", value=1, confidence=0.5, source_ref="kv:x")
    changed.append(("evidence+", _plan(intent, [*evidence, extra], registry, Policy())))
    if evidence:
        e0 = evidence[which % len(evidence)]
        tweaked = e0.model_copy(update={"confidence": 1.0 if e0.confidence != 1.0 else 0.0})
        rest = [e for e in evidence if e is not e0]
        changed.append(("evidence~", _plan(intent, [*rest, tweaked], registry, Policy())))
    changed.append(("policy", _plan(intent, evidence, registry, Policy(plan_ttl_s=901))))
    changed.append(("policy2", _plan(intent, evidence, registry, Policy(approval_ttl_s=301))))
    changed.append(("registry", _plan(intent, evidence, _edited_registry(registry), Policy())))
    for name, p in changed:
        assert plan_hash(p) != base, name


def _edited_registry(reg: Registry) -> Registry:
    conns = {k: c.to_json() for k, c in reg.connectors.items()}
    conns["gmail"]["description"] = conns["gmail"]["description"] + " (edited)"
    return registry_from_documents(
        {f"<{k}>": v for k, v in conns.items()},
        {f"<{k}>": i.to_json() for k, i in reg.intents.items()},
    )


def test_registry_version_ignores_formatting(registry: Registry) -> None:
    again = registry_from_documents(
        {f"<{k}>": c.to_json() for k, c in reversed(list(registry.connectors.items()))},
        {f"<{k}>": i.to_json() for k, i in registry.intents.items()},
    )
    assert again.version == registry.version
