"""The Temporal UI's codec endpoint (Api SPEC, the Temporal UI's codec endpoint)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..bodies import StrictJsonRoute
from ..codec import CodecPayloads, from_wire, to_wire
from ..deps import CodecCaller, Config, Svc

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.post("/codec/decode", tags=["codec"], response_model=CodecPayloads)
def codec_decode(body: CodecPayloads, who: CodecCaller, svc: Svc, cfg: Config) -> dict[str, Any]:
    """Open the Temporal payloads the caller may read (their own runs'; admins: all); any
    other stays sealed, and that refusal is audited (``codec_decode_refused``)."""
    return to_wire(svc.codec.decode(who, from_wire(body), cfg.payload_codec))


@router.post("/codec/encode", tags=["codec"], response_model=CodecPayloads)
def codec_encode(body: CodecPayloads, who: CodecCaller, svc: Svc, cfg: Config) -> dict[str, Any]:
    """Seal payloads as the caller's (what the Temporal UI sends into a run)."""
    return to_wire(svc.codec.encode(who, from_wire(body), cfg.payload_codec))
