"""The Temporal codec endpoint (``POST /codec/decode``, ``POST /codec/encode``; Api SPEC §codec).

The Temporal Web UI sends the payloads it shows to ``<endpoint>/decode`` from the browser, in the
codec-server format ``{"payloads": [{"metadata": {name: base64}, "data": base64}]}``, and shows
what comes back. Responsibility here: open a sealed payload only for the person it belongs to —
its ``countersign-user`` label (the person's opaque id, ``durable.codec``; an address on payloads
sealed before opaque ids), or, for a payload labelled ``*`` (results, summaries, query
answers), the owner of the plan its ``countersign-workflow`` run executes; admins read all.
Another person's payloads come back still sealed (the UI keeps working, shows ciphertext) and
each refusal is audited (``codec_decode_refused``). The labels are bound to the ciphertext
(``durable.codec``), so relabelling a payload only makes it fail to open.

CORS: only these routes answer a browser from the Temporal UI's origin (exactly that origin,
with credentials), so the UI can call them with the person's session cookie.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio.api.common.v1 import Payload

from countersign.durable import EncryptionCodec
from countersign.durable.codec import (
    ANY_USER,
    OPAQUE_USER_PREFIX,
    payload_owner,
    payload_workflow,
)
from countersign.kernel import InputError

from .users import Principal

__all__ = [
    "CODEC_HEADERS",
    "CodecCors",
    "CodecPayload",
    "CodecPayloads",
    "decode_for",
    "encode_for",
    "from_wire",
    "to_wire",
]

#: the request headers the Temporal UI sends to a codec endpoint
CODEC_HEADERS = "content-type, x-namespace, authorization"
#: workflow id prefixes of the durable runs: ``watch-<plan_id>``, ``plan-<plan_id>``
_RUN_PREFIXES = ("watch-", "plan-")
_OPAQUE_SHAPE = re.compile(rf"{OPAQUE_USER_PREFIX}[0-9a-f]{{24}}", re.ASCII | re.IGNORECASE)


class CodecPayload(BaseModel):
    """One Temporal payload as the codec-server protocol writes it (base64 values)."""

    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, str] = Field(default_factory=dict, max_length=32)
    data: str = Field(default="", max_length=4_000_000)


class CodecPayloads(BaseModel):
    """``{"payloads": [...]}`` in and out."""

    model_config = ConfigDict(extra="forbid")
    payloads: list[CodecPayload] = Field(max_length=1000)


def _b64(value: str, where: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InputError(f"{where} is not base64") from e


def from_wire(body: CodecPayloads) -> list[Payload]:
    """The request's payloads as protobufs.

    Raises:
        InputError: a value is not base64 (names the payload and field).
    """
    return [
        Payload(
            metadata={k: _b64(v, f"payloads[{i}].metadata.{k}") for k, v in p.metadata.items()},
            data=_b64(p.data, f"payloads[{i}].data"),
        )
        for i, p in enumerate(body.payloads)
    ]


def to_wire(payloads: list[Payload]) -> dict[str, Any]:
    """Payloads in the codec-server JSON format."""
    return {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
                "data": base64.b64encode(p.data).decode(),
            }
            for p in payloads
        ]
    }


def decode_for(
    who: Principal,
    payloads: list[Payload],
    codec: EncryptionCodec | None,
    *,
    owns_plan: Callable[[str], bool],
) -> tuple[list[Payload], list[dict[str, str]]]:
    """Open what ``who`` may read; the rest stays sealed. Returns the payloads and the refusals
    (owner and run of each payload left sealed) for the caller to audit.

    Raises:
        PayloadCodecError: a payload ``who`` may read does not open (tampered, unknown key).
    """
    if codec is None:  # this service seals nothing: nothing to open
        return list(payloads), []
    owned: dict[str, bool] = {}
    out: list[Payload] = []
    refused: list[dict[str, str]] = []
    mine = _labels_of(who.user_id, codec)
    for p in payloads:
        owner = payload_owner(p)
        if owner is None:
            out.append(p)
            continue
        run = payload_workflow(p) or ""
        if who.admin or owner in mine or (owner == ANY_USER and _owns(run, owned, owns_plan)):
            out.append(codec.unseal(p))
        else:
            out.append(p)
            refused.append({"owner": owner[:128], "workflow_id": run[:80]})
    return out, refused


def _labels_of(user_id: str, codec: EncryptionCodec) -> set[str]:
    """The owner labels that are the caller's: their opaque id (what is sealed now) and, on
    payloads sealed before opaque ids, their id itself — unless it looks like an opaque id (a
    person named ``u-<24 hex>`` would otherwise read whoever's label that is)."""
    labels = {codec.opaque_user(user_id)}
    if not _OPAQUE_SHAPE.fullmatch(user_id):
        labels.add(user_id)
    return labels


def _owns(run: str, memo: dict[str, bool], owns_plan: Callable[[str], bool]) -> bool:
    if run not in memo:
        plan_id = next((run[len(x) :] for x in _RUN_PREFIXES if run.startswith(x)), "")
        memo[run] = bool(plan_id) and owns_plan(plan_id)
    return memo[run]


def encode_for(
    who: Principal, payloads: list[Payload], codec: EncryptionCodec | None
) -> list[Payload]:
    """Seal payloads as ``who``'s (labelled with their opaque id; what the UI sends into a run: a
    signal, an update)."""
    if codec is None:
        return list(payloads)
    return [codec.seal(p, owner=who.user_id) for p in payloads]


class CodecCors:
    """Pure ASGI middleware: CORS for ``/codec/*`` only, for exactly one origin (the Temporal UI),
    with credentials. A preflight from any other origin is refused (403, no CORS headers)."""

    def __init__(self, app: Any, origin: str | None) -> None:
        self.app, self.origin = app, origin.encode() if origin else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/codec/"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        origin = headers.get(b"origin")
        allowed = origin is not None and origin == self.origin
        cors = [
            (b"access-control-allow-origin", origin or b""),
            (b"access-control-allow-credentials", b"true"),
            (b"vary", b"Origin"),
        ]
        if scope["method"] == "OPTIONS" and b"access-control-request-method" in headers:
            extra = [
                (b"access-control-allow-methods", b"POST, OPTIONS"),
                (b"access-control-allow-headers", CODEC_HEADERS.encode()),
                (b"access-control-max-age", b"600"),
            ]
            await send(
                {
                    "type": "http.response.start",
                    "status": 204 if allowed else 403,
                    "headers": [*cors, *extra] if allowed else [(b"vary", b"Origin")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        if not allowed:
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, sending)
