"""JSON answers the routes build: plain JSON (times as UTC ISO 8601), problem documents, events."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Response
from fastapi.responses import JSONResponse

from countersign.kernel import format_utc

__all__ = ["PROBLEM_JSON", "event_json", "json_response", "jsonable", "problem_response"]

PROBLEM_JSON = "application/problem+json"


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """``body`` as compact JSON (UTF-8, no ASCII escaping; datetimes as UTC ISO 8601)."""
    return Response(
        status_code=status,
        headers=headers,
        content=json.dumps(
            body, ensure_ascii=False, separators=(",", ":"), default=_default
        ).encode(),
        media_type="application/json",
    )


def _default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return format_utc(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def problem_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> JSONResponse:
    """A problem document (RFC 9457) with its media type."""
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """A database row with its times as UTC ISO 8601 strings."""
    return {k: format_utc(v) if hasattr(v, "isoformat") else v for k, v in row.items()}


def event_json(row: dict[str, Any]) -> str:
    """One plan event as the ``data`` of its Server-Sent Event."""
    return json.dumps(jsonable(row), separators=(",", ":"), sort_keys=True)
