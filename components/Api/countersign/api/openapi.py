"""The OpenAPI document: every operation lists the problem+json answers it can give (schemathesis
checks it) and its bearer security."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

__all__ = ["Problem", "document_problems"]

#: problem statuses each kind of operation can answer (documented in the OpenAPI schema)
_AUTHED = (401, 403, 404, 409, 422, 429, 503)
_PUBLIC = {"/healthz", "/metrics"}


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    errors: list[dict[str, Any]] | None = None


def document_problems(app: FastAPI) -> None:
    """Every operation documents the problem+json answers it can give."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = base()
        doc.setdefault("components", {}).setdefault("schemas", {})["Problem"] = (
            Problem.model_json_schema()
        )
        for path, ops in doc.get("paths", {}).items():
            for op in ops.values():
                _document(path, op)
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
        }
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _document(path: str, op: dict[str, Any]) -> None:
    ref = {"$ref": "#/components/schemas/Problem"}
    responses = op.setdefault("responses", {})
    responses.pop("422", None)
    public = path in _PUBLIC
    if path == "/healthz":
        responses["503"] = {
            "description": "a dependency is down (each one's state in the body)",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    for status in () if public else _AUTHED:
        responses[str(status)] = {
            "description": "a problem (RFC 9457)",
            "content": {"application/problem+json": {"schema": ref}},
        }
    if not public:
        op["security"] = [{"bearer": []}]
