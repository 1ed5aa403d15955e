"""The Temporal UI's codec endpoint behind the routes (Api SPEC, the Temporal UI's codec
endpoint): open the payloads the caller may read, seal what they send; the refusals are audited.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.api.common.v1 import Payload

from countersign.audit import AuditLog
from countersign.durable import EncryptionCodec
from countersign.storage import Database

from ..codec import decode_for, encode_for
from ..users import Principal
from .views import PlanViews

__all__ = ["CodecDesk"]


@dataclass
class CodecDesk:
    """Decode and encode Temporal payloads for a caller."""

    db: Database
    views: PlanViews
    audit: AuditLog

    def decode(
        self, who: Principal, payloads: list[Payload], codec: EncryptionCodec | None
    ) -> list[Payload]:
        """Open the payloads ``who`` may read (their own runs'; admins: all); any other stays
        sealed, and that refusal is audited (``codec_decode_refused``: owners, runs, count)."""
        out, refused = decode_for(
            who, payloads, codec, owns_plan=lambda plan_id: self.views.owns(plan_id, who.user_id)
        )
        if refused:
            with self.db.tx() as c:
                self.audit.append(
                    c,
                    {
                        "kind": "codec_decode_refused",
                        "status": "refused",
                        "actor": who.user_id,
                        "reason": f"{len(refused)} Temporal payload(s) of another person "
                        "left sealed",
                        "details": {
                            "owners": sorted({r["owner"] for r in refused})[:20],
                            "workflows": sorted({r["workflow_id"] for r in refused})[:20],
                            "payloads": len(refused),
                        },
                    },
                )
        return out

    @staticmethod
    def encode(
        who: Principal, payloads: list[Payload], codec: EncryptionCodec | None
    ) -> list[Payload]:
        """Seal payloads as ``who``'s (what the Temporal UI sends into a run)."""
        return encode_for(who, payloads, codec)
