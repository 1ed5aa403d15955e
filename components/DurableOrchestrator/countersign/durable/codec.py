"""Payload encryption for Temporal: every payload a client or worker sends is AES-256-GCM sealed.

Responsibility: keep signed plans, e-mail addresses and approval tokens out of Temporal's history
in clear, so that opening the Temporal UI (or reading its database) shows ciphertext; the API's
codec endpoint (Api SPEC, ``/codec/decode``) decrypts for the person the payload belongs to.

An encrypted payload (DurableOrchestrator LLD §codec)::

    metadata  encoding              = binary/encrypted
              encryption-key-id     = p1            (which payload key sealed it)
              countersign-user      = u-3f9c…       (the owner's opaque id; ``*``: admins only)
              countersign-workflow  = watch-<plan>  (when the SDK names the run; may be absent)
    data      nonce (12 bytes) ‖ AES-256-GCM(key, nonce, inner Payload protobuf, aad)

The owner, workflow and key id are the associated data, so none of them can be changed without
the tag failing: a person cannot relabel another's payload as theirs to get it decrypted.

The owner is read from the payload itself: the pydantic converter writes our models as JSON, and
every model that carries a person's data (``WatchInput``, ``PlanInput``, ``StepCall`` …) has a
top-level ``user_id``; the label is that person's *opaque id* (``PayloadKeys.opaque_user``:
``u-`` and 24 hex digits of HMAC-SHA256 under a key derived from the ring's first payload key), so
whoever reaches the Temporal UI sees no e-mail address — the same opaque id is the runs'
``user_id`` search attribute. Any other payload (results, summaries, query answers) is labelled ``*``,
and the codec endpoint lets its run's owner read it through ``countersign-workflow`` (the plan's
owner), else only an admin.

Invariants: decoding a payload that is not ``binary/encrypted`` returns it unchanged (old
histories and the checked-in golden histories replay); a sealed payload decodes with any key
whose id the ring knows, so a key can be rotated (``rotate_payload_key``) while older histories
still decode; a payload that does not authenticate raises ``PayloadTamperedError``, never returns
garbage. Keys live in ``<home>/keys/payload-<id>.key`` (0600, base64 of 32 random bytes), apart
from the signing seeds, and are never printed or logged.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Self

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from countersign.kernel import DocumentError, InputError, KeyRingError, loads_strict

__all__ = [
    "ANY_USER",
    "ENCODING",
    "META_KEY_ID",
    "META_USER",
    "META_WORKFLOW",
    "OPAQUE_USER_PREFIX",
    "EncryptionCodec",
    "PayloadCodecError",
    "PayloadKeyUnknownError",
    "PayloadKeys",
    "PayloadTamperedError",
    "opaque_user_of",
    "payload_codec",
    "payload_owner",
    "payload_workflow",
    "rotate_payload_key",
]

ENCODING = b"binary/encrypted"
META_KEY_ID = "encryption-key-id"
META_USER = "countersign-user"
META_WORKFLOW = "countersign-workflow"
#: the owner label of a payload that names no person: only an admin (or the run's owner, through
#: ``countersign-workflow``) may read it
ANY_USER = "*"
#: how an opaque user id starts (``u-`` and 24 hex digits): what the ``countersign-user`` label and
#: the ``user_id`` search attribute hold instead of the person's address
OPAQUE_USER_PREFIX = "u-"
_OPAQUE_HEX = 24
_USER_KEY_LABEL = b"countersign-opaque-user-v1"

_NONCE = 12
_KEY_FILE = re.compile(r"^payload-(p(\d{1,6}))\.key$", re.ASCII)
_AAD_PREFIX = b"countersign-payload-v1"


class PayloadCodecError(InputError):
    """A Temporal payload cannot be decrypted (names the key id and, when known, the owner)."""

    code: ClassVar[str] = "payload_undecodable"


class PayloadKeyUnknownError(PayloadCodecError):
    """A payload was sealed with a key this process does not hold."""

    code: ClassVar[str] = "payload_key_unknown"


class PayloadTamperedError(PayloadCodecError):
    """A payload's ciphertext, key id, owner or workflow label was changed (GCM tag fails)."""

    code: ClassVar[str] = "payload_tampered"


