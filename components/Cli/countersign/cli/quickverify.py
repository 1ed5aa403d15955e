"""The quick path of ``countersign verify`` (Cli SPEC, "verify"): standard library, ``rfc8785``
and PyNaCl only — no typer, no pydantic, no Settings, no models — so a CI pipeline that verifies
one plan per call pays a blink, not the models' start-up (issue 28 §5, ≤ 200 ms).

It checks everything the Signer checks about the *signature*
(``countersign.signer.core.verify_signed_plan``): the document's three parts, the envelope exactly
as ``sign_plan`` writes it, the plan's RFC 8785 hash, the key's status in the ring (and the ring
as ``KeyRing.load`` reads it: one active key, seed files 0600 holding 32 bytes) and Ed25519 over
the same domain-separated message. The file is read at least as strictly as ``loads_strict``
reads it (UTF-8 without BOM or NUL, no key twice, no NaN, bounded depth).

It only ever *accepts*: on anything else — every refusal, a YAML file, a key from the
environment, a spelling the signer does not write, a ring it does not expect, any exception —
it raises ``Unsure`` and the Signer decides (``verify._full_verify``), so every refusal and its
one line are the Signer's own. ``test_cli_verify.py`` holds the two equal over a corpus of
tampered documents and rings. Not checked here: the plan against *this* version's plan contract
(the Signer's last step, ``_plan``); a plan whose signature holds was made by ``sign_plan`` from a
valid ``Plan`` of the version that signed it; ``verify --contract`` adds the check.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import stat
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

__all__ = [
    "DOMAIN",
    "QuickVerified",
    "Unsure",
    "keys_dir_from_env",
    "ok_line",
    "quick_verify",
    "quick_verify_file",
    "read_json",
]

#: ``countersign.signer.DOMAIN`` (a test holds them equal; importing the Signer loads the models)
DOMAIN = b"countersign/plan/v1\x00"
#: ``countersign.kernel.MAX_DEPTH`` (a test holds them equal)
MAX_DEPTH = 64
_DOCUMENT = frozenset({"plan", "signature", "plan_hash"})
_ENVELOPE = frozenset({"algo", "signer", "ts", "nonce", "signature", "pubkey_id"})
_KEY_FIELDS = frozenset(
    {"pubkey_id", "public_key", "status", "created_at", "retired_at", "revoked_at"}
)
_KEY_REQUIRED = frozenset({"pubkey_id", "public_key", "status", "created_at"})
_KEY_STATUS = frozenset({"active", "retired", "revoked"})
#: ``format_utc``'s one spelling (from year 1000 on): milliseconds and ``Z``
_TS = re.compile(r"[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
_TS_FIELDS = ((0, 4), (5, 7), (8, 10), (11, 13), (14, 16), (17, 19))
#: a ULID as ``parse_ulid`` returns it (upper case)
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_SIGNATURE = re.compile(r"[A-Za-z0-9+/]{86}==")
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class Unsure(Exception):  # noqa: N818 - not an error: "the Signer decides"
    """The quick path does not vouch for this document; the Signer decides."""


class QuickVerified(NamedTuple):
    """What ``verify`` prints for a plan whose signature holds (a named tuple: ``dataclasses``
    would import ``inspect`` and ``ast``, a tenth of this path's start-up)."""

    plan_id: str
    plan_hash: str
    pubkey_id: str


def ok_line(verified: QuickVerified) -> str:
    """What ``verify`` prints when the signature holds (either path)."""
    return f"ok plan_id={verified.plan_id} plan_hash={verified.plan_hash} key={verified.pubkey_id}"


def _need(ok: bool) -> None:
    if not ok:
        raise Unsure


def _unsure(*_: Any) -> NoReturn:
    raise Unsure


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    _need(len(out) == len(pairs))  # a key twice
    return out


def _depth_ok(value: Any) -> None:
    """No container deeper than ``MAX_DEPTH`` (as ``loads_strict`` counts: the root is 0)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            _need(depth < MAX_DEPTH)
            children = v.values() if isinstance(v, dict) else v
            stack.extend((c, depth + 1) for c in children)


def read_json(data: bytes) -> Any:
    """A JSON document read at least as strictly as ``loads_strict`` reads it; ``Unsure``
    otherwise (the Signer's path then reads it and names what is wrong)."""
    _need(not data.startswith((b"\xef\xbb\xbf", b"\xfe\xff", b"\xff\xfe")) and b"\x00" not in data)
    value = json.loads(data.decode("utf-8"), object_pairs_hook=_pairs, parse_constant=_unsure)
    _depth_ok(value)
    return value


def _ts(value: Any) -> None:
    """A timestamp spelled as ``format_utc`` writes it, and a real date."""
    _need(type(value) is str and _TS.fullmatch(value) is not None)
    # the fields by position (the pattern holds only digits there); datetime() refuses a day, hour
    # or second that does not exist (ValueError: Unsure); strptime would import locale + calendar
    y, mo, d, h, mi, sec = (int(value[a:b]) for a, b in _TS_FIELDS)
    datetime(y, mo, d, h, mi, sec)


def _envelope(env: Any) -> dict[str, str]:
    """The envelope, only when it is exactly as ``sign_plan`` writes one."""
    _need(isinstance(env, dict) and set(env) == _ENVELOPE)
    _need(all(type(v) is str for v in env.values()))
    _need(env["algo"] == "Ed25519" and 1 <= len(env["signer"]) <= 128)
    env["signer"].encode("utf-8")  # a lone surrogate: UnicodeEncodeError, Unsure
    _ts(env["ts"])
    _need(_ULID.fullmatch(env["nonce"]) is not None)
    _need(_KEY_ID.fullmatch(env["pubkey_id"]) is not None)
    sig = env["signature"]
    _need(_SIGNATURE.fullmatch(sig) is not None)
    _need(base64.b64encode(base64.b64decode(sig, validate=True)).decode("ascii") == sig)
    return dict(env)


def _key_entry(info: Any, keys_dir: Path) -> None:
    """One ring entry as ``KeyInfo`` accepts it; its seed file as ``KeyRing.load`` does."""
    _need(isinstance(info, dict) and _KEY_REQUIRED <= set(info) <= _KEY_FIELDS)
    pid = info["pubkey_id"]
    _need(type(pid) is str and _KEY_ID.fullmatch(pid) is not None)
    _need(type(info["public_key"]) is str and info["status"] in _KEY_STATUS)
    _ts(info["created_at"])
    for when in ("retired_at", "revoked_at"):
        if info.get(when) is not None:
            _ts(info[when])
    if info["status"] != "revoked":
        _seed_ok(keys_dir / f"{pid}.seed")


def _ring_entries(keys_dir: Path) -> dict[str, Mapping[str, Any]]:
    """The ring's keys by id, only when ``KeyRing.load`` would read the ring without complaint."""
    ring = read_json((keys_dir / "ring.json").read_bytes())
    _need(isinstance(ring, dict) and "keys" in ring and set(ring) <= {"version", "keys"})
    _need(type(ring.get("version", 1)) is int and ring.get("version", 1) == 1)
    _need(isinstance(ring["keys"], list))
    entries: dict[str, Mapping[str, Any]] = {}
    for info in ring["keys"]:
        _key_entry(info, keys_dir)
        _need(info["pubkey_id"] not in entries)
        entries[info["pubkey_id"]] = info
    _need(sum(1 for i in entries.values() if i["status"] == "active") <= 1)
    return entries


def _seed_ok(path: Path) -> None:
    """A seed file, when there is one, as ``KeyRing.load`` accepts it (0600, 32 bytes base64).
    Read only to be sure the Signer would not refuse the ring; the seed is dropped at once."""
    if not path.exists():
        return
    _need(not stat.S_IMODE(path.stat().st_mode) & 0o077)
    _need(len(base64.b64decode(path.read_text().strip(), validate=True)) == 32)


def quick_verify(document: Any, keys_dir: Path) -> QuickVerified:
    """Accept a signed-plan document whose signature holds under the ring in ``keys_dir``.

    Raises:
        Unsure: anything else (a refusal included, any exception on the way): ``verify`` then
            asks the Signer.
    """
    try:
        return _accept(document, keys_dir)
    except Exception as e:  # any doubt at all goes to the Signer, which names it
        raise Unsure from e


def _accept(document: Any, keys_dir: Path) -> QuickVerified:
    import rfc8785  # noqa: PLC0415 - the quick path's own needs, imported when it runs
    from nacl.signing import VerifyKey  # noqa: PLC0415

    _need(isinstance(document, dict) and set(document) == _DOCUMENT)
    plan, stated = document["plan"], document["plan_hash"]
    _need(isinstance(plan, dict) and type(stated) is str)
    env = _envelope(document["signature"])
    plan_id = plan.get("plan_id")
    _need(type(plan_id) is str and _ULID.fullmatch(plan_id) is not None)
    digest = hashlib.sha256(rfc8785.dumps(plan)).hexdigest()
    _need(digest == stated)
    info = _ring_entries(keys_dir).get(env["pubkey_id"])
    if info is None or info["status"] not in {"active", "retired"}:
        raise Unsure
    key = VerifyKey(base64.b64decode(info["public_key"]))  # as KeyRing.verify_key decodes it
    # countersign.signer.signing_message: domain tag + canonical {envelope - signature, plan_hash}
    body = {k: v for k, v in env.items() if k != "signature"}
    body["plan_hash"] = digest
    key.verify(DOMAIN + rfc8785.dumps(body), base64.b64decode(env["signature"], validate=True))
    return QuickVerified(plan_id=plan_id, plan_hash=digest, pubkey_id=env["pubkey_id"])


def keys_dir_from_env(environ: Mapping[str, str]) -> Path:
    """``Settings().keys_dir`` as the environment gives it (names without regard to case, as
    pydantic-settings reads them).

    Raises:
        Unsure: a signing key in the environment (``open_keyring`` then merges rings), or a
            home given twice or empty.
    """
    _need("COUNTERSIGN_SIGNING_KEY" not in {k.upper() for k in environ})
    homes = [v for k, v in environ.items() if k.upper() == "COUNTERSIGN_HOME"]
    _need(len(homes) <= 1 and all(homes))
    if homes:
        return Path(homes[0]) / "keys"
    import platformdirs  # noqa: PLC0415 - Settings' default home, only when none is set

    return Path(platformdirs.user_data_dir("countersign", appauthor=False)) / "keys"


def quick_verify_file(file: Path, environ: Mapping[str, str]) -> QuickVerified:
    """The quick path over a file (read as ``read_document`` would: JSON unless ``.yaml``/``.yml``).

    Raises:
        Unsure: on any doubt; the Signer decides.
    """
    _need(file.suffix not in {".yaml", ".yml"})
    try:
        document = read_json(file.read_bytes())
    except Exception as e:  # unreadable, not JSON, not strict: the Signer's path names it
        raise Unsure from e
    return quick_verify(document, keys_dir_from_env(environ))
