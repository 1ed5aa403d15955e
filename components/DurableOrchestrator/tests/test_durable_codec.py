"""The payload codec: AES-256-GCM round trip, refusals that name what failed, pass-through of
unsealed payloads, the key file on disk, and a watcher on the time-skipping server whose history
holds no person's data in clear (while a client with the codec reads it back)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import stat
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import WorkflowSerializationContext

from countersign.approvals import Approvals, token_hash
from countersign.durable import (
    TASK_QUEUE,
    DurableActivities,
    EncryptionCodec,
    PayloadKeys,
    PayloadKeyUnknownError,
    PayloadTamperedError,
    WatcherWorkflow,
    WatchInput,
    approval_for,
    payload_codec,
    replayer,
    rotate_payload_key,
)
from countersign.durable.codec import (
    ANY_USER,
    ENCODING,
    META_KEY_ID,
    META_USER,
    META_WORKFLOW,
    opaque_user_of,
    payload_owner,
    payload_workflow,
)
from countersign.durable.testing import (  # noqa: F401  (fixture)
    sandbox_fixture,
    time_skipping_worker,
)
from countersign.kernel import Intent, KeyRingError, Policy, SignedPlan, system_clock
from countersign.planner.testing import signed_plan
from countersign.registry import Registry
from countersign.sandbox import SmtpSink, VisaSandbox
from countersign.signer import KeyRing
from countersign.storage import Database

HISTORIES = Path(__file__).parent / "histories"
ALICE = "alice@example.com"


def _json(doc: Any) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([doc])[0]


@pytest.fixture
def codec(tmp_path: Path) -> EncryptionCodec:
    return payload_codec(tmp_path / "keys")


def _seal_open(codec: EncryptionCodec, payloads: list[Payload]) -> list[Payload]:
    async def go() -> list[Payload]:
        return await codec.decode(await codec.encode(payloads))

    return asyncio.run(go())


def test_round_trip_labels_the_owner_and_hides_the_data(codec: EncryptionCodec) -> None:
    mine = _json({"user_id": ALICE, "signed": {"signature": "c2lnbmF0dXJl"}})
    nobody = _json({"status": "booked"})
    text = _json("Visa watcher · alice · Lisbon")
    sealed = asyncio.run(codec.encode([mine, nobody, text]))
    assert [p.metadata["encoding"] for p in sealed] == [ENCODING] * 3
    # the owner is labelled with an opaque id (never the address), the same for one person
    opaque = codec.opaque_user(ALICE)
    assert [payload_owner(p) for p in sealed] == [opaque, ANY_USER, ANY_USER]
    assert all(ALICE.encode() not in b"".join(p.metadata.values()) for p in sealed)
    assert all(p.metadata[META_KEY_ID] == b"p1" for p in sealed)
    assert b"c2lnbmF0dXJl" not in sealed[0].data and b"booked" not in sealed[1].data
    assert asyncio.run(codec.decode(sealed)) == [mine, nobody, text]
    # two seals of one payload differ (a fresh nonce each time)
    assert codec.seal(mine).data != codec.seal(mine).data


def test_unsealed_payloads_pass_through(codec: EncryptionCodec) -> None:
    plain = [_json({"user_id": ALICE}), Payload(metadata={"encoding": b"binary/null"})]
    assert asyncio.run(codec.decode(plain)) == plain
    # already sealed: kept as it is, not sealed twice
    sealed = codec.seal(plain[0])
    assert codec.seal(sealed) is sealed


def test_a_changed_ciphertext_or_label_is_refused(codec: EncryptionCodec) -> None:
    sealed = codec.seal(_json({"user_id": ALICE}))
    flipped = Payload()
    flipped.CopyFrom(sealed)
    flipped.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(PayloadTamperedError, match=r"'u-[0-9a-f]{24}'.*'p1'.*tag does not verify"):
        codec.unseal(flipped)
    relabelled = Payload()
    relabelled.CopyFrom(sealed)
    relabelled.metadata[META_USER] = b"mallory@example.com"  # claiming another's payload
    with pytest.raises(PayloadTamperedError):
        codec.unseal(relabelled)
    relabelled.metadata[META_USER] = sealed.metadata[META_USER]
    relabelled.metadata[META_WORKFLOW] = b"watch-somebody-else"
    with pytest.raises(PayloadTamperedError):
        codec.unseal(relabelled)
    with pytest.raises(PayloadTamperedError):
        codec.unseal(Payload(metadata=dict(sealed.metadata), data=b"short"))


def test_an_unknown_key_id_is_named(tmp_path: Path, codec: EncryptionCodec) -> None:
    other = payload_codec(tmp_path / "elsewhere")
    sealed = other.seal(_json({"user_id": ALICE}))
    sealed.metadata[META_KEY_ID] = b"p7"
    with pytest.raises(PayloadKeyUnknownError, match=r"payload key 'p7'.*known: p1"):
        codec.unseal(sealed)


def test_another_folder_key_does_not_open(tmp_path: Path, codec: EncryptionCodec) -> None:
    sealed = payload_codec(tmp_path / "elsewhere").seal(_json({"user_id": ALICE}))
    with pytest.raises(PayloadTamperedError):  # same id p1, another key
        codec.unseal(sealed)


def test_the_opaque_user_id_is_keyed_stable_and_survives_rotation(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    first = payload_codec(folder)
    alice = first.opaque_user(ALICE)
    assert re.fullmatch(r"u-[0-9a-f]{24}", alice)
    assert payload_codec(folder).opaque_user(ALICE) == alice  # one person, one id
    assert first.opaque_user("bob@example.com") != alice
    assert first.opaque_user(ANY_USER) == ANY_USER
    # keyed: another deployment's key gives another id (an address cannot be looked up)
    assert payload_codec(tmp_path / "elsewhere").opaque_user(ALICE) != alice
    # an id shaped like an opaque one is hashed too: nobody names themselves into a label
    assert first.opaque_user(alice) != alice
    rotate_payload_key(folder)
    assert payload_codec(folder).opaque_user(ALICE) == alice  # rotation keeps it
    assert opaque_user_of(first, ALICE) == alice and opaque_user_of(None, ALICE) is None


def test_the_opaque_id_is_hmac_under_the_derived_user_key(tmp_path: Path) -> None:
    """The user key is derived once per ring (cached) and the id is still HMAC-SHA256(user key,
    address) with user key = HMAC-SHA256(the first payload key, label), as the UI's ids were."""
    folder = tmp_path / "keys"
    codec = payload_codec(folder)
    rotate_payload_key(folder)
    ring = PayloadKeys.load(folder)
    first = ring.keys["p1"]
    user_key = hmac.new(first, b"countersign-opaque-user-v1", hashlib.sha256).digest()
    for who in (ALICE, "bob@example.com"):
        mac = hmac.new(user_key, who.encode(), hashlib.sha256).hexdigest()
        assert ring.opaque_user(who) == codec.opaque_user(who) == "u-" + mac[:24]


