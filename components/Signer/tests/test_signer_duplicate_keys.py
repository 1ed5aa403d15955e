"""A signed plan with one key twice is refused (issue 10, hole 6; Kernel SPEC §7).

``json.loads`` keeps the last of two equal keys, so ``{"user": "mallory", "user": "alice"}`` reads
as the signed plan while a reviewer (or another parser that keeps the first) sees "mallory". Each
case signs a plan, picks any object at any depth of the signed document (plan, envelope or top
level) and any key in it, writes the document with that key twice — the altered value first or
last, the key spelled plainly or with a ``\\u`` escape — and checks that the strict loader every
entry point parses with refuses it, naming the key and where it is.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from countersign.kernel import DuplicateKeyError, Plan, Policy, loads_strict
from countersign.planner import make_plan
from countersign.planner.testing import meeting_intents, signed_plan
from countersign.registry import Registry
from countersign.signer import KeyRing, verify_signed_plan

HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _objects(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every non-empty object in ``value``."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        if value:
            out.append(path)
        for k, v in value.items():
            out += _objects(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _objects(v, (*path, i))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _jsonpath(path: tuple[Any, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _altered(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-mallory"
    if isinstance(value, list):
        return [*value, "mallory"]
    if isinstance(value, dict):
        return {**value, "mallory": True}
    return "mallory"


def _key_text(key: str, escaped: bool) -> str:
    if escaped and key:
        return '"' + f"\\u{ord(key[0]):04x}" + json.dumps(key)[2:]
    return json.dumps(key)


def _dump(
    value: Any,
    target: tuple[Any, ...],
    key: str,
    altered: Any,
    position: int,
    escaped: bool,
    path: tuple[Any, ...] = (),
) -> str:
    """JSON text of ``value`` in which the object at ``target`` carries ``key`` twice: the signed
    value where it was, and ``altered`` at ``position`` among the object's members."""
    if isinstance(value, dict):
        members = [
            (json.dumps(k), _dump(v, target, key, altered, position, escaped, (*path, k)))
            for k, v in value.items()
        ]
        if path == target:
            members.insert(position, (_key_text(key, escaped), json.dumps(altered)))
        return "{" + ",".join(f"{k}:{v}" for k, v in members) + "}"
    if isinstance(value, list):
        return (
            "["
            + ",".join(
                _dump(v, target, key, altered, position, escaped, (*path, i))
                for i, v in enumerate(value)
            )
            + "]"
        )
    return json.dumps(value)


@settings(max_examples=200, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents(), data=st.data(), altered_first=st.booleans())
def test_a_duplicate_key_anywhere_in_a_signed_plan_is_refused(
    intent: Any, data: st.DataObject, altered_first: bool, registry: Registry, keyring: KeyRing
) -> None:
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    # A seeded Random: a uniform pick over every object (hypothesis' own integers and
    # sampled_from favour the first element, here the top level).
    rnd = random.Random(data.draw(st.integers(0, 2**64), label="seed"))
    target = rnd.choice(_objects(doc))
    obj = _get(doc, target)
    keys = list(obj)
    key = rnd.choice(keys)
    at = keys.index(key)
    # the altered copy goes anywhere before (altered first) or after (altered last) the signed one
    position = rnd.randint(0, at) if altered_first else rnd.randint(at + 1, len(keys))
    escaped = data.draw(st.booleans(), label="escaped key")
    event("depth " + str(min(len(target), 6)) + ("+" if len(target) > 6 else ""))
    text = _dump(doc, target, key, _altered(obj[key]), position, escaped)

    # The attack is real: a last-wins parser reads the signed value when the altered one is
    # first, and that document verifies.
    naive = json.loads(text)
    if altered_first:
        assert naive == doc
        verify_signed_plan(naive, keys=keyring)

    with pytest.raises(DuplicateKeyError) as info:
        loads_strict(text.encode(), what="signed.json")
    assert info.value.key == key
    assert info.value.path == _jsonpath(target)
    assert "signed.json" in info.value.message and repr(key) in info.value.message
    # and the same document without the duplicate is read exactly as signed
    assert loads_strict(json.dumps(doc).encode(), what="signed.json") == doc
