"""Ed25519 signatures this process has already seen hold: verify once per process (Signer LLD §5).

Ed25519 verification is a pure function of three byte strings — the public key, the message, the
signature — so remembering that it held for exactly those bytes is remembering a fact, not
trusting a document. Entries come from two places only:

- a verification that held (``nacl`` ``VerifyKey.verify`` returned), and
- ``sign_plan`` itself: a signature made with a private key verifies under the public key
  derived from it (Ed25519 correctness; PyNaCl derives ``verify_key`` from the seed, which is
  never a small-order point).

A lookup compares all three byte strings exactly. Everything around it still runs on every call
(shape, envelope as written, canonical bytes, stated hash, the key lookup with its unknown and
revoked checks, the plan contract, the normal form): a document differing in any byte of the
plan, the envelope or the key misses and is verified in full. Whoever could add an entry without
a signature holding already holds this process's memory, and with it the signing key.

Process state, bounded (oldest entry out first) and locked: the API serves requests on threads.
"""

from __future__ import annotations

import threading

__all__ = ["ProvenSignatures"]


class ProvenSignatures:
    """A bounded set of ``(public key, message, signature)`` triples known to verify."""

    def __init__(self, size: int = 1024) -> None:
        """Keep at most ``size`` triples."""
        if size < 1:
            raise ValueError(f"size must be at least 1, found {size}")
        self._size = size
        self._seen: dict[tuple[bytes, bytes, bytes], None] = {}
        self._lock = threading.Lock()

    def __contains__(self, triple: object) -> bool:
        with self._lock:
            return triple in self._seen

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)

    def add(self, public_key: bytes, message: bytes, signature: bytes) -> None:
        """Remember that ``signature`` holds over ``message`` under ``public_key``.

        Call only after ``VerifyKey(public_key).verify(message, signature)`` returned, or with
        the signature ``SigningKey.sign`` just made over ``message`` and its own ``verify_key``.
        """
        triple = (bytes(public_key), bytes(message), bytes(signature))
        with self._lock:
            self._seen.pop(triple, None)  # re-inserted at the young end
            self._seen[triple] = None
            while len(self._seen) > self._size:
                del self._seen[next(iter(self._seen))]

    def clear(self) -> None:
        """Forget every triple (tests and benchmarks measure the first verification with it)."""
        with self._lock:
            self._seen.clear()