def test_a_run_labelled_codec_shares_the_ciphers_and_keeps_the_label(
    codec: EncryptionCodec,
) -> None:
    """``with_context`` (called by the SDK for every payload it converts) returns a codec that
    seals with the run's label, built without new ciphers; the unlabelled one stays unlabelled,
    and each opens what the other sealed."""
    run = WorkflowSerializationContext(namespace="default", workflow_id="watch-p1")
    labelled = codec.with_context(run)
    assert labelled is not codec and labelled.with_context(run) is labelled
    assert labelled._ciphers is codec._ciphers
    doc = _json({"user_id": ALICE, "n": 1})
    sealed, plain = labelled.seal(doc), codec.seal(doc)
    assert payload_workflow(sealed) == "watch-p1" and payload_workflow(plain) is None
    assert codec.unseal(sealed) == doc and labelled.unseal(plain) == doc
    assert payload_owner(sealed) == codec.opaque_user(ALICE)


def test_key_file_is_private_reused_and_rotates(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    first = payload_codec(folder)
    path = folder / "payload-p1.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [p.name for p in folder.iterdir()] == ["payload-p1.key"]  # no temporary left over
    sealed = first.seal(_json({"user_id": ALICE}))
    assert payload_codec(folder).unseal(sealed) == _json({"user_id": ALICE})  # same key again
    assert "p1" in repr(PayloadKeys.load(folder)) and path.read_text()[:8] not in repr(
        PayloadKeys.load(folder)
    )
    assert rotate_payload_key(folder) == "p2"
    rotated = payload_codec(folder)
    assert rotated.seal(_json({})).metadata[META_KEY_ID] == b"p2"
    assert rotated.unseal(sealed) == _json({"user_id": ALICE})  # old payloads still open
    path.chmod(0o644)
    with pytest.raises(KeyRingError, match="must be 600"):
        PayloadKeys.load(folder)
    with pytest.raises(KeyRingError, match="no payload key"):
        PayloadKeys.load(tmp_path / "empty")


@pytest.mark.parametrize("name", sorted(p.name for p in HISTORIES.glob("*.json")))
def test_golden_histories_replay_with_the_codec(name: str, codec: EncryptionCodec) -> None:
    doc = json.loads((HISTORIES / name).read_text())
    history = WorkflowHistory.from_json(doc["workflow_id"], doc["history"])
    asyncio.run(replayer(codec=codec).replay_workflow(history))


# ---- a sealed watcher on the time-skipping server ---------------------------------------------


def _payloads(
    msg: Message, skip: frozenset[str] = frozenset({"search_attributes"})
) -> Iterator[Payload]:
    """Every Payload inside a history proto (search attributes are indexed in clear by design)."""
    if isinstance(msg, Payload):
        yield msg
        return
    for field, value in msg.ListFields():
        if field.name in skip or field.message_type is None:
            continue
        if isinstance(value, Message):
            values = [value]
        elif field.message_type.GetOptions().map_entry:
            values = list(value.values())
        else:  # a repeated field
            values = list(value)
        for v in values:
            if isinstance(v, Message):
                yield from _payloads(v, skip)


def _signed(registry: Registry, keyring: KeyRing) -> dict[str, Any]:
    from datetime import UTC, datetime

    intent = Intent.model_validate(
        {
            "intent": "watch_visa_slots",
            "intent_id": "01JDQ3Z00000000000000C0DEC",
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "user_id": ALICE,
            "entities": {
                "consulate": "lisbon",
                "date_from": "2027-03-01T00:00:00Z",
                "date_to": "2027-03-31T00:00:00Z",
                "notify_to": ALICE,
            },
        }
    )
    return signed_plan(intent, keyring, registry, Policy(providers={"mail": "smtp"}))


def test_a_watcher_history_holds_no_clear_data(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    codec: EncryptionCodec,
) -> None:
    sandbox.appear_after = 2
    smtp_server.messages.clear()
    acts = DurableActivities(
        db,
        keys=keyring,
        registry=registry,
        settings={
            "visa_base_url": sandbox.url,
            "smtp_host": smtp_server.host,
            "smtp_port": str(smtp_server.port),
            "smtp_from": "countersign@example.com",
        },
    )
    doc = _signed(registry, keyring)
    plan_id = doc["plan"]["plan_id"]
    secrets = [ALICE.encode(), doc["signature"]["signature"].encode(), plan_id.encode(), b"lisbon"]

    async def go() -> tuple[Any, WorkflowHistory, WorkflowHistory]:
        async with time_skipping_worker(acts, codec=codec) as env:
            inp = WatchInput(
                signed=doc,
                user_id=ALICE,
                watch_step=1,
                gate_id="gate-A",
                book_step=3,
                notify_step=4,
                poll_interval_s=3600,
            )
            handle = await env.client.start_workflow(
                WatcherWorkflow.run,
                inp,
                id=f"watch-{plan_id}",
                task_queue=TASK_QUEUE,
                static_summary="Visa watcher · alice · Lisbon",
            )
            for _ in range(48):
                st = await handle.query(WatcherWorkflow.status)
                if st is not None and st.status == "waiting_approval":
                    break
                await env.sleep(timedelta(hours=1))
            token = Approvals(db, clock=system_clock).issue(
                plan_id=plan_id,
                plan_hash=doc["plan_hash"],
                gate_id="gate-A",
                user_id=ALICE,
                scopes=["mail.send", "visa.book"],
                ttl_s=300,
                choice={"slot": {"id": "slot-1"}},
            )
            # spent where it arrives (as the API does): the run is told the token's hash only
            signed = SignedPlan.model_validate(doc)
            await handle.execute_update(
                WatcherWorkflow.approve_gate,
                approval_for(
                    Approvals(db, clock=system_clock),
                    token.token,
                    plan=signed.plan,
                    plan_hash=signed.plan_hash,
                    gate_id="gate-A",
                    user_id=ALICE,
                    registry=registry,
                ),
            )
            tokens.append(token.token)
            result = await handle.result()
            # a client of the same server WITHOUT the codec: what the Temporal UI and its
            # database hold
            bare = Client(
                env.client.service_client,
                namespace=env.client.namespace,
                data_converter=pydantic_data_converter,
            )
            raw = await bare.get_workflow_handle(handle.id).fetch_history()
            with pytest.raises(Exception, match=r"binary/encrypted"):
                await bare.get_workflow_handle(handle.id).result()
            return result, raw, await handle.fetch_history()

    tokens: list[str] = []
    result, raw, fetched = asyncio.run(go())
    assert result.status == "booked"
    # every payload but the SDK's own patch markers (``{"id": "finish-plan-v1", …}``, written by
    # the SDK core below the data converter) is sealed; none holds a person's data in clear
    every = [p for e in raw.events for p in _payloads(e)]
    payloads = [
        p
        for e in raw.events
        if not e.HasField("marker_recorded_event_attributes")
        for p in _payloads(e)
    ]
    for p in every:
        for s in secrets:
            assert s not in p.data
    assert len(payloads) > 10
    for p in payloads:
        assert p.metadata["encoding"] == ENCODING, p.metadata
    owners = {payload_owner(p) for p in payloads}
    assert owners == {codec.opaque_user(ALICE), ANY_USER}
    # a payload that names no person is labelled with its run (how the codec endpoint finds the
    # owner of results, summaries and query answers)
    assert {p.metadata.get(META_WORKFLOW) for p in payloads} == {f"watch-{plan_id}".encode()}
    # with the codec the history opens: the input is Alice's signed plan
    started = raw.events[0].workflow_execution_started_event_attributes
    opened = asyncio.run(codec.decode(list(started.input.payloads)))
    back = pydantic_data_converter.payload_converter.from_payloads(opened, [WatchInput])[0]
    assert back.user_id == ALICE and back.signed.to_json()["signature"] == doc["signature"]
    # the sealed history replays with a codec-enabled replayer
    asyncio.run(replayer(codec=codec).replay_workflow(raw))
    # no approval token entered the history, not even sealed: every payload decoded with the
    # project's codec (update arguments, activity inputs and results) lacks it
    decoded = asyncio.run(codec.decode([p for e in raw.events for p in _payloads(e)]))
    assert tokens and len(decoded) > 10
    assert not [p for p in decoded if tokens[0].encode() in p.data]
    assert tokens[0] not in fetched.to_json()
    accepted = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args
        for e in raw.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert len(accepted) == 1  # the approval names the spent token's hash
    (arg,) = asyncio.run(codec.decode(list(accepted[0].payloads)))
    sent = json.loads(arg.data)
    assert sent["approval"] == token_hash(tokens[0]) and sent.get("token") is None
