"""The registry this service plans against: read it, and (admins) edit one file."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import JsonValue

from countersign.registry.store import RegistryKind as Kind

from ..bodies import StrictJsonRoute
from ..deps import Caller, Svc

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/v1/registry", tags=["registry"])
def registry(who: Caller, svc: Svc) -> dict[str, Any]:
    """The registry this service plans against: its version, connectors and intents."""
    return svc.registry.summary()


@router.get("/v1/registry/{kind}/{name}", tags=["registry"])
def registry_file(kind: Kind, name: str, who: Caller, svc: Svc) -> dict[str, Any]:
    """One connector or intent as the service plans with it, and its API revision."""
    return svc.registry.item(kind, name)


@router.put("/v1/registry/{kind}/{name}", tags=["registry"])
def put_registry_file(
    kind: Kind, name: str, document: dict[str, JsonValue], who: Caller, svc: Svc
) -> dict[str, Any]:
    """Replace one connector or intent (admins only): validated with the registry's own
    errors, stored as a new revision; plans signed before are refused from now on."""
    return svc.registry.put(kind, name, document, user_id=who.user_id, admin=who.admin)
