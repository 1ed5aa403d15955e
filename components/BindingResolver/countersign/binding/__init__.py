"""BindingResolver: plan step + registry -> n8n node type, typeVersion, parameters, data."""

from .core import BoundNode, DataBinding, resolve_step, set_path
from .ics import CalendarError, CalendarWindowError, ics_busy, ics_event
from .refs import referenced_steps, resolve_refs
from .render import (
    BINARY,
    idempotency_header_path,
    mail_text,
    normalize_output,
    render_data,
)

__all__ = [
    "BINARY",
    "BoundNode",
    "CalendarError",
    "CalendarWindowError",
    "DataBinding",
    "ics_busy",
    "ics_event",
    "idempotency_header_path",
    "mail_text",
    "normalize_output",
    "referenced_steps",
    "render_data",
    "resolve_refs",
    "resolve_step",
    "set_path",
]
