"""Test support for invariant §3.2: registries whose read bindings were hand-edited to write.

``edited_registry`` copies a registry folder and rewrites one op with one of ``WRITE_EDITS`` —
each a way a person could turn a read binding into something that writes (the method in the
parameter an older HTTP Request version reads, a body on a GET, an unknown typeVersion, a
method-override header, a mail node, the op re-labelled as a write, ...). The source folder is
never touched. ``CountingTransport`` is a ``StepTransport`` that records deploys and calls.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from countersign.registry import Registry, load_registry
from countersign.workflowbuilder import StepWorkflow

__all__ = ["WRITE_EDITS", "CountingTransport", "edited_registry"]

Edit = Callable[[dict[str, Any]], None]


def _http(version: float, **params: Any) -> Edit:
    def edit(op: dict[str, Any]) -> None:
        op["node"]["type_version"] = version
        for name, value in params.items():
            if value is None:
                op["params"].pop(name, None)
            else:
                op["params"][name] = {"const": value}

    return edit


def _relabel(op: dict[str, Any]) -> None:
    op["safety"] = "write"
    op["previewable"] = False
    op["idempotency"] = {"via": "ledger"}  # the registry's own rule for a write op


def _mail(op: dict[str, Any]) -> None:
    op["node"] = {"type": "n8n-nodes-base.emailSend", "type_version": 2.1}


#: name → how a read op's binding is edited so that it would write.
WRITE_EDITS: Mapping[str, Edit] = {
    "v2 requestMethod POST": _http(2, method=None, requestMethod="POST"),
    "v1 requestMethod put": _http(1, method=None, requestMethod="put"),
    "v2 requestMethod POST, method GET": _http(2, method="GET", requestMethod="POST"),
    "v4.2 method post": _http(4.2, method="post"),
    "v4.2 method Delete": _http(4.2, method="Delete"),
    "v4.5 requestMethod POST": _http(4.5, requestMethod="POST"),
    "v4.2 GET with a JSON body": _http(4.2, sendBody=True, specifyBody="json", jsonBody='{"x": 1}'),
    "v4.6 unknown version": _http(4.6),
    "v3 method-override header": _http(
        3,
        sendHeaders=True,
        **{
            "headerParameters.parameters[0].name": "X-HTTP-Method-Override",
            "headerParameters.parameters[0].value": "DELETE",
        },
    ),
    "v4.2 WebDAV MKCOL": _http(4.2, method="MKCOL", **{"options.webdavMethods": True}),
    # safe methods with a body count as reads only for an op that declares the query (issue 28:
    # a registry method const REPORT with a ``caldav_query`` body); none of these declares one
    # (the body is dropped: an op whose body is no query formatter declares no query)
    "v4.2 REPORT, no query declared": _http(
        4.2, method="REPORT", body=None, **{"options.webdavMethods": True}
    ),
    "v4.2 REPORT with a literal XML body": _http(
        4.2,
        method="REPORT",
        sendBody=True,
        contentType="raw",
        rawContentType="application/xml",
        body="<C:calendar-query xmlns:C='urn:ietf:params:xml:ns:caldav'/>",
        sendHeaders=True,
        **{
            "options.webdavMethods": True,
            "headerParameters.parameters[0].name": "Depth",
            "headerParameters.parameters[0].value": "1",
        },
    ),
    "v4.2 PROPFIND": _http(4.2, method="PROPFIND", **{"options.webdavMethods": True}),
    "v4.2 PUT in a query's shape": _http(
        4.2,
        method="PUT",
        sendBody=True,
        contentType="raw",
        rawContentType="application/xml",
        body="<x/>",
        sendHeaders=True,
        **{
            "headerParameters.parameters[0].name": "Depth",
            "headerParameters.parameters[0].value": "1",
        },
    ),
    "v4.2 pagination": _http(
        4.2, **{"options.pagination.pagination.paginationMode": "responseContainsNextURL"}
    ),
    "re-labelled as a write": _relabel,
    "bound to a mail node": _mail,
}


def edited_registry(source: Path, dest: Path, uses: str, call: str, edit: Edit) -> Registry:
    """Copy the registry folder ``source`` to ``dest``, apply ``edit`` to op ``uses.call``,
    and load the copy."""
    shutil.copytree(source, dest)
    for path in sorted((dest / "connectors").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if doc.get("id") == uses:
            edit(doc["ops"][call])
            path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            return load_registry(dest)
    raise LookupError(f"no connector {uses!r} in {source}")


class CountingTransport:
    """A ``StepTransport`` that runs nothing and counts what it was asked to do."""

    def __init__(self) -> None:
        self.deployed: list[StepWorkflow] = []
        self.calls: list[tuple[str, Mapping[str, Any]]] = []

    async def deploy(self, workflow: StepWorkflow) -> None:
        """Record the deploy."""
        self.deployed.append(workflow)

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        """Record the call; answer an empty 200."""
        self.calls.append((path, body))
        return {"status": 200, "body": {}}

    async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """Record the call; an empty 200 per item."""
        self.calls.append((path, body))
        return [{"status": 200, "body": {}} for _ in body["items"]]
