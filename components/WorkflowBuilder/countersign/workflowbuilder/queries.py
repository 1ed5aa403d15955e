"""Safe methods with a body — a CalDAV ``REPORT`` — as reads, per op (issue 28 §1).

REPORT (RFC 3253 §3.6, RFC 4791 §7.8) is safe: it asks, it changes nothing. But a request with a
body is what a write looks like, so ``read_only_violations`` never passes one on the method's
word: a node may send a REPORT only when the **op it runs declares it**, and only in exactly the
declared shape. An op declares a query by its registry binding (``declared_query``): a read op
(``safety: read``, not a gate) whose ``method`` is the constant ``REPORT`` and whose ``body`` is
built by a query formatter this module lists (``caldav_query``: a ``calendar-query`` document
made of two times, ``countersign.binding.caldav``). The caller of the check passes the
declaration of the op it checks; a workflow cannot declare itself.

The shape a declared query's node must have, on HTTP Request v3+ only (``query_violations``):
the method literal and equal to the declaration; a raw body (``sendBody`` true, ``contentType``
``raw``, ``rawContentType`` ``application/xml``) whose value is the builder's reference to the
``body`` data value and nothing else; exactly one header, ``Depth`` with the declared literal
value; ``options.webdavMethods`` (n8n's switch that lists REPORT) may be true. Everything else of
the node is checked as for any read (``readonly``). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from countersign.registry import Operation

__all__ = ["QUERY_FORMATTERS", "SafeQuery", "declared_query", "query_violations", "split_query"]

#: query formatter (a registry ``fn``) → (the one method it is sent with, its Depth header)
QUERY_FORMATTERS: Final[Mapping[str, tuple[str, str]]] = {"caldav_query": ("REPORT", "1")}
#: the parameters the declared shape owns (checked here, not by the generic rules)
QUERY_PARAMS: Final = frozenset(
    {
        "method",
        "sendBody",
        "contentType",
        "rawContentType",
        "body",
        "sendHeaders",
        "headerParameters",
    }
)
_BODY_REF: Final = re.compile(r'=\{\{ (?:\$json\.body|\$json)\.data\["body"\] \}\}')
#: other ways to give the body or the headers: the declared shape has none of them (``specifyHeaders:
#: json`` would send ``jsonHeaders`` instead of the Depth header)
_NOT_IN_QUERY: Final = (
    "specifyBody",
    "bodyParameters",
    "jsonBody",
    "inputDataFieldName",
    "specifyHeaders",
    "jsonHeaders",
)


@dataclass(frozen=True)
class SafeQuery:
    """A safe method with a body that one op declares: the method and its ``Depth``."""

    method: str
    depth: str


def declared_query(op: Operation) -> SafeQuery | None:
    """The query ``op`` declares (module docstring), or None: then no node of it may send a
    body or a method other than GET/HEAD/OPTIONS."""
    if op.safety != "read" or op.gate:
        return None
    method, body = op.params.get("method"), op.params.get("body")
    if method is None or body is None or body.fn is None:
        return None
    found = QUERY_FORMATTERS.get(body.fn)
    if found is None or method.const != found[0]:
        return None
    return SafeQuery(method=found[0], depth=found[1])


def split_query(p: Mapping[str, Any], query: SafeQuery | None) -> tuple[dict[str, Any], bool]:
    """``p`` without what the declared shape owns, and whether the node claims the query (its
    method is the declared one); without a claim ``p`` is returned whole."""
    if query is None or p.get("method") != query.method:
        return dict(p), False
    rest = {k: v for k, v in p.items() if k not in QUERY_PARAMS}
    options = rest.get("options")
    if isinstance(options, Mapping) and options.get("webdavMethods") is True:
        rest["options"] = {k: v for k, v in options.items() if k != "webdavMethods"}
    return rest, True


def query_violations(label: str, p: Mapping[str, Any], query: SafeQuery) -> list[str]:
    """How the node's request differs from the declared query's shape (empty: it is that
    query)."""
    out: list[str] = []
    expected: dict[str, Any] = {
        "sendBody": True,
        "contentType": "raw",
        "rawContentType": "application/xml",
        "sendHeaders": True,
        "headerParameters": {"parameters": [{"name": "Depth", "value": query.depth}]},
    }
    for key, value in expected.items():
        if p.get(key) != value or type(p.get(key)) is not type(value):
            out.append(
                f"{label}: a declared {query.method} needs {key}={value!r}, found "
                f"{p.get(key)!r:.80}"
            )
    body = p.get("body")
    if not (isinstance(body, str) and _BODY_REF.fullmatch(body)):
        out.append(
            f"{label}: a declared {query.method}'s body must be the builder's reference to the "
            f"rendered query, found {body!r:.80}"
        )
    for key in _NOT_IN_QUERY:
        if key in p:
            out.append(
                f"{label}: a declared {query.method} has its raw XML body and Depth header "
                f"only ({key})"
            )
    return out
