"""The HTTP request builder moved one floor down to ``countersign.steps.http`` (issue 16.0: the
interactive staleness re-check sends the same requests); re-exported here for this component."""

from countersign.steps.http import HttpCall, http_call, send

__all__ = ["HttpCall", "http_call", "send"]
