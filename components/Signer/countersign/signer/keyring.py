"""The key ring: Ed25519 keys named by ``pubkey_id``, one active, retired keys still verifying.

On disk (Signer LLD §2)::

    <home>/keys/            0700
      ring.json             public part: ids, public keys, status, times (no secrets)
      <pubkey_id>.seed      0600, base64 of the 32-byte Ed25519 seed

A seed file readable by group or others is refused (like ssh). Seeds are never printed or logged;
``KeyInfo`` carries only public material. A key can also come from the environment
(``COUNTERSIGN_SIGNING_KEY``), which then signs; the disk ring, if present, still verifies.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal

from nacl.signing import SigningKey, VerifyKey
from pydantic import Field

from countersign.kernel import (
    Contract,
    ContractError,
    DocumentError,
    KeyRevokedError,
    KeyRingError,
    UnknownKeyError,
    UtcDatetime,
    ascii_digits,
    loads_strict,
    parse_contract,
)

__all__ = ["KeyInfo", "KeyRing", "KeyStatus"]

KeyStatus = Literal["active", "retired", "revoked"]
_RING = "ring.json"


class KeyInfo(Contract):
    """Public facts about one key."""

    pubkey_id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    public_key: str
    status: KeyStatus
    created_at: UtcDatetime
    retired_at: UtcDatetime | None = None
    revoked_at: UtcDatetime | None = None


class _RingFile(Contract):
    version: Literal[1] = 1
    keys: list[KeyInfo]


class KeyRing:
    """Keys by id. Build with :meth:`load`, :meth:`init`, or :meth:`from_seed`."""

    def __init__(
        self,
        infos: Iterable[KeyInfo],
        seeds: dict[str, bytes],
        *,
        folder: Path | None,
    ) -> None:
        self._infos = {k.pubkey_id: k for k in infos}
        self._seeds = seeds
        self._folder = folder
        self._verify_cache: dict[str, VerifyKey] = {}

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_seed(cls, seed: bytes, *, pubkey_id: str, created_at: datetime) -> KeyRing:
        """An in-memory ring with one active key (environment-supplied or tests)."""
        if len(seed) != 32:
            raise KeyRingError(f"Ed25519 seed for {pubkey_id!r} must be 32 bytes, got {len(seed)}")
        pub = SigningKey(seed).verify_key.encode()
        info = KeyInfo(
            pubkey_id=pubkey_id,
            public_key=base64.b64encode(pub).decode(),
            status="active",
            created_at=created_at,
        )
        return cls([info], {pubkey_id: seed}, folder=None)

    @classmethod
    def init(cls, folder: Path, *, now: datetime, seed: bytes) -> KeyRing:
        """Create a new ring in ``folder`` with one active key ``k1``.

        Raises:
            KeyRingError: a ring already exists there.
        """
        if (folder / _RING).exists():
            raise KeyRingError(f"a key ring already exists in {folder}; use 'keys rotate'")
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.chmod(0o700)
        ring = cls([], {}, folder=folder)
        ring._add_key("k1", seed, now)
        return ring

    @classmethod
    def load(cls, folder: Path) -> KeyRing:
        """Read a ring from disk, checking permissions.

        Raises:
            KeyRingError: no ring, unreadable, bad JSON, or a seed file others can read.
        """
        path = folder / _RING
        try:
            raw = loads_strict(path.read_bytes(), what=str(path))
        except FileNotFoundError as e:
            raise KeyRingError(f"no key ring in {folder}; run 'countersign keys init' first") from e
        except OSError as e:
            raise KeyRingError(f"cannot read key ring {path}: {e}") from e
        except DocumentError as e:
            raise KeyRingError(f"cannot read key ring: {e.message}") from e
        try:
            ring_file = parse_contract(_RingFile, raw, what=str(path))
        except ContractError as e:
            raise KeyRingError(e.message) from e
        seeds: dict[str, bytes] = {}
        for info in ring_file.keys:
            seed_path = folder / f"{info.pubkey_id}.seed"
            if info.status == "revoked" or not seed_path.exists():
                continue
            mode = stat.S_IMODE(seed_path.stat().st_mode)
            if mode & 0o077:
                raise KeyRingError(
                    f"seed file {seed_path} has mode {mode:o}; it must be 600 (chmod 600 it)"
                )
            seeds[info.pubkey_id] = _decode_seed(seed_path.read_text().strip(), str(seed_path))
        ring = cls(ring_file.keys, seeds, folder=folder)
        if sum(1 for k in ring_file.keys if k.status == "active") > 1:
            raise KeyRingError(f"key ring {path} has more than one active key")
        return ring

    # ---- queries ----------------------------------------------------------------------------
    def infos(self) -> list[KeyInfo]:
        """Public facts of every key, oldest first."""
        return sorted(self._infos.values(), key=lambda k: (k.created_at, k.pubkey_id))

    def active(self) -> tuple[str, SigningKey]:
        """The active key's id and signing key.

        Raises:
            KeyRingError: no active key with a seed.
        """
        for info in self._infos.values():
            if info.status == "active" and info.pubkey_id in self._seeds:
                return info.pubkey_id, SigningKey(self._seeds[info.pubkey_id])
        raise KeyRingError("the key ring has no active signing key")

    def verify_key(self, pubkey_id: str) -> VerifyKey:
        """The verify key for ``pubkey_id``.

        Raises:
            UnknownKeyError: no such key.
            KeyRevokedError: the key was revoked.
        """
        info = self._infos.get(pubkey_id)
        if info is None:
            known = ", ".join(sorted(self._infos)) or "none"
            raise UnknownKeyError(f"no key {pubkey_id!r} in the key ring (known: {known})")
        if info.status == "revoked":
            raise KeyRevokedError(f"key {pubkey_id!r} was revoked at {info.revoked_at}")
        cached = self._verify_cache.get(pubkey_id)
        if cached is None:
            cached = VerifyKey(base64.b64decode(info.public_key))
            self._verify_cache[pubkey_id] = cached
        return cached

    # ---- changes (persisted when the ring has a folder) -----------------------------------
    def rotate(self, *, now: datetime, seed: bytes) -> str:
        """Retire the active key and make a new one active. Returns the new ``pubkey_id``."""
        for pid, info in list(self._infos.items()):
            if info.status == "active":
                self._infos[pid] = info.model_copy(update={"status": "retired", "retired_at": now})
        new_id = f"k{self._next_number()}"
        self._add_key(new_id, seed, now)
        return new_id

    def revoke(self, pubkey_id: str, *, now: datetime) -> None:
        """Revoke a key: plans it signed stop verifying; its seed is deleted."""
        info = self._infos.get(pubkey_id)
        if info is None:
            raise UnknownKeyError(f"no key {pubkey_id!r} in the key ring")
        if info.status == "active":
            raise KeyRingError(f"key {pubkey_id!r} is active; rotate before revoking it")
        self._infos[pubkey_id] = info.model_copy(update={"status": "revoked", "revoked_at": now})
        self._seeds.pop(pubkey_id, None)
        self._verify_cache.pop(pubkey_id, None)
        if self._folder is not None:
            (self._folder / f"{pubkey_id}.seed").unlink(missing_ok=True)
        self._save()

    # ---- internals ----------------------------------------------------------------------------
    def _next_number(self) -> int:
        numbers = [int(p[1:]) for p in self._infos if p[:1] == "k" and ascii_digits(p[1:])]
        return max(numbers, default=0) + 1

    def _add_key(self, pubkey_id: str, seed: bytes, now: datetime) -> None:
        if len(seed) != 32:
            raise KeyRingError("Ed25519 seed must be 32 bytes")
        pub = SigningKey(seed).verify_key.encode()
        self._infos[pubkey_id] = KeyInfo(
            pubkey_id=pubkey_id,
            public_key=base64.b64encode(pub).decode(),
            status="active",
            created_at=now,
        )
        self._seeds[pubkey_id] = seed
        if self._folder is not None:
            _write_private(self._folder / f"{pubkey_id}.seed", base64.b64encode(seed) + b"\n")
        self._save()

    def _save(self) -> None:
        if self._folder is None:
            return
        body = _RingFile(keys=self.infos()).to_json()
        tmp = self._folder / (_RING + ".tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self._folder / _RING)


def _decode_seed(text: str, where: str) -> bytes:
    try:
        seed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise KeyRingError(f"{where}: seed is not base64") from e
    if len(seed) != 32:
        raise KeyRingError(f"{where}: seed must decode to 32 bytes")
    return seed


def _write_private(path: Path, data: bytes) -> None:
    """Create a file readable by its owner only, without a window where it is wider."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
