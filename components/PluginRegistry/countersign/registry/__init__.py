"""PluginRegistry: connectors bound to n8n nodes, and the intents the planner knows (vR)."""

from .loader import Registry, load_registry, read_documents, registry_from_documents
from .models import (
    ArgSpec,
    Compensation,
    Connector,
    EntitySpec,
    Idempotency,
    IntentSpec,
    NodeBinding,
    Offers,
    Operation,
    ParamSpec,
    StepTemplate,
    template_fields,
)

__all__ = [
    "ArgSpec",
    "Compensation",
    "Connector",
    "EntitySpec",
    "Idempotency",
    "IntentSpec",
    "NodeBinding",
    "Offers",
    "Operation",
    "ParamSpec",
    "Registry",
    "StepTemplate",
    "load_registry",
    "read_documents",
    "registry_from_documents",
    "template_fields",
]