@dataclass(frozen=True, repr=False)
class PayloadKeys:
    """The payload keys by id (``p1``, ``p2`` …); the highest number seals, every one opens."""

    keys: Mapping[str, bytes]
    active: str

    def __repr__(self) -> str:  # never the key bytes
        return f"PayloadKeys(ids={sorted(self.keys)}, active={self.active!r})"

    @classmethod
    def load(cls, folder: Path, *, create: bool = False) -> PayloadKeys:
        """Read ``folder/payload-<id>.key`` files; with ``create``, make ``p1`` when none exists.

        Raises:
            KeyRingError: no key (and not ``create``), a key file others can read, or one that is
                not base64 of 32 bytes (names the file).
        """
        keys = _read_keys(folder)
        if not keys and create:
            _write_key(folder, "p1")
            keys = _read_keys(folder)
        if not keys:
            raise KeyRingError(
                f"no payload key in {folder}; the API and the worker create payload-p1.key there"
            )
        active = max(keys, key=lambda k: int(k[1:]))
        return cls(keys=keys, active=active)

    def opaque_user(self, user_id: str) -> str:
        """The person's opaque id: ``u-`` and the first 24 hex digits (96 bits) of
        HMAC-SHA256(user key, user id), where the user key is HMAC-SHA256(first payload key,
        ``countersign-opaque-user-v1``) — the ring's lowest-numbered key, so a rotation keeps every
        opaque id (retiring ``p1`` changes them all). ``*`` stays ``*``. Every other id is hashed,
        one shaped like an opaque id too (else a person named ``u-…`` could claim another's
        label)."""
        if user_id == ANY_USER:
            return user_id
        mac = hmac.new(self._user_key, user_id.encode("utf-8"), hashlib.sha256).hexdigest()
        return OPAQUE_USER_PREFIX + mac[:_OPAQUE_HEX]

    @cached_property
    def _user_key(self) -> bytes:
        """HMAC-SHA256(first payload key, label): derived once per ring, not per payload."""
        first = self.keys[min(self.keys, key=lambda k: int(k[1:]))]
        return hmac.new(first, _USER_KEY_LABEL, hashlib.sha256).digest()


def rotate_payload_key(folder: Path) -> str:
    """Add the next payload key (``p<n+1>``); processes that load the ring afterwards seal with it
    and still open payloads sealed with the older ones. Returns the new key id."""
    numbers = [int(k[1:]) for k in _read_keys(folder)]
    key_id = f"p{max(numbers, default=0) + 1}"
    _write_key(folder, key_id)
    return key_id


def payload_codec(keys_dir: Path) -> EncryptionCodec:
    """The codec of a data folder's payload keys (``Settings.keys_dir``), created on first use;
    the composition roots (API, worker, CLI) call this so they all share one key."""
    return EncryptionCodec(PayloadKeys.load(keys_dir, create=True))


def opaque_user_of(codec: object, user_id: str) -> str | None:
    """The opaque id of ``user_id`` under ``codec`` when it is an ``EncryptionCodec`` (a client's
    ``data_converter.payload_codec``), else None: without a key there is no opaque id, and the
    address itself is never written where the Temporal UI shows it."""
    return codec.opaque_user(user_id) if isinstance(codec, EncryptionCodec) else None


def payload_owner(payload: Payload) -> str | None:
    """The owner label of a sealed payload (``countersign-user``: an opaque id, ``*``, or on
    payloads sealed before opaque ids an address); None if it is not sealed."""
    if payload.metadata.get("encoding") != ENCODING:
        return None
    return payload.metadata.get(META_USER, b"").decode("utf-8", "replace")


def payload_workflow(payload: Payload) -> str | None:
    """The workflow id a sealed payload was labelled with, if the SDK named one."""
    raw = payload.metadata.get(META_WORKFLOW)
    return raw.decode("utf-8", "replace") if raw else None


