"""The failure taxonomy (issue 26 §3, StepRunner SPEC "Failure classes"): what a failed step *is*,
from the connector's real answer — a pure function, no I/O, no clock.

    the write protocol's Attempt + its ledger verdict ─┐
    a read's or an execute's error (its code) ─────────┴─► classify ─► Failure(class, reason, …)

| answer | class |
|---|---|
| the ledger says ``unknown`` (a 5xx to a write, a dropped connection, a timeout) | unknown_outcome |
| not sent: connection refused, no route, DNS, connect timeout | provider_down |
| not sent otherwise (the runtime's webhook not ready) | transient |
| not sent: the request could not be built | validation |
| 401, 403, 407 | auth |
| 408, 425 | transient |
| 409; a resource another plan holds | conflict |
| 404, 410, 412; the world changed since the preview; a total over its budget now | stale |
| 429 (``Retry-After`` header or ``retry_after`` in the body) | rate_limited |
| any other 4xx, a permanent SMTP refusal | validation |
| 503 to a read (nothing to be unsure of) | provider_down |
| any other 5xx to a read | transient |

``resendable`` is the ledger's word, not the class's: only a key the ledger says is ``failed``
(refused, or never sent) may be claimed and sent again; an ``unknown`` one never is, whatever the
policy says of its class (at most once, GLOBAL_SPEC §13 inv. 4). What follows a class is the
policy's failure table (``kernel.rules.FailureActions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from countersign.kernel import ascii_digits
from countersign.kernel.rules import FailureClass

from .writes import Attempt, Verdict, WriteFailedError

__all__ = ["Failure", "classify_attempt", "classify_error", "retry_after_of"]

#: words of an unreachable provider in a connect error's name or message
_DOWN = ("connecterror", "connecttimeout", "refused", "unreachable", "no route", "name or service")
#: error codes of an execute's refusals that are failure classes (others are not step failures)
_BY_CODE: dict[str, FailureClass] = {
    "idempotency_outcome_unknown": "unknown_outcome",
    "stale_world": "stale",
    "over_budget": "stale",
    "resource_busy": "conflict",
    "n8n_unavailable": "provider_down",
}
_WORDS: dict[FailureClass, str] = {
    "transient": "a passing error",
    "rate_limited": "the provider asks to slow down",
    "auth": "the provider refused the sign-in",
    "conflict": "it conflicts with something already there",
    "validation": "the provider refused the request as it is",
    "stale": "what it depends on changed since you looked",
    "unknown_outcome": "it may or may not have happened",
    "provider_down": "the provider cannot be reached",
}


@dataclass(frozen=True)
class Failure:
    """What a failed step is, and what the ledger allows."""

    cls: FailureClass
    #: plain words for the person (no JSON, no person content)
    reason: str
    status: int | None = None
    #: the wait the provider asked for (seconds), if it said one
    retry_after_s: float | None = None
    #: the ledger lets the same key be sent again (``failed``: refused or never sent)
    resendable: bool = False
    step: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The event's ``details`` form (``class`` spelled out)."""
        out: dict[str, Any] = {"class": self.cls, "reason": self.reason}
        if self.status is not None:
            out["status"] = self.status
        if self.retry_after_s is not None:
            out["retry_after_s"] = self.retry_after_s
        return out


def retry_after_of(attempt: Attempt) -> float | None:
    """The wait a provider asked for: its ``Retry-After`` header in seconds, else a
    ``retry_after`` number in its JSON answer (a date or nonsense: None)."""
    said: Any = next((v for k, v in attempt.headers.items() if k.lower() == "retry-after"), None)
    if said is None and isinstance(attempt.output, Mapping):
        said = attempt.output.get("retry_after")
    if isinstance(said, bool) or said is None:
        return None
    try:
        value = float(str(said).strip())
    except ValueError:
        return None
    return value if 0 <= value < 86400 else None  # NaN and inf fail the comparison


#: a provider's 4xx status → its class (any other 4xx: validation)
_BY_STATUS: dict[int, FailureClass] = {
    401: "auth",
    403: "auth",
    407: "auth",
    408: "transient",
    425: "transient",
    409: "conflict",
    404: "stale",
    410: "stale",
    412: "stale",
    429: "rate_limited",
}


def _status_class(status: int) -> FailureClass:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 400 <= status < 500:
        return "validation"
    return "provider_down" if status == 503 else "transient"


def classify_attempt(
    attempt: Attempt, verdict: Verdict, *, step: int | None = None, built: bool = True
) -> Failure:
    """The class of a send that did not complete, by its ``attempt`` and the ledger's
    ``verdict`` (``failed`` or ``unknown``; a read's answer is classified as ``failed``: nothing
    was written). ``built=False``: the request could not even be built (``validation``)."""
    status = attempt.status if attempt.kind == "answered" else None
    said = f"the provider answered {status}" if status is not None else (attempt.detail or "")
    if verdict != "failed":  # unknown (or nonsense): never sent again
        return Failure("unknown_outcome", _reason("unknown_outcome", said), status, step=step)
    cls: FailureClass
    if attempt.kind == "not_sent":
        low = attempt.detail.lower()
        cls = (
            "validation"
            if not built
            else ("provider_down" if any(w in low for w in _DOWN) else "transient")
        )
    elif attempt.kind == "refused" or status is None:
        cls = "validation"
    else:
        cls = _status_class(status)
    wait = retry_after_of(attempt) if cls == "rate_limited" else None
    return Failure(cls, _reason(cls, said), status, wait, resendable=True, step=step)


def classify_error(error: BaseException) -> Failure | None:
    """The class of what stopped a step: a refused or unsent write (its attempt), a read that
    failed, or an execute refusal that is a failure (``_BY_CODE``); None for anything else (a
    refusal of the request itself: a bad token, another user's plan)."""
    if isinstance(error, WriteFailedError):
        attempt = error.attempt or Attempt.not_sent(error.reason)
        built = error.__cause__ is None  # prepare raised: nothing could be sent
        return classify_attempt(attempt, "failed", step=error.step, built=built)
    code = getattr(error, "code", None)
    step = getattr(error, "step", None)
    step = step if isinstance(step, int) else None
    if code == "step_failed":  # a read: nothing was written, any answer may be read again
        why = str(getattr(error, "reason", "") or error)
        return classify_attempt(_read_attempt(why), "failed", step=step)
    cls = _BY_CODE.get(str(code))
    if cls is None:
        return None
    return Failure(
        cls, _reason(cls, str(error)[:200]), step=step, resendable=cls != "unknown_outcome"
    )


def _read_attempt(why: str) -> Attempt:
    """A read failure's words as the attempt they describe (``answered NNN`` or an error)."""
    low = why.lower()
    for word in low.replace(":", " ").split():
        if len(word) == 3 and ascii_digits(word) and "answered" in low:
            return Attempt("answered", status=int(word), detail=why)
    if any(w in low for w in _DOWN):
        return Attempt.not_sent(why)
    return Attempt("answered", status=502, detail=why)  # a read that broke off: passing


def _reason(cls: FailureClass, said: str) -> str:
    words = _WORDS[cls]
    return f"{words} ({said[:200]})" if said else words
