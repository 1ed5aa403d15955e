"""A preview decides that every step only reads BEFORE anything runs (issue 10, hole 1).

Each test uses a copy of the registry with one read binding hand-edited to write, plans and signs
against that copy (so the registry-version check passes and only the read-only rule stands in the
way), and previews through a transport that counts deploys and calls: a refusal must name the step
and leave both counts at zero.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from countersign.kernel import CountersignError, Plan, Policy, source_registry_dir
from countersign.planner import make_plan
from countersign.planner.testing import T0, make_intent, signed_plan
from countersign.preview import plan_preview, preview_steps, run_preview
from countersign.preview.testing import WRITE_EDITS, CountingTransport, edited_registry
from countersign.registry import Registry
from countersign.signer import KeyRing, VerifiedPlan, plan_hash
from countersign.steps import N8nStepRunner, PreviewRefusedError

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
#: (intent, the read op edited in its plan)
TARGETS = [
    ("purchase_item", "shop.sandbox", "search"),
    ("find_meeting_time", "caldav", "list_free_busy"),
    ("watch_visa_slots", "visa.sandbox", "find_slots"),
]


class Recorder:
    def __init__(self) -> None:
        self.refused: list[tuple[str, str | None]] = []

    def signature_refused(self, document: Any, error: CountersignError, *, actor: str) -> None:
        self.refused.append(("signature", error.code))

    def preview_done(
        self,
        verified: VerifiedPlan,
        fingerprints: Mapping[int, str],
        *,
        actor: str,
        latency_ms: int,
        status: str,
        reason: str | None,
        outputs: Mapping[int, Any] | None = None,
    ) -> None:
        self.refused.append((status, reason))


def _plan(registry: Registry, intent: str) -> Plan:
    plan = make_plan(make_intent(intent), [], registry, LOCAL)
    assert isinstance(plan, Plan)
    return plan


@pytest.mark.parametrize("edit", sorted(WRITE_EDITS))
@pytest.mark.parametrize(("intent", "uses", "call"), TARGETS)
def test_an_edited_read_binding_is_refused_before_anything_runs(
    tmp_path: Path, keyring: KeyRing, intent: str, uses: str, call: str, edit: str
) -> None:
    registry = edited_registry(
        source_registry_dir(), tmp_path / "registry", uses, call, WRITE_EDITS[edit]
    )
    plan = _plan(registry, intent)
    # (the planner puts a gate before an op re-labelled as a write, so look the step up)
    step = next(s.step for s in plan.graph if (s.uses, s.call) == (uses, call))
    doc = signed_plan(plan, keyring)
    transport, recorder = CountingTransport(), Recorder()
    with pytest.raises(PreviewRefusedError) as info:
        asyncio.run(
            run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=transport,
                recorder=recorder,
                settings={},
                actor="u-alice",
                now=T0 + timedelta(minutes=1),
            )
        )
    assert f"step {step} ({uses}.{call})" in info.value.message
    assert all(p.startswith("step ") for p in info.value.problems)
    assert transport.deployed == [] and transport.calls == []
    assert recorder.refused and recorder.refused[-1][0] == "refused"


def test_the_whole_set_is_checked_first_and_every_bad_step_is_named(
    tmp_path: Path, registry: Registry
) -> None:
    # both free/busy reads (steps 1 and 2) are edited; step 3 (overlap) is fine
    edited = edited_registry(
        source_registry_dir(),
        tmp_path / "registry",
        "caldav",
        "list_free_busy",
        WRITE_EDITS["v2 requestMethod POST"],
    )
    plan = _plan(edited, "find_meeting_time")
    with pytest.raises(PreviewRefusedError) as info:
        plan_preview(plan, plan_hash(plan), edited)
    named = {p.split(":")[0] for p in info.value.problems}
    assert named == {"step 1 (caldav.list_free_busy)", "step 2 (caldav.list_free_busy)"}
    assert "'requestMethod'" in info.value.message and "found 'POST'" in info.value.message
    # only= restricts the check to what would run
    good = _plan(registry, "find_meeting_time")
    assert sorted(plan_preview(good, plan_hash(good), registry)) == [1, 2, 3]
    assert sorted(plan_preview(good, plan_hash(good), registry, only={1})) == [1]


def test_a_read_role_step_on_a_write_op_is_refused_not_skipped(tmp_path: Path) -> None:
    edited = edited_registry(
        source_registry_dir(),
        tmp_path / "registry",
        "shop.sandbox",
        "search",
        WRITE_EDITS["re-labelled as a write"],
    )
    plan = _plan(edited, "purchase_item")
    search = next(s for s in plan.graph if s.call == "search")
    assert search.role == "Fetcher"
    assert search.step not in preview_steps(plan, edited)  # main skipped it silently
    with pytest.raises(PreviewRefusedError) as info:
        plan_preview(plan, plan_hash(plan), edited)
    assert info.value.problems == [
        f"step {search.step} (shop.sandbox.search): the plan gives it the read role Fetcher, "
        "but the registry binds it to a write operation"
    ]


def test_a_write_role_step_never_runs_even_if_the_registry_calls_its_op_a_read(
    tmp_path: Path,
) -> None:
    def relabel(op: dict[str, Any]) -> None:
        op["safety"], op["previewable"] = "read", True
        del op["compensation"], op["budget"], op["probe"]  # a read may have none of them

    edited = edited_registry(
        source_registry_dir(), tmp_path / "registry", "shop.sandbox", "purchase", relabel
    )
    plan = _plan(edited, "purchase_item")
    booker = next(s for s in plan.graph if s.call == "purchase")
    assert booker.role == "Booker"
    assert booker.step not in plan_preview(plan, plan_hash(plan), edited)


def test_the_preview_runner_refuses_to_deploy_a_writing_workflow(tmp_path: Path) -> None:
    """Defence in depth: even a caller that skips ``plan_preview`` cannot deploy a write."""
    edited = edited_registry(
        source_registry_dir(),
        tmp_path / "registry",
        "shop.sandbox",
        "search",
        WRITE_EDITS["v1 requestMethod put"],
    )
    plan = _plan(edited, "purchase_item")
    transport = CountingTransport()
    runner = N8nStepRunner(
        plan=plan,
        plan_hash=plan_hash(plan),
        registry=edited,
        transport=transport,
        settings={"shop_base_url": "http://127.0.0.1:9"},
        read_only=True,
    )
    with pytest.raises(PreviewRefusedError, match=r"step 1 \(shop.sandbox.search\)"):
        asyncio.run(runner.run(plan.step(1), {}))
    assert transport.deployed == [] and transport.calls == []