class EncryptionCodec(PayloadCodec, WithSerializationContext):
    """AES-256-GCM over each payload (module docstring); pass it as ``codec=`` to ``connect``,
    ``replayer`` and ``time_skipping_worker``."""

    def __init__(self, keys: PayloadKeys, *, workflow_id: str | None = None) -> None:
        self._keys = keys
        self._workflow_id = workflow_id
        self._ciphers = {kid: AESGCM(bytes(k)) for kid, k in keys.keys.items()}

    def opaque_user(self, user_id: str) -> str:
        """The person's opaque id under this codec's ring (``PayloadKeys.opaque_user``)."""
        return self._keys.opaque_user(user_id)

    def with_context(self, context: SerializationContext) -> Self:
        """A codec that labels what it seals with the run the SDK is working for."""
        wid = None
        if isinstance(context, WorkflowSerializationContext | ActivitySerializationContext):
            wid = context.workflow_id
        if wid == self._workflow_id:
            return self
        # the SDK asks for a context for every payload it converts: a shallow copy shares the
        # ring's ciphers (an AESGCM per key) instead of building them again each time
        labelled = copy.copy(self)
        labelled._workflow_id = wid
        return labelled

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Seal every payload (already sealed ones are kept as they are)."""
        return [self.seal(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Open every sealed payload; others pass through unchanged.

        Raises:
            PayloadKeyUnknownError: sealed with a key id this ring does not hold.
            PayloadTamperedError: the payload does not authenticate.
        """
        return [self.unseal(p) for p in payloads]

    def seal(self, payload: Payload, *, owner: str | None = None) -> Payload:
        """One payload sealed with the active key, labelled with its owner's opaque id; ``owner``
        (a user id) overrides the owner read from the payload (the codec endpoint's encode seals
        for the caller)."""
        if payload.metadata.get("encoding") == ENCODING:
            return payload
        user = self.opaque_user(owner if owner is not None else _owner_of(payload))
        key_id = self._keys.active
        meta = {
            "encoding": ENCODING,
            META_KEY_ID: key_id.encode(),
            META_USER: user.encode(),
        }
        if self._workflow_id:
            meta[META_WORKFLOW] = self._workflow_id.encode()
        nonce = os.urandom(_NONCE)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), _aad(meta))
        return Payload(metadata=meta, data=nonce + sealed)

    def unseal(self, payload: Payload) -> Payload:
        """One payload opened (unchanged when not sealed). Raises as :meth:`decode`."""
        meta = payload.metadata
        if meta.get("encoding") != ENCODING:
            return payload
        key_id = meta.get(META_KEY_ID, b"").decode("utf-8", "replace")
        owner = meta.get(META_USER, b"").decode("utf-8", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            known = ", ".join(sorted(self._ciphers)) or "none"
            raise PayloadKeyUnknownError(
                f"decrypting a Temporal payload of {owner!r}: it was sealed with payload key "
                f"{key_id!r}, which this process does not hold (known: {known}); copy "
                f"payload-{key_id}.key into the keys folder"
            )
        data = payload.data
        try:
            clear = cipher.decrypt(data[:_NONCE], data[_NONCE:], _aad(dict(meta)))
            inner = Payload()
            inner.ParseFromString(clear)
        except (InvalidTag, ValueError, DecodeError) as e:
            raise PayloadTamperedError(
                f"decrypting a Temporal payload of {owner!r} with key {key_id!r}: the ciphertext "
                "or its labels were changed (AES-GCM tag does not verify)"
            ) from e
        return inner


def _owner_of(payload: Payload) -> str:
    """A top-level ``user_id`` string of a JSON payload, else ``*`` (module docstring)."""
    if payload.metadata.get("encoding") != b"json/plain" or not payload.data.startswith(b"{"):
        return ANY_USER
    try:
        doc = loads_strict(payload.data, what="a Temporal payload")
    except DocumentError:
        return ANY_USER
    user = doc.get("user_id") if isinstance(doc, dict) else None
    return user if isinstance(user, str) and user and user != ANY_USER else ANY_USER


def _aad(meta: Mapping[str, bytes]) -> bytes:
    """The labels bound to the ciphertext: key id, owner, workflow (absent = empty)."""
    parts = [_AAD_PREFIX, *(meta.get(k, b"") for k in (META_KEY_ID, META_USER, META_WORKFLOW))]
    return b"\0".join(parts)


def _read_keys(folder: Path) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    if not folder.is_dir():
        return keys
    for path in folder.iterdir():
        match = _KEY_FILE.match(path.name)
        if match is None:
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise KeyRingError(
                f"payload key file {path} has mode {mode:o}; it must be 600 (chmod 600 it)"
            )
        try:
            key = base64.b64decode(path.read_text().strip(), validate=True)
        except (OSError, binascii.Error, ValueError) as e:
            raise KeyRingError(f"{path}: cannot read the payload key as base64") from e
        if len(key) != 32:
            raise KeyRingError(f"{path}: a payload key must decode to 32 bytes, got {len(key)}")
        keys[match.group(1)] = key
    return keys


def _write_key(folder: Path, key_id: str) -> None:
    """Create ``payload-<key_id>.key`` (0600) atomically: written aside, then linked into place,
    so a process starting at the same moment reads either no file or the whole key; if another
    process made it first, theirs is kept."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    final = folder / f"payload-{key_id}.key"
    tmp = folder / f".payload-{key_id}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, base64.b64encode(os.urandom(32)) + b"\n")
    finally:
        os.close(fd)
    try:
        os.link(tmp, final)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
