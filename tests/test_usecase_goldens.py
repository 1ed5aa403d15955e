"""Golden plans for the use cases: regenerated from usecases/*/fixtures and compared.

Each case ``<uc>/fixtures/<case>.intent.json`` (with optional ``<case>.evidence.json`` and
``<case>.policy.json``) must plan to exactly ``<uc>/plans/<case>.plan.json`` (the plan and its
hash; the signature depends on the key and is checked separately). Regenerate on purpose with
``COUNTERSIGN_UPDATE_GOLDENS=1`` (``make goldens``) and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from countersign.kernel import Evidence, Intent, Plan, Policy, parse_contract
from countersign.planner import make_plan
from countersign.registry import Registry
from countersign.signer import KeyRing, plan_hash, sign_plan, verify_signed_plan

ROOT = Path(__file__).resolve().parents[1] / "usecases"
CASES = sorted(ROOT.glob("*/fixtures/*.intent.json"))


def _load(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


@pytest.mark.parametrize("intent_path", CASES, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_golden_plan(intent_path: Path, registry: Registry, keyring: KeyRing) -> None:
    case = intent_path.name.removesuffix(".intent.json")
    fixtures = intent_path.parent
    intent = parse_contract(Intent, _load(intent_path, None))
    evidence = [Evidence.model_validate(e) for e in _load(fixtures / f"{case}.evidence.json", [])]
    policy = Policy.model_validate(_load(fixtures / f"{case}.policy.json", {}))
    plan = make_plan(intent, evidence, registry, policy)
    assert isinstance(plan, Plan)
    got = {"plan": plan.to_json(), "plan_hash": plan_hash(plan)}
    golden = fixtures.parent / "plans" / f"{case}.plan.json"
    text = json.dumps(got, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("COUNTERSIGN_UPDATE_GOLDENS") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden {golden}; run make goldens"
    assert json.loads(golden.read_text()) == got, f"{golden} differs; review, then make goldens"
    # and the golden, signed, verifies
    pid, key = keyring.active()
    env = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").envelope
    verify_signed_plan({**json.loads(golden.read_text()), "signature": env.to_json()}, keys=keyring)


def test_every_usecase_has_a_golden() -> None:
    assert {p.parts[-3] for p in CASES} >= {"meeting", "shopping", "visa", "parallel"}
