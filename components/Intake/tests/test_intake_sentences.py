"""Intake on the labelled sentence sets (tests/data/README.md; issue 24).

The development set holds the floors Intake was tuned to; a change that loses ground on it fails.
The test set was written before tuning and is never tuned on: only the safety rule is asserted on
it (nothing the service cannot do, and no text addressed to the system, becomes a plan); its
figures are reported by ``bench/bench_intake_understanding.py`` and BENCHMARKS.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from countersign.intake import Intake
from countersign.intake.scoring import Report, contact_book, load_rows, score
from countersign.kernel import source_registry_dir
from countersign.registry import load_registry

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def intake() -> Intake:
    return Intake(load_registry(source_registry_dir()))


def _scored(intake: Intake, name: str) -> Report:
    rows = load_rows(DATA / f"sentences_{name}.jsonl")
    return score(intake, rows, contact_book(rows))


def test_the_sets_are_what_the_readme_says() -> None:
    dev = load_rows(DATA / "sentences_dev.jsonl")
    test = load_rows(DATA / "sentences_test.jsonl")
    assert (len(dev), len(test)) == (200, 100)
    assert not {r["text"] for r in dev} & {r["text"] for r in test}


@pytest.mark.parametrize("name", ["dev", "test"])
def test_no_plan_from_what_it_cannot_do_or_hostile_text(intake: Intake, name: str) -> None:
    report = _scored(intake, name)
    assert report.plans_from_refusable == 0, report.summary()


def test_dev_intents(intake: Intake) -> None:
    report = _scored(intake, "dev")
    summary = report.summary()
    assert summary["intent_accuracy"] >= 0.95, summary
    assert report.refused_right == report.refusable, summary


def test_dev_entities(intake: Intake) -> None:
    """Per-entity floors on the development set (what Intake reached, less a small margin)."""
    report = _scored(intake, "dev")
    summary = report.summary()
    assert summary["entity_accuracy"] >= 0.94, summary  # reached 0.962
    assert summary["unnecessary_questions_per_10"] <= 0.5, summary
    assert report.asked_for_missing == report.missing_required, summary
    for name, total in report.entity_total.items():
        if total >= 10:  # every type the set has ten labels of: reached ≥ 0.92 each
            got = report.entity_right[name] / total
            assert got >= 0.88, (name, got, summary)
