"""Key ring: rotation keeps old plans verifying until revocation; secrets stay private."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from countersign.kernel import (
    KeyRevokedError,
    KeyRingError,
    Plan,
    Policy,
    Settings,
    UnknownKeyError,
)
from countersign.planner import make_plan
from countersign.planner.testing import T0, make_intent, signed_plan
from countersign.registry import Registry
from countersign.signer import KeyRing, open_keyring, verify_signed_plan


@pytest.fixture
def plan(registry: Registry) -> Plan:
    p = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(p, Plan)
    return p


def test_rotation_then_revocation(tmp_path: Path, plan: Plan) -> None:
    folder = tmp_path / "keys"
    ring = KeyRing.init(folder, now=T0, seed=os.urandom(32))
    old_doc = signed_plan(plan, ring)
    assert old_doc["signature"]["pubkey_id"] == "k1"

    assert ring.rotate(now=T0, seed=os.urandom(32)) == "k2"
    ring = KeyRing.load(folder)  # what a restarted process sees
    assert {i.pubkey_id: i.status for i in ring.infos()} == {"k1": "retired", "k2": "active"}
    new_doc = signed_plan(plan, ring)
    assert new_doc["signature"]["pubkey_id"] == "k2"
    assert new_doc["signature"]["signature"] != old_doc["signature"]["signature"]
    # the retired key still verifies what it signed
    verify_signed_plan(old_doc, keys=ring)
    verify_signed_plan(new_doc, keys=ring)

    ring.revoke("k1", now=T0)
    ring = KeyRing.load(folder)
    with pytest.raises(KeyRevokedError, match="k1"):
        verify_signed_plan(old_doc, keys=ring)
    verify_signed_plan(new_doc, keys=ring)
    assert not (folder / "k1.seed").exists()


def test_active_key_cannot_be_revoked(tmp_path: Path) -> None:
    ring = KeyRing.init(tmp_path / "keys", now=T0, seed=os.urandom(32))
    with pytest.raises(KeyRingError, match="rotate"):
        ring.revoke("k1", now=T0)


def test_unknown_key_id(plan: Plan, keyring: KeyRing) -> None:
    doc = signed_plan(plan, keyring)
    doc["signature"]["pubkey_id"] = "k9"
    with pytest.raises(UnknownKeyError, match="k9"):
        verify_signed_plan(doc, keys=keyring)


def test_files_are_private_and_hold_no_secret_in_ring_json(tmp_path: Path) -> None:
    seed = os.urandom(32)
    folder = tmp_path / "keys"
    KeyRing.init(folder, now=T0, seed=seed)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "k1.seed").stat().st_mode) == 0o600
    ring_text = (folder / "ring.json").read_text()
    assert base64.b64encode(seed).decode() not in ring_text


def test_world_readable_seed_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    KeyRing.init(folder, now=T0, seed=os.urandom(32))
    (folder / "k1.seed").chmod(0o644)
    with pytest.raises(KeyRingError, match="chmod 600"):
        KeyRing.load(folder)


def test_init_twice_is_refused(tmp_path: Path) -> None:
    KeyRing.init(tmp_path, now=T0, seed=os.urandom(32))
    with pytest.raises(KeyRingError, match="already exists"):
        KeyRing.init(tmp_path, now=T0, seed=os.urandom(32))


def test_missing_ring_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(KeyRingError, match="keys init"):
        KeyRing.load(tmp_path)


def test_key_from_environment_signs_and_disk_ring_still_verifies(
    tmp_path: Path, plan: Plan
) -> None:
    disk = KeyRing.init(tmp_path / "keys", now=T0, seed=os.urandom(32))
    disk_doc = signed_plan(plan, disk)
    seed = base64.b64encode(os.urandom(32)).decode()
    settings = Settings(home=tmp_path, signing_key=seed, signing_key_id="env1")
    ring = open_keyring(settings, now=T0)
    env_doc = signed_plan(plan, ring)
    assert env_doc["signature"]["pubkey_id"] == "env1"
    verify_signed_plan(env_doc, keys=ring)
    verify_signed_plan(disk_doc, keys=ring)
    assert seed not in repr(settings)
