"""The failure table is part of the signed policy: a changed table changes the policy's version
(so a plan signed under one table does not verify under another), the default table leaves
existing versions as they were, and a table that would re-send an unknown write is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from countersign.kernel import DEFAULT_ON_FAILURE, Policy
from countersign.kernel.rules import failure_actions


def test_default_table_is_left_out_of_the_signed_form() -> None:
    p = Policy()
    assert "on_failure" not in p.to_json()
    assert Policy(on_failure=DEFAULT_ON_FAILURE).version == p.version
    assert failure_actions(p) == DEFAULT_ON_FAILURE


def test_a_changed_table_changes_the_version_and_is_read_back() -> None:
    p = Policy(on_failure={"classes": {"conflict": {"then": "ask"}}})
    assert p.version != Policy().version
    assert p.to_json()["on_failure"]["classes"]["conflict"]["then"] == "ask"
    assert failure_actions(p).action("conflict").then == "ask"
    assert failure_actions(p).action("transient").then == "ask"  # a class not named: ask
    again = Policy.model_validate(p.to_json())
    assert again.version == p.version


def test_an_unknown_outcome_is_never_retried() -> None:
    with pytest.raises(ValidationError, match="unknown_outcome cannot be retried"):
        Policy(on_failure={"classes": {"unknown_outcome": {"then": "retry"}}})
