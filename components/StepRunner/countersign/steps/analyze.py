"""``system.analyze`` in-process: the registry's pure Code-node computations, run in Python.

An ``Analyzer`` step of ``system.analyze`` only computes over earlier steps' outputs (no I/O, no
clock, no randomness), so running it as an n8n execution costs an execution (~40–100 ms here)
for microseconds of work (StepRunner SPEC, pure computations in-process). ``run_in_process``
computes the same item n8n's Code node would return, under two rules that keep it identical to
n8n:

- each Python function mirrors one exact ``jsCode`` text; the registry op's code is checked by
  its sha256 against the text the function was written from, and a changed registry text means
  the step runs on n8n again (``None``), never a stale Python copy;
- each function accepts only inputs whose JavaScript reading is unambiguous here (ISO 8601
  date-times with a zone and at most milliseconds, numbers that are finite, decimal price
  strings, lists and objects where the code expects them); anything else raises
  ``NotInProcess`` and the step runs on n8n, which gives whatever JavaScript gives.

Equality with n8n is tested on the use-case fixtures and on generated inputs against a real n8n
(tests/test_analyze_in_process.py).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from countersign.registry import Operation

__all__ = ["IN_PROCESS", "NotInProcess", "js_code_sha256", "run_in_process"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})", re.ASCII
)
_DECIMAL = re.compile(r"-?\d{1,12}(\.\d{1,6})?", re.ASCII)


class NotInProcess(Exception):  # noqa: N818 - a signal to fall back, never raised to a caller
    """The inputs are outside what the Python mirror reads exactly as JavaScript does."""


def js_code_sha256(op: Operation) -> str | None:
    """sha256 of the op's ``jsCode`` constant (None when it has none)."""
    spec = op.params.get("jsCode")
    code = spec.const if spec is not None else None
    return hashlib.sha256(code.encode()).hexdigest() if isinstance(code, str) else None


def _ms(text: Any) -> int:
    """``Date.parse`` of an ISO 8601 date-time with a zone, as epoch milliseconds."""
    if not isinstance(text, str) or not _ISO.fullmatch(text):
        raise NotInProcess(f"not an ISO date-time with a zone: {text!r}")
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise NotInProcess(str(e)) from e
    return (t - _EPOCH) // timedelta(milliseconds=1)


def _iso(ms: int) -> str:
    """``new Date(ms).toISOString()`` for years 0001–9999."""
    try:
        t = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError as e:
        raise NotInProcess(str(e)) from e
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}."
        f"{t.microsecond // 1000:03d}Z"
    )


def _number(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        raise NotInProcess(f"not a finite number: {x!r}")
    if abs(x) > 1e12:
        raise NotInProcess(f"number out of the mirrored range: {x!r}")
    return float(x)


def find_overlap(args: Mapping[str, Any]) -> dict[str, Any]:
    """Mirror of ``system.analyze.find_overlap`` (see the registry for the JavaScript)."""
    inputs = args.get("inputs")
    if not isinstance(inputs, list):
        raise NotInProcess("inputs is not a list")
    busy: list[tuple[int, int]] = []
    for i in inputs:
        if not isinstance(i, dict):
            raise NotInProcess("an input is not an object")
        blocks = i.get("busy") or []
        if not isinstance(blocks, list):
            raise NotInProcess("busy is not a list")
        for b in blocks:
            if not isinstance(b, list) or len(b) != 2:
                raise NotInProcess("a busy block is not a [start, end] pair")
            busy.append((_ms(b[0]), _ms(b[1])))
    busy.sort(key=lambda x: x[0])  # Array.prototype.sort is stable, as is list.sort
    duration = _number(args.get("duration_min"))
    need = duration * 60000
    t = _ms(args.get("window_start"))
    end = _ms(args.get("window_end"))
    slots: list[tuple[int, int]] = []
    for s, e in busy:
        if s - t >= need:
            slots.append((t, s))
        t = max(t, e)
    if end - t >= need:
        slots.append((t, end))
    return {"slots": [{"start": _iso(s), "end": _iso(e)} for s, e in slots]}


def _js_round(x: float) -> float:
    """``Math.round``: the nearest integer, halves toward +infinity."""
    r = math.floor(x)
    return float(r + 1 if x - r >= 0.5 else r)


def _cents(p: Any) -> float:
    """``Math.round(parseFloat(p) * 100)`` for a decimal string or a finite number."""
    if isinstance(p, str):
        if not _DECIMAL.fullmatch(p):
            raise NotInProcess(f"not a decimal price: {p!r}")
        value = float(p)
    else:
        value = _number(p)
    return _js_round(value * 100)


def _to_fixed_2(x: float) -> str:
    """``Number.prototype.toFixed(2)`` for the totals this code makes (cents × n / 100, never
    on a tie, |x| < 1e12)."""
    text = f"{x:.2f}"
    return "0.00" if text == "-0.00" else text


def rank_offers(args: Mapping[str, Any]) -> dict[str, Any]:
    """Mirror of ``system.analyze.rank_offers`` (see the registry for the JavaScript)."""
    raw = args.get("inputs")
    inputs = raw if isinstance(raw, list) else [raw]  # [].concat(a.inputs)
    quantity = args.get("quantity")
    n: float = 1.0
    if (
        isinstance(quantity, int | float)
        and not isinstance(quantity, bool)
        and math.isfinite(quantity)
        and float(quantity).is_integer()
        and quantity > 0
    ):
        n = _number(quantity)
    limit = _cents(args.get("max_price"))
    offers: list[tuple[float, dict[str, Any]]] = []
    for i in inputs:
        if not isinstance(i, dict):
            raise NotInProcess("an input is not an object")
        listed = i.get("offers") or []
        if not isinstance(listed, list):
            raise NotInProcess("offers is not a list")
        for o in listed:
            if not isinstance(o, dict):
                raise NotInProcess("an offer is not an object")
            price = _cents(o.get("price"))
            total = _to_fixed_2(price * n / 100)
            if _cents(total) <= limit:
                offers.append((price, {**o, "total": total}))
    offers.sort(key=lambda x: x[0])
    return {"shortlist": [o for _, o in offers[:5]]}


#: (uses, call) → (sha256 of the jsCode the function mirrors, the function)
IN_PROCESS: dict[tuple[str, str], tuple[str, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    ("system.analyze", "find_overlap"): (
        "c2b95c72d33a69113fb546b18b728ac2ee2bd65afb3e22d30e6129cfda4df9cd",
        find_overlap,
    ),
    ("system.analyze", "rank_offers"): (
        "75ee5b0ec48fcbfd193613b69e66397afca5bf291e3173190f40f435520c8ab3",
        rank_offers,
    ),
}


def run_in_process(op: Operation, uses: str, call: str, args: Mapping[str, Any]) -> Any | None:
    """The item n8n's Code node would return for this step, or None when the step must run on
    n8n (no mirror, the registry's code changed, or inputs outside the mirrored range)."""
    found = IN_PROCESS.get((uses, call))
    if found is None or js_code_sha256(op) != found[0]:
        return None
    try:
        return found[1](args)
    except NotInProcess:
        return None
