"""The quick path of ``countersign verify`` only ever accepts what the Signer accepts.

For each tampered document, ring and environment below, ``quick_verify`` either raises
``Unsure`` (the Signer then decides) or accepts — and when it accepts, the Signer
(``verify_signed_plan`` over ``KeyRing.load``) accepts the same plan, hash and key. The pristine
plan must be accepted by the quick path (else ``verify`` would be slow for everyone).
"""

from __future__ import annotations

import base64
import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from countersign.cli.quickverify import (
    DOMAIN,
    MAX_DEPTH,
    QuickVerified,
    Unsure,
    keys_dir_from_env,
    quick_verify,
    quick_verify_file,
    read_json,
)
from countersign.cli.signing import plan_document
from countersign.kernel import (
    MAX_DEPTH as KERNEL_MAX_DEPTH,
)
from countersign.kernel import (
    CountersignError,
    Settings,
    canonical_bytes,
    loads_strict,
    sha256_hex,
    source_registry_dir,
)
from countersign.signer import DOMAIN as SIGNER_DOMAIN
from countersign.signer import KeyRing, signing_message, verify_signed_plan

EXAMPLE = source_registry_dir().parent / "usecases" / "meeting" / "fixtures" / "default.intent.json"
Doc = dict[str, Any]


def full(data: bytes, keys_dir: Path) -> QuickVerified | str:
    """The Signer's verdict: what it accepts, or the error code it refuses with."""
    try:
        v = verify_signed_plan(loads_strict(data, what="doc"), keys=KeyRing.load(keys_dir))
    except CountersignError as e:
        return e.code
    return QuickVerified(v.plan.plan_id, v.plan_hash, v.envelope.pubkey_id)


def quick(data: bytes, keys_dir: Path) -> QuickVerified | None:
    try:
        return quick_verify(read_json(data), keys_dir)
    except Unsure:
        return None


