"""The failure classifier (``steps.failures``) and the failure table (``kernel.rules``): total and
pure; an unknown outcome is never resendable and never retried; the table cannot be written to
retry one; each status reads as its class; Retry-After is read from the header or the body."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from countersign.kernel import BindingError
from countersign.kernel.rules import (
    DEFAULT_ON_FAILURE,
    FAILURE_CLASSES,
    FailureActions,
    OnFailure,
    failure_actions,
)
from countersign.steps import StepFailedError
from countersign.steps.failures import classify_attempt, classify_error, retry_after_of
from countersign.steps.writes import Attempt, WriteFailedError, classify
from countersign.storage import OutcomeUnknownError, ResourceBusyError

attempts = st.builds(
    Attempt,
    kind=st.sampled_from(["answered", "refused", "not_sent", "lost"]),
    status=st.one_of(st.none(), st.integers(min_value=0, max_value=999)),
    output=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["retry_after", "id", "x"]),
            st.one_of(st.integers(), st.text(max_size=5), st.floats()),
        ),
    ),
    detail=st.text(max_size=40),
    headers=st.dictionaries(
        st.sampled_from(["Retry-After", "retry-after", "X"]), st.text(max_size=8)
    ),
)


@given(attempts, st.booleans())
def test_every_attempt_has_one_class_and_unknown_is_never_resendable(a: Attempt, nk: bool) -> None:
    verdict = classify(a, natural_key=nk)
    if verdict in ("completed", "deduplicated"):
        return
    f = classify_attempt(a, verdict)
    assert f.cls in FAILURE_CLASSES and f.reason
    assert f.resendable == (verdict == "failed")
    if verdict == "unknown":
        assert f.cls == "unknown_outcome"
    assert classify_attempt(a, verdict) == f, "pure: the same answer, the same class"
    if not f.resendable:  # whatever the table says of other classes, this one is never retried
        assert DEFAULT_ON_FAILURE.action(f.cls).then != "retry"


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, "auth"),
        (403, "auth"),
        (408, "transient"),
        (409, "conflict"),
        (412, "stale"),
        (404, "stale"),
        (422, "validation"),
        (400, "validation"),
        (429, "rate_limited"),
    ],
)
def test_a_refused_answer_reads_as_its_class(status: int, cls: str) -> None:
    a = Attempt("answered", status=status, output={"error": "x"})
    assert classify(a) == "failed"
    f = classify_attempt(a, "failed", step=3)
    assert (f.cls, f.status, f.step, f.resendable) == (cls, status, 3, True)
    assert str(status) in f.reason and "{" not in f.reason


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_5xx_to_a_write_is_unknown_never_sent_again(status: int) -> None:
    a = Attempt("answered", status=status)
    f = classify_attempt(a, classify(a))
    assert f.cls == "unknown_outcome" and not f.resendable


@pytest.mark.parametrize(
    ("detail", "cls"),
    [
        ("ConnectError", "provider_down"),
        ("connection refused", "provider_down"),
        ("n8n answered 404 for the step webhook", "transient"),
    ],
)
def test_not_sent(detail: str, cls: str) -> None:
    f = classify_attempt(Attempt.not_sent(detail), "failed")
    assert f.cls == cls and f.resendable


def test_retry_after_from_header_then_body() -> None:
    assert retry_after_of(Attempt("answered", 429, headers={"retry-after": "7"})) == 7.0
    assert retry_after_of(Attempt("answered", 429, output={"retry_after": 2.5})) == 2.5
    assert (
        retry_after_of(Attempt("answered", 429, headers={"Retry-After": "Wed, 21 Oct 2015"}))
        is None
    )
    assert retry_after_of(Attempt("answered", 429, output={"retry_after": True})) is None
    assert retry_after_of(Attempt("answered", 429, output={"retry_after": "nan"})) is None
    f = classify_attempt(Attempt("answered", 429, headers={"Retry-After": "3"}), "failed")
    assert f.cls == "rate_limited" and f.retry_after_s == 3.0


def test_errors_by_code() -> None:
    refused = WriteFailedError(
        2, "provider answered 401", sent=True, attempt=Attempt("answered", 401)
    )
    assert (f := classify_error(refused)) is not None and f.cls == "auth" and f.step == 2
    unbuilt = WriteFailedError(2, "no URL", sent=False, attempt=Attempt.not_sent("no URL"))
    unbuilt.__cause__ = BindingError("no URL")
    assert (f := classify_error(unbuilt)) is not None and f.cls == "validation"
    unknown = classify_error(OutcomeUnknownError("maybe"))
    assert unknown is not None and unknown.cls == "unknown_outcome" and not unknown.resendable
    busy = classify_error(ResourceBusyError("calendar:a:2026-11-26", 15))
    assert busy is not None and busy.cls == "conflict"
    read = classify_error(StepFailedError(1, "direct read of x.y failed: ConnectError"))
    assert read is not None and read.cls == "provider_down" and read.step == 1
    read5 = classify_error(StepFailedError(1, "provider answered 503"))
    assert read5 is not None and read5.cls == "provider_down" and read5.resendable
    assert classify_error(ValueError("x")) is None


def test_the_table_never_retries_an_unknown_outcome() -> None:
    with pytest.raises(ValidationError, match="at most once"):
        FailureActions.model_validate({"classes": {"unknown_outcome": {"then": "retry"}}})
    assert FailureActions().action("auth").then == "ask", "a class not named is asked"
    assert failure_actions(None) is DEFAULT_ON_FAILURE


def test_defaults() -> None:
    then = {c: DEFAULT_ON_FAILURE.action(c).then for c in FAILURE_CLASSES}
    assert then == {
        "transient": "retry",
        "rate_limited": "retry",
        "auth": "ask",
        "conflict": "replan",
        "validation": "ask",
        "stale": "replan",
        "unknown_outcome": "ask",
        "provider_down": "retry",
    }


@given(
    st.integers(min_value=1, max_value=10),
    st.integers(min_value=1, max_value=12),
    st.floats(min_value=0, max_value=60),
    st.floats(min_value=0, max_value=300),
    st.one_of(st.none(), st.floats(min_value=-5, max_value=400)),
)
def test_backoff_is_capped_and_counted(
    attempts: int, sent: int, backoff: float, cap: float, after: Any
) -> None:
    on = OnFailure(then="retry", attempts=attempts, backoff_s=backoff, max_wait_s=cap)
    wait = on.wait_s(sent, after)
    if sent >= attempts:
        assert wait is None
    elif after is not None:
        assert wait == (after if 0 <= after <= cap else None)
    else:
        assert wait is not None and 0 <= wait <= cap
    assert OnFailure(then="ask").wait_s(1, None) is None
