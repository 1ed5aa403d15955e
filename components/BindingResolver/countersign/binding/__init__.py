"""BindingResolver: plan step + registry -> n8n node type, typeVersion, parameters, data."""

from .core import BoundNode, DataBinding, resolve_step, set_path
from .render import ics_busy, ics_event, normalize_output, render_data

__all__ = [
    "BoundNode",
    "DataBinding",
    "ics_busy",
    "ics_event",
    "normalize_output",
    "render_data",
    "resolve_step",
    "set_path",
]