def same_or_unsure(data: bytes, keys_dir: Path) -> QuickVerified | None:
    q = quick(data, keys_dir)
    if q is not None:
        assert full(data, keys_dir) == q
    return q


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Doc]:
    """A home with a ring (k1 retired, k2 active) and a plan signed by k2."""
    home = tmp_path_factory.mktemp("qv") / "home"
    settings = Settings(home=home)
    doc = plan_document(settings, json.loads(EXAMPLE.read_text()), [], {}, now=_now())
    KeyRing.load(settings.keys_dir).rotate(now=_now(), seed=os.urandom(32))
    doc = plan_document(settings, json.loads(EXAMPLE.read_text()), [], {}, now=_now())
    assert doc["signature"]["pubkey_id"] == "k2"
    return settings.keys_dir, doc


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def _b(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_constants_are_the_signers_and_kernels() -> None:
    assert DOMAIN == SIGNER_DOMAIN
    assert MAX_DEPTH == KERNEL_MAX_DEPTH


def test_pristine_and_reformatted_plans_take_the_quick_path(ring: tuple[Path, Doc]) -> None:
    keys, doc = ring
    q = same_or_unsure(_b(doc), keys)
    assert q is not None and q.pubkey_id == "k2" and q.plan_id == doc["plan"]["plan_id"]
    pretty = json.dumps(doc, indent=3, sort_keys=True, ensure_ascii=False).encode()
    assert same_or_unsure(pretty, keys) == q


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return edit


_DELETE = object()
_TS = "2026-11-22T10:00:00.000Z"

DOC_EDITS: dict[str, Callable[[Doc], None]] = {
    "extra top-level key": _set("extra", 1),
    "no plan_hash": _set("plan_hash", _DELETE),
    "plan_hash upper case": lambda d: d.update(plan_hash=d["plan_hash"].upper()),
    "plan_hash wrong": _set("plan_hash", "0" * 64),
    "plan_hash a number": _set("plan_hash", 7),
    "plan a list": _set("plan", []),
    "signature a string": _set("signature", "x"),
    "plan value changed": _set("plan.plan_id", "01M81B5H80YH5R5P27F7YJ2FX0"),
    "plan_id lower case": lambda d: d["plan"].update(plan_id=d["plan"]["plan_id"].lower()),
    "algo lower case": _set("signature.algo", "ed25519"),
    "algo missing": _set("signature.algo", _DELETE),
    "extra envelope field": _set("signature.extra", "x"),
    "signer empty": _set("signature.signer", ""),
    "signer too long": _set("signature.signer", "x" * 129),
    "signer changed": _set("signature.signer", "mallory@system"),
    "ts with offset": _set("signature.ts", "2026-11-22T10:00:00.000+00:00"),
    "ts without ms": _set("signature.ts", "2026-11-22T10:00:00Z"),
    "ts with us": _set("signature.ts", "2026-11-22T10:00:00.000000Z"),
    "ts lower z": _set("signature.ts", "2026-11-22T10:00:00.000z"),
    "ts not a date": _set("signature.ts", "2026-02-30T10:00:00.000Z"),
    "ts year 999": _set("signature.ts", "0999-11-22T10:00:00.000Z"),
    "ts a number": _set("signature.ts", 1),
    "nonce lower case": lambda d: d["signature"].update(nonce=d["signature"]["nonce"].lower()),
    "nonce not a ulid": _set("signature.nonce", "8" * 26),
    "signature unpadded": lambda d: d["signature"].update(
        signature=d["signature"]["signature"].rstrip("=")
    ),
    "signature url-safe": lambda d: d["signature"].update(
        signature=d["signature"]["signature"].replace("+", "-").replace("/", "_")
    ),
    "signature other bytes": _set(
        "signature.signature", base64.b64encode(bytes(64)).decode("ascii")
    ),
    "signature non-zero padding bits": lambda d: d["signature"].update(
        signature=d["signature"]["signature"][:85]
        + ("B" if d["signature"]["signature"][85] == "A" else "A")
        + "=="
    ),
    "pubkey_id unknown": _set("signature.pubkey_id", "k9"),
    "pubkey_id retired key": _set("signature.pubkey_id", "k1"),
    "pubkey_id bad characters": _set("signature.pubkey_id", "k 2"),
}


@pytest.mark.parametrize("name", DOC_EDITS)
def test_tampered_documents_are_never_accepted_alone(ring: tuple[Path, Doc], name: str) -> None:
    keys, doc = ring
    d = copy.deepcopy(doc)
    DOC_EDITS[name](d)
    q = same_or_unsure(_b(d), keys)
    assert q is None, name  # each of these the Signer refuses
    assert isinstance(full(_b(d), keys), str)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("a key twice", b'{"plan": {}, "plan": {}, "signature": {}, "plan_hash": ""}'),
        ("a byte-order mark", b"\xef\xbb\xbf{}"),
        ("NaN", b'{"plan": NaN}'),
        ("nested too deep", b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)),
        ("utf-16", "{}".encode("utf-16")),
        ("latin-1", '{"plan": "é"}'.encode("latin-1")),
    ],
)
def test_documents_loads_strict_refuses_are_refused_here(name: str, data: bytes) -> None:
    with pytest.raises(CountersignError):
        loads_strict(data, what=name)
    with pytest.raises(Exception):
        read_json(data)


def test_a_duplicate_key_inside_the_signed_plan_is_left_to_the_signer(
    ring: tuple[Path, Doc],
) -> None:
    keys, doc = ring
    text = json.dumps(doc)
    dup = text.replace('"plan_id": ', '"plan_id": "x", "plan_id": ', 1).encode()
    assert quick(dup, keys) is None
    assert full(dup, keys) == "document_duplicate_key"


RING_EDITS: dict[str, Callable[[Path], None]] = {
    "k2 revoked": lambda k: _ring(k, lambda r: r["keys"][1].update(status="revoked")),
    "two active": lambda k: _ring(k, lambda r: r["keys"][0].update(status="active")),
    "version 2": lambda k: _ring(k, lambda r: r.update(version=2)),
    "version true": lambda k: _ring(k, lambda r: r.update(version=True)),
    "extra field": lambda k: _ring(k, lambda r: r.update(extra=1)),
    "extra key field": lambda k: _ring(k, lambda r: r["keys"][1].update(extra=1)),
    "created_at other spelling": lambda k: _ring(
        k, lambda r: r["keys"][1].update(created_at="2026-11-22T10:00:00Z")
    ),
    "duplicate id": lambda k: _ring(k, lambda r: r["keys"].append(dict(r["keys"][1]))),
    "k2 public key replaced": lambda k: _ring(
        k, lambda r: r["keys"][1].update(public_key=r["keys"][0]["public_key"])
    ),
    "seed readable by others": lambda k: (k / "k2.seed").chmod(0o644),
    "seed not 32 bytes": lambda k: _write(k / "k2.seed", base64.b64encode(b"x" * 31).decode()),
    "retired seed readable by group": lambda k: (k / "k1.seed").chmod(0o640),
    "no ring": lambda k: (k / "ring.json").unlink(),
}


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _ring(keys: Path, edit: Callable[[Doc], None]) -> None:
    path = keys / "ring.json"
    ring = json.loads(path.read_text())
    edit(ring)
    path.write_text(json.dumps(ring))


