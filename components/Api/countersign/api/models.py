"""The request bodies (``schemas/*.json`` are generated from them): strict, extra keys refused."""

from __future__ import annotations

from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

__all__ = [
    "ApproveRequest",
    "ExecuteRequest",
    "IntentRequest",
    "RejectRequest",
    "ReplanRequest",
    "ReviseRequest",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IntentRequest(BaseModel):
    """``{"intent": {...}}`` (structured); ``{"text": ...}`` is reserved for chat."""

    model_config = ConfigDict(extra="forbid")
    intent: dict[str, JsonValue] | None = None
    text: str | None = Field(default=None, max_length=4000)
    conversation_id: str | None = Field(default=None, max_length=64)
    #: the person's IANA time zone for chat text ("tomorrow afternoon" is theirs; the chat page
    #: sends the browser's); unset = the service's
    tz: str | None = Field(default=None, max_length=64)

    @field_validator("tz")
    @classmethod
    def _tz_exists(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ZoneInfo(v)
            except (ZoneInfoNotFoundError, ValueError) as e:
                raise ValueError(f"unknown IANA time zone {v!r}") from e
        return v


class ApproveRequest(_Body):
    choice: JsonValue = None


class RejectRequest(_Body):
    reason: str | None = Field(default=None, max_length=500)


class ReviseRequest(_Body):
    #: the entities to change (``null`` drops an optional one); the rest stay as signed
    entities: dict[str, Any] = Field(min_length=1, max_length=32)


class ReplanRequest(_Body):
    #: the ``source_ref`` of each evidence item to leave out (as the card lists them)
    drop: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        min_length=1, max_length=64
    )


class ExecuteRequest(_Body):
    tokens: dict[str, Annotated[str, Field(min_length=1, max_length=2048)]] = Field(
        default_factory=dict
    )
