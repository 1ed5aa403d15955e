"""The Temporal UI's codec endpoint on the served API: a person opens their own sealed payloads
(labelled with them, or with a run of their plan), another's stay sealed and the refusal is
audited, no credentials is 401, and only the UI's origin passes the CORS preflight."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import WorkflowSerializationContext

from countersign.api import UserStore
from countersign.api.codec import decode_for, to_wire
from countersign.api.testing import ALICE, BOB, ApiHarness, harness
from countersign.api.users import Principal
from countersign.durable import EncryptionCodec, payload_codec
from countersign.durable.codec import ENCODING, META_USER
from countersign.kernel import system_clock
from countersign.n8n import N8nHandle
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

UI = "http://127.0.0.1:8233"


@pytest.fixture
def codec(tmp_path: Path) -> EncryptionCodec:
    return payload_codec(tmp_path / "keys")


@pytest.fixture
def sealed_api(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
    codec: EncryptionCodec,
) -> Iterator[ApiHarness]:
    with harness(
        n8n,
        db,
        registry,
        keyring,
        radicale,
        smtp_server,
        api_smtp_credential,
        payload_codec=codec,
        codec_origin=UI,
    ) as h:
        yield h


def _json(doc: Any) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([doc])[0]


def _decoded(body: dict[str, Any]) -> list[Any]:
    out = []
    for p in body["payloads"]:
        meta = {k: base64.b64decode(v) for k, v in p["metadata"].items()}
        data = base64.b64decode(p["data"])
        out.append(json.loads(data) if meta["encoding"] == b"json/plain" else meta["encoding"])
    return out


def _alice_plan(api: ApiHarness) -> str:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    intent = {
        "intent": "schedule_meeting",
        "entities": {
            "participants": [ALICE, BOB],
            "duration_min": 30,
            "title": "Codec",
            "window_start": (day + timedelta(hours=13)).strftime(fmt),
            "window_end": (day + timedelta(hours=18)).strftime(fmt),
        },
    }
    with api.client(ALICE) as c:
        r = c.post("/v1/intents", json={"intent": intent})
    assert r.status_code == 201, r.text
    return str(r.json()["plan_id"])


def test_owner_opens_others_stay_sealed_and_are_audited(
    sealed_api: ApiHarness, codec: EncryptionCodec
) -> None:
    api = sealed_api
    plan_id = _alice_plan(api)
    alices = codec.seal(_json({"user_id": ALICE, "note": "alice's input"}))
    # a result that names no person, sealed by a worker running Alice's watcher
    in_run = codec.with_context(
        WorkflowSerializationContext(namespace="default", workflow_id=f"watch-{plan_id}")
    ).seal(_json({"status": "booked"}))
    bobs = codec.seal(_json({"user_id": BOB, "note": "bob's input"}))
    plain = _json({"old": "history"})
    body = to_wire([alices, in_run, bobs, plain])

    with api.client(ALICE) as c:
        r = c.post("/codec/decode", json=body)
    assert r.status_code == 200, r.text
    got = _decoded(r.json())
    assert got[0] == {"user_id": ALICE, "note": "alice's input"}
    assert got[1] == {"status": "booked"}
    assert got[2] == ENCODING and r.json()["payloads"][2] == body["payloads"][2]  # as sent
    assert got[3] == {"old": "history"}
    with api.db.tx() as c:
        rows = c.execute(
            text("SELECT actor, status, details FROM audit_log WHERE kind = 'codec_decode_refused'")
        ).all()
    assert [(a, s, d["owners"], d["payloads"]) for a, s, d in rows] == [
        (ALICE, "refused", [codec.opaque_user(BOB)], 1)
    ]  # the audit names the owner by opaque id too

    # Bob reads his own, not Alice's nor her run's; an admin reads everything
    with api.client(BOB) as c:
        got = _decoded(c.post("/codec/decode", json=body).json())
    assert got[:3] == [ENCODING, ENCODING, {"user_id": BOB, "note": "bob's input"}]
    with api.client("root") as c:
        got = _decoded(c.post("/codec/decode", json=body).json())
    assert ENCODING not in got

    # relabelling Bob's payload as Alice's does not open it: the label is bound to the cipher
    forged = dict(body["payloads"][2])
    forged["metadata"] = {
        **forged["metadata"],
        META_USER: base64.b64encode(codec.opaque_user(ALICE).encode()).decode(),
    }
    with api.client(ALICE) as c:
        r = c.post("/codec/decode", json={"payloads": [forged]})
    assert r.status_code == 422 and r.json()["code"] == "payload_tampered", r.text

    # encode seals as the caller's, and the caller opens it again
    with api.client(ALICE) as c:
        sealed = c.post("/codec/encode", json=to_wire([_json({"signal": 1})])).json()
        meta = sealed["payloads"][0]["metadata"]
        assert base64.b64decode(meta[META_USER]) == codec.opaque_user(ALICE).encode()
        assert _decoded(c.post("/codec/decode", json=sealed).json()) == [{"signal": 1}]
        bad = c.post("/codec/decode", json={"payloads": [{"metadata": {}, "data": "!!"}]})
    assert bad.status_code == 422 and "payloads[0].data is not base64" in bad.json()["detail"]


def test_codec_needs_credentials_and_answers_only_the_ui_origin(sealed_api: ApiHarness) -> None:
    api = sealed_api
    with api.client(None) as c:
        r = c.post("/codec/decode", json={"payloads": []}, headers={"Origin": UI})
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
        # the UI can read the refusal (CORS headers on the answer)
        assert r.headers["access-control-allow-origin"] == UI
        asked = {
            "Origin": UI,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace",
        }
        pre = c.options("/codec/decode", headers=asked)
        assert pre.status_code == 204
        assert pre.headers["access-control-allow-origin"] == UI
        assert pre.headers["access-control-allow-credentials"] == "true"
        allowed = {h.strip() for h in pre.headers["access-control-allow-headers"].split(",")}
        assert {"content-type", "x-namespace", "authorization"} <= allowed
        other = c.options("/codec/decode", headers={**asked, "Origin": "http://evil.example"})
        assert other.status_code == 403
        assert "access-control-allow-origin" not in other.headers
        # only the codec routes answer CORS
        me = c.options("/v1/me", headers=asked)
        assert "access-control-allow-origin" not in me.headers
    with api.client(ALICE) as c:
        r = c.post(
            "/codec/decode", json={"payloads": []}, headers={"Origin": "http://evil.example"}
        )
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_a_session_cookie_works_without_csrf_but_only_for_json(sealed_api: ApiHarness) -> None:
    api = sealed_api
    token = UserStore(api.db, clock=system_clock).login_link(ALICE)
    with httpx.Client(base_url=api.base, timeout=30) as c:
        signed = c.post("/login", data={"token": token}, follow_redirects=False)
        assert signed.status_code in {302, 303, 307}
        ok = c.post("/codec/decode", json={"payloads": []}, headers={"Origin": UI})
        assert ok.status_code == 200 and ok.headers["access-control-allow-credentials"] == "true"
        # a form post (what a foreign page can send without a preflight) is refused
        form = c.post(
            "/codec/decode", content=b"payloads=x", headers={"content-type": "text/plain"}
        )
        assert form.status_code == 422


def test_a_person_named_like_an_opaque_id_reads_only_their_own(codec: EncryptionCodec) -> None:
    """Labels hold opaque ids, and a caller's own id is still accepted as a label (payloads
    sealed before opaque ids) — except an id shaped like an opaque one: someone registered as
    ``u-<Alice's hex>`` must not read Alice's payloads."""
    alices = codec.seal(_json({"user_id": ALICE, "note": "alice's input"}))
    impostor = Principal(user_id=codec.opaque_user(ALICE), admin=False, via="key")
    out, refused = decode_for(impostor, [alices], codec, owns_plan=lambda _: False)
    assert out == [alices] and refused == [{"owner": codec.opaque_user(ALICE), "workflow_id": ""}]
    alice = Principal(user_id=ALICE, admin=False, via="key")
    out, refused = decode_for(alice, [alices], codec, owns_plan=lambda _: False)
    assert refused == [] and json.loads(out[0].data)["note"] == "alice's input"
