"""Request bodies read strictly (GLOBAL_SPEC §11a): one body, one reading.

FastAPI parses a JSON body with ``json.loads``, which keeps the *last* of two equal keys —
``{"choice": {...}, "ch\\u006fice": {...}}`` shows a reviewer one choice and approves another.
Every route of the app is a :class:`StrictJsonRoute`: before FastAPI sees the request, a route
that takes a body reads it once and parses it with ``countersign.kernel.loads_strict`` (no
repeated key at any depth however it is spelled, UTF-8 only, depth ≤ 64, no ``NaN``); FastAPI
then validates that parsed value (``Request.json`` answers it from the cache). A body that fails
raises the ``DocumentError`` / ``DuplicateKeyError`` of the error tree, so the app's one problem
handler answers 422 ``document_malformed`` / ``document_duplicate_key`` naming the key and its
path — before the handler runs, so nothing is stored.
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from countersign.kernel import loads_strict

__all__ = ["StrictJsonRoute", "is_json_body"]

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def is_json_body(content_type: str | None) -> bool:
    """Whether FastAPI would read a body with this ``Content-Type`` as JSON (none given,
    ``application/json`` or ``application/<anything>+json``)."""
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class _StrictRequest(Request):
    """A request whose JSON body is parsed by ``loads_strict`` (and only once)."""

    _strict: Any

    async def json(self) -> Any:
        if not hasattr(self, "_strict"):
            self._strict = loads_strict(await self.body(), what="request body")
        return self._strict


class StrictJsonRoute(APIRoute):
    """An ``APIRoute`` whose JSON body is parsed strictly before FastAPI validates it."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict(request: Request) -> Response:
            req = _StrictRequest(request.scope, request.receive)
            if await req.body() and is_json_body(req.headers.get("content-type")):
                await req.json()  # raises DocumentError: the app's problem handler answers
            return await handler(req)

        return strict
