"""Edges of the Signer: build a key ring from Settings (disk or environment), fresh seeds."""

from __future__ import annotations

import base64
import binascii
import os
from datetime import datetime

from countersign.kernel import KeyRingError, Settings

from .keyring import KeyRing

__all__ = ["fresh_seed", "open_keyring"]


def fresh_seed() -> bytes:
    """32 bytes from the OS CSPRNG."""
    return os.urandom(32)


def open_keyring(settings: Settings, *, now: datetime, create: bool = False) -> KeyRing:
    """The key ring this process signs and verifies with.

    ``COUNTERSIGN_SIGNING_KEY`` (base64 seed) wins for signing; otherwise the ring under
    ``settings.keys_dir``. With ``create=True`` a missing disk ring is initialised (``k1``).
    """
    if settings.signing_key is not None:
        try:
            seed = base64.b64decode(settings.signing_key.get_secret_value(), validate=True)
        except (binascii.Error, ValueError) as e:
            raise KeyRingError("COUNTERSIGN_SIGNING_KEY is not base64") from e
        ring = KeyRing.from_seed(seed, pubkey_id=settings.signing_key_id, created_at=now)
        if (settings.keys_dir / "ring.json").exists():
            disk = KeyRing.load(settings.keys_dir)
            return KeyRing(
                [*disk.infos(), *ring.infos()],
                {settings.signing_key_id: seed},
                folder=None,
            )
        return ring
    if create and not (settings.keys_dir / "ring.json").exists():
        return KeyRing.init(settings.keys_dir, now=now, seed=fresh_seed())
    return KeyRing.load(settings.keys_dir)
