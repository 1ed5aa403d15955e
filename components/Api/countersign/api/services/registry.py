"""The registry this service plans against, read and edited over HTTP (Api SPEC, also).

An edit (admins only) is validated as the whole registry it would yield, stored as a new revision
by the registry store (audited ``registry_edited``) and used from then on: plans signed against
the registry before are refused (``registry_changed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from countersign.registry.store import RegistryKind, RegistryStore

from ..errors import AdminOnlyError, RegistryItemNotFoundError
from .runtime import Runtime

__all__ = ["RegistryDesk"]


@dataclass
class RegistryDesk:
    """The registry in force: its summary, one file, an admin's edit."""

    runtime: Runtime
    #: where edits are stored (None: the registry is read-only over the API)
    store: RegistryStore | None = None

    def summary(self) -> dict[str, Any]:
        """The registry's version, connectors and intents."""
        reg = self.runtime.registry
        return {
            "version": reg.version,
            "connectors": sorted(reg.connectors),
            "intents": sorted(reg.intents),
        }

    def item(self, kind: RegistryKind, name: str) -> dict[str, Any]:
        """One connector or intent as the service plans with it, and its API revision."""
        reg = self.runtime.registry
        table: Mapping[str, Any] = reg.connectors if kind == "connectors" else reg.intents
        item = table.get(name)
        if item is None:
            raise RegistryItemNotFoundError(f"no {kind[:-1]} {name[:64]!r} in the registry")
        return {
            "kind": kind,
            "name": name,
            "revision": self.store.revision(kind, name) if self.store else 0,
            "registry_version": reg.version,
            "document": item.to_json(),
        }

    def put(
        self,
        kind: RegistryKind,
        name: str,
        document: Mapping[str, Any],
        *,
        user_id: str,
        admin: bool,
    ) -> dict[str, Any]:
        """Replace one connector or intent (admins only) as a new revision, used from now on."""
        if not admin:
            raise AdminOnlyError("only an admin edits the registry")
        if self.store is None:
            raise AdminOnlyError("this service's registry is read-only")
        reg = self.store.put(kind, name, document, author=user_id)
        self.runtime.use_registry(reg)
        return {
            "kind": kind,
            "name": name,
            "revision": self.store.revision(kind, name),
            "registry_version": reg.version,
        }
