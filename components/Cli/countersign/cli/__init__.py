"""The ``countersign`` command line."""

from .main import app, main, plan_document, read_document

__all__ = ["app", "main", "plan_document", "read_document"]
