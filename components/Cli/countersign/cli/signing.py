"""``countersign plan`` and the shared plan-and-sign routine (``plan_document``; the strict file
reader is ``files.py``). Loaded only for ``plan`` (and by ``up``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from countersign.kernel import (
    Evidence,
    InputError,
    Intent,
    Needs,
    Policy,
    Settings,
    parse_contract,
)
from countersign.planner import make_plan
from countersign.registry import load_registry
from countersign.signer import open_keyring, sign_plan

from .exits import EXIT_NEEDS, guard, print_json
from .files import read_document

__all__ = ["plan_cmd", "plan_document", "read_document"]


def _now() -> datetime:
    return datetime.now(UTC)


def plan_document(
    settings: Settings,
    intent_doc: Any,
    evidence_doc: Any,
    policy_doc: Any,
    *,
    now: datetime,
) -> dict[str, Any]:
    """Plan and sign; the signed-plan document, or ``{"needs": [...]}``.

    Shared by the CLI and ``up`` (and, later, the API), so every edge plans the same way.
    """
    intent = parse_contract(Intent, intent_doc, what="intent")
    if not isinstance(evidence_doc, list):
        raise InputError("evidence: must be a JSON list of evidence items")
    evidence = [
        parse_contract(Evidence, e, what=f"evidence[{i}]") for i, e in enumerate(evidence_doc)
    ]
    policy = parse_contract(Policy, policy_doc, what="policy")
    registry = load_registry(settings.registry_dir)
    result = make_plan(intent, evidence, registry, policy)
    if isinstance(result, Needs):
        return result.to_json()
    ring = open_keyring(settings, now=now, create=True)
    pubkey_id, key = ring.active()
    return sign_plan(result, key=key, pubkey_id=pubkey_id, signer=settings.signer_name).to_json()


def plan_cmd(
    intent: Annotated[Path, typer.Option("--intent", help="Intent JSON file.")],
    evidence: Annotated[Path | None, typer.Option("--evidence", help="Evidence JSON list.")] = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="Policy JSON/YAML.")] = None,
) -> None:
    """Plan an intent and print the signed plan ``{"plan", "signature", "plan_hash"}``."""

    def body() -> None:
        settings = Settings()
        doc = plan_document(
            settings,
            read_document(intent),
            read_document(evidence) if evidence else [],
            read_document(policy) if policy else {},
            now=_now(),
        )
        print_json(doc)
        if "needs" in doc:
            raise typer.Exit(EXIT_NEEDS)

    guard(body)
