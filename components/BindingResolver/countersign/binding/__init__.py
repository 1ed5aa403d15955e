"""BindingResolver: plan step + registry -> n8n node type, typeVersion, parameters, data."""

from .core import BoundNode, DataBinding, resolve_step, set_path

__all__ = ["BoundNode", "DataBinding", "resolve_step", "set_path"]