def _copy_ring(src: Path, dst: Path) -> Path:
    dst.mkdir(mode=0o700)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
        (dst / f.name).chmod(f.stat().st_mode & 0o777)
    return dst


@pytest.mark.parametrize("name", RING_EDITS)
def test_rings_the_signer_refuses_are_left_to_it(
    ring: tuple[Path, Doc], tmp_path: Path, name: str
) -> None:
    keys, doc = ring
    k = _copy_ring(keys, tmp_path / "keys")
    assert same_or_unsure(_b(doc), k) is not None  # the copy is sound before the edit
    RING_EDITS[name](k)
    try:
        assert same_or_unsure(_b(doc), k) is None, name
    finally:
        for f in k.iterdir():
            f.chmod(0o600)


def test_a_plan_signed_under_another_contract_is_the_one_gap(
    ring: tuple[Path, Doc], tmp_path: Path
) -> None:
    """Documented (Cli SPEC, "verify"): a validly signed plan that breaks *this* version's plan
    contract is accepted by the quick path; the Signer (``verify --contract``) refuses it."""
    keys, doc = ring
    plan = copy.deepcopy(doc["plan"])
    plan["field_of_another_version"] = True
    digest = sha256_hex(canonical_bytes(plan))
    env = dict(doc["signature"])
    seed = base64.b64decode((keys / "k2.seed").read_text())
    from nacl.signing import SigningKey

    sig = SigningKey(seed).sign(signing_message(env, digest)).signature
    env["signature"] = base64.b64encode(sig).decode("ascii")
    data = _b({"plan": plan, "signature": env, "plan_hash": digest})
    assert quick(data, keys) is not None
    assert full(data, keys) == "signature_malformed"


@pytest.mark.parametrize(
    ("environ", "expect"),
    [
        ({"COUNTERSIGN_HOME": "/x/h"}, Path("/x/h/keys")),
        ({"countersign_home": "/x/l"}, Path("/x/l/keys")),
        ({"Countersign_Home": "/x/m", "COUNTERSIGN_N8N_PORT": "1"}, Path("/x/m/keys")),
        ({}, None),
    ],
)
def test_keys_dir_is_the_settings_one(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expect: Path | None
) -> None:
    for k in list(os.environ):
        if k.upper().startswith("COUNTERSIGN_"):
            monkeypatch.delenv(k)
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    assert keys_dir_from_env(environ) == Settings().keys_dir
    if expect is not None:
        assert keys_dir_from_env(environ) == expect


@pytest.mark.parametrize(
    "environ",
    [
        {"COUNTERSIGN_SIGNING_KEY": base64.b64encode(bytes(32)).decode()},
        {"countersign_signing_key": "x"},
        {"COUNTERSIGN_HOME": "/a", "countersign_home": "/b"},
        {"COUNTERSIGN_HOME": ""},
    ],
)
def test_environments_the_quick_path_leaves_to_settings(environ: dict[str, str]) -> None:
    with pytest.raises(Unsure):
        keys_dir_from_env(environ)


def test_yaml_files_are_left_to_the_signer(ring: tuple[Path, Doc], tmp_path: Path) -> None:
    keys, doc = ring
    f = tmp_path / "plan.yaml"
    f.write_text(json.dumps(doc))
    with pytest.raises(Unsure):
        quick_verify_file(f, {"COUNTERSIGN_HOME": str(keys.parent)})
    g = tmp_path / "plan.json"
    g.write_text(json.dumps(doc))
    assert quick_verify_file(g, {"COUNTERSIGN_HOME": str(keys.parent)}).pubkey_id == "k2"
