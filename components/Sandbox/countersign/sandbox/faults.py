"""The fault switch every sandbox HTTP provider has (Sandbox SPEC "Faults", issue 26 §3): a test or
a person arms the next answers of a provider to fail in a chosen way, so each failure class is
tested from a real answer — a status with its headers (503, 429 with ``Retry-After``, 401, 409,
422), or a dropped connection (the socket closed with no answer), either before the provider acts
or after it acted (``act``: the write happened and the answer is lost, the outcome a client cannot
know). A refused port needs no switch: a port nobody listens on (``free_port``) is one.

``POST /_sandbox/faults`` ``{"faults": [{"status": 429, "retry_after": 2, "times": 1,
"method": "POST", "path": "/checkout"}, {"drop": true, "act": true}]}`` arms them (in order, each
for ``times`` matching requests); ``GET /_sandbox/faults`` says what is armed and every request
that arrived (``seen``: method, path, the fault it got; the newest ``SEEN_MAX``),
``DELETE /_sandbox/faults`` disarms and forgets.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

__all__ = ["FAULTS_PATH", "Fault", "FaultError", "Faults"]

FAULTS_PATH = "/_sandbox/faults"
#: how many requests ``seen`` keeps (the newest; a standalone sandbox runs for days)
SEEN_MAX = 10_000


class FaultError(ValueError):
    """A fault that cannot be armed (its field named)."""


@dataclass(frozen=True)
class Fault:
    """One way to fail (module docstring)."""

    status: int = 503
    times: int = 1
    method: str = "*"
    path: str = "*"
    retry_after: float | None = None
    drop: bool = False
    act: bool = False

    @classmethod
    def of(cls, raw: Any) -> Fault:
        """A fault from its JSON form.

        Raises:
            FaultError: not an object, an unknown field, or a value out of range.
        """
        if not isinstance(raw, Mapping):
            raise FaultError("a fault is an object")
        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise FaultError(f"unknown fault field(s) {unknown}")
        try:
            fault = cls(**{k: v for k, v in raw.items()})
        except TypeError as e:
            raise FaultError(str(e)) from e
        fault.check()
        return fault

    def check(self) -> None:
        """Refuse values out of range (``FaultError``)."""
        if isinstance(self.status, bool) or not isinstance(self.status, int):
            raise FaultError("status must be a number")
        if not 100 <= self.status <= 599:
            raise FaultError("status must be 100..599")
        if isinstance(self.times, bool) or not isinstance(self.times, int) or self.times < 1:
            raise FaultError("times must be a whole number ≥ 1")
        if self.retry_after is not None and not 0 <= float(self.retry_after) <= 3600:
            raise FaultError("retry_after must be 0..3600 seconds")
        if not isinstance(self.method, str) or not isinstance(self.path, str):
            raise FaultError("method and path are text (globs)")

    def matches(self, method: str, path: str) -> bool:
        """Whether this fault is about ``method path``."""
        return fnmatchcase(method.upper(), self.method.upper()) and fnmatchcase(path, self.path)

    def answer(self) -> tuple[int, dict[str, Any], dict[str, str]]:
        """The status, JSON body and headers of the faulty answer."""
        body: dict[str, Any] = {"error": "sandbox fault", "status": self.status}
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
            headers["Retry-After"] = f"{self.retry_after:g}"
        return self.status, body, headers


@dataclass
class Faults:
    """The armed faults of one provider, and the requests it saw (thread-safe)."""

    armed: list[list[Any]] = field(default_factory=list)  # [fault, answers left]
    seen: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def arm(self, *faults: Fault) -> None:
        """Arm ``faults`` after those already armed."""
        with self._lock:
            self.armed.extend([f, f.times] for f in faults)

    def clear(self) -> None:
        """Disarm everything and forget the requests seen."""
        with self._lock:
            self.armed.clear()
            self.seen.clear()

    def take(self, method: str, path: str) -> Fault | None:
        """The fault this request gets (its count spent), if one is armed for it; every request
        is recorded in ``seen``."""
        with self._lock:
            hit: Fault | None = None
            for entry in self.armed:
                if entry[1] > 0 and entry[0].matches(method, path):
                    entry[1] -= 1
                    hit = entry[0]
                    break
            self.armed[:] = [e for e in self.armed if e[1] > 0]
            self.seen.append({"method": method, "path": path, "fault": _said(hit)})
            del self.seen[:-SEEN_MAX]
            return hit

    def count(self, method: str, path: str) -> int:
        """How many ``method path`` requests arrived (faulty or not)."""
        with self._lock:
            return sum(1 for s in self.seen if s["method"] == method and s["path"] == path)

    def admin(self, method: str, body: Any) -> tuple[int, dict[str, Any]]:
        """``/_sandbox/faults``: GET the state, POST to arm, DELETE to disarm."""
        if method == "POST":
            raw = body.get("faults") if isinstance(body, Mapping) else None
            if not isinstance(raw, list) or not raw:
                return 422, {"error": "faults: a non-empty list of faults"}
            try:
                self.arm(*(Fault.of(f) for f in raw))
            except FaultError as e:
                return 422, {"error": str(e)}
        elif method == "DELETE":
            self.clear()
        elif method != "GET":
            return 405, {"error": f"{method} {FAULTS_PATH}: GET, POST or DELETE"}
        with self._lock:
            return 200, {
                "armed": [{**_said(f), "left": n} for f, n in self.armed],
                "seen": list(self.seen),
            }


def _said(f: Fault | None) -> dict[str, Any]:
    if f is None:
        return {}
    out: dict[str, Any] = {"drop": True} if f.drop else {"status": f.status}
    if f.retry_after is not None:
        out["retry_after"] = f.retry_after
    if f.act:
        out["act"] = True
    return out
