"""A REPORT counts as a read only for an op that declares it, in exactly the declared shape
(issue 28 §1; invariant §3.2 — preview never writes). Each test tries to get a request with a
body, or another method, past the check."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from countersign.registry import Operation, ParamSpec
from countersign.workflowbuilder import SafeQuery, declared_query, read_only_violations

REPORT = SafeQuery(method="REPORT", depth="1")
_URL = '={{ $json.body.data["url"] }}'
_BODY = '={{ $json.body.data["body"] }}'


def _node(version: float = 4.2, **params: Any) -> dict[str, Any]:
    """The node the builder writes for a calendar-query read (the caldav op's binding)."""
    p: dict[str, Any] = {
        "method": "REPORT",
        "url": _URL,
        "sendHeaders": True,
        "headerParameters": {"parameters": [{"name": "Depth", "value": "1"}]},
        "sendBody": True,
        "contentType": "raw",
        "rawContentType": "application/xml",
        "body": _BODY,
        "options": {
            "webdavMethods": True,
            "response": {
                "response": {"responseFormat": "text", "fullResponse": True, "neverError": True}
            },
        },
    }
    p.update(params)
    return {
        "name": "caldav.list_free_busy",
        "type": "n8n-nodes-base.httpRequest",
        "typeVersion": version,
        "parameters": p,
    }


def _check(node: dict[str, Any], query: SafeQuery | None = REPORT) -> list[str]:
    return read_only_violations({"nodes": [node]}, query=query)


def test_the_declared_query_passes_on_every_v3_version_and_in_a_batch() -> None:
    for version in (3, 4, 4.1, 4.2, 4.3, 4.4, 4.5):
        assert _check(_node(version)) == []
    batch = _node(url='={{ $json.data["url"] }}', body='={{ $json.data["body"] }}')
    assert _check(batch) == []


def test_a_report_of_an_op_that_declares_none_is_refused() -> None:
    problems = _check(_node(), query=None)
    assert any("found 'REPORT'" in p for p in problems)
    assert any("sends a body" in p for p in problems)
    # and a query the op declares does not make a plain GET with a body pass
    assert any("sends a body" in p for p in _check(_node(method="GET")))


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE", "PATCH", "PROPFIND", "MKCOL", "MOVE"])
def test_another_method_in_the_query_shape_is_refused(method: str) -> None:
    problems = _check(_node(method=method))
    assert any(f"found {method!r}" in p for p in problems), problems


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("method", '={{ "REPORT" }}'),  # an expression that could be anything
        ("method", "report"),  # n8n's value is case-sensitive; not the declared literal
        ("body", "<C:calendar-query/>"),  # a literal body is not the rendered query
        ("body", '={{ $json.body.data["url"] }}'),  # a reference to another value
        ("body", '={{ $json.body.data["body"] }} '),
        ("body", '={{ $json.body.args["body"] }}'),  # the person's args, not rendered data
        ("sendBody", "true"),
        ("sendBody", 1),
        ("contentType", "json"),
        ("contentType", "multipart-form-data"),
        ("rawContentType", "text/calendar"),  # a calendar object: what a PUT sends
        ("sendHeaders", False),
        ("headerParameters", {"parameters": [{"name": "Depth", "value": "infinity"}]}),
        ("headerParameters", {"parameters": [{"name": "Depth", "value": 1}]}),
        (
            "headerParameters",
            {
                "parameters": [
                    {"name": "Depth", "value": "1"},
                    {"name": "X-HTTP-Method-Override", "value": "PUT"},
                ]
            },
        ),
        ("headerParameters", {"parameters": [{"name": "Depth", "value": _URL}]}),
        ("jsonBody", '{"a": 1}'),
        ("specifyBody", "json"),
        ("bodyParameters", {"parameters": [{"name": "a", "value": "b"}]}),
        ("inputDataFieldName", "data"),
        ("jsonHeaders", '{"X-HTTP-Method-Override": "PUT"}'),
        ("specifyHeaders", "json"),
        ("url", '={{ $json.body.data["url"] + "?x" }}'),
        ("options", {"webdavMethods": True, "proxy": "http://evil"}),
        ("options", {"webdavMethods": "yes"}),
        ("pagination", {"pagination": {"parameters": {"parameters": []}}}),
    ],
)
def test_any_change_to_the_declared_shape_is_refused(key: str, value: Any) -> None:
    assert _check(_node(**{key: value})), (key, value)


def test_legacy_versions_never_send_a_declared_query() -> None:
    node = _node(2)
    p = node["parameters"]
    p["requestMethod"] = p.pop("method")
    assert _check(node)
    assert _check(_node(4.6))  # a version the check does not know


def test_a_forged_workflow_cannot_declare_itself() -> None:
    """Whatever the workflow JSON carries, only the caller's ``query`` allows a REPORT."""
    forged = {"nodes": [_node()], "meta": {"query": {"method": "REPORT", "depth": "1"}}}
    assert read_only_violations(forged)
    renamed = _node()
    renamed["notes"] = "declared: REPORT"
    assert _check(renamed, query=None)


def _op(method: str, body: ParamSpec, *, safety: str = "read") -> Operation:
    params = {
        "method": ParamSpec(const=method),
        "url": ParamSpec(template="{@caldav_base_url}/{user}/calendar/"),
        "body": body,
    }
    fields: dict[str, Any] = {
        "node": {"type": "n8n-nodes-base.httpRequest", "type_version": 4.2},
        "safety": safety,
        "previewable": safety == "read",
        "role": "Fetcher" if safety == "read" else "Booker",
        "scopes": ["calendar.read"],
        "args": {"required": ["user"], "optional": ["time_min", "time_max"]},
        "output": "ics_busy",
    }
    if safety == "write":
        fields["idempotency"] = {"via": "natural_key", "field": "user"}
    op = Operation.model_validate({**fields, "params": {}})
    return op.model_copy(update={"params": params})


def _query_body() -> ParamSpec:
    # built without validation: the registry's formatter list gains caldav_query with the
    # caldav op's switch (see the LLD); the declaration is read from the op as it will be
    fields: dict[str, Any] = {
        "const": None,
        "arg": None,
        "template": None,
        "setting": None,
        "fn": "caldav_query",
        "fn_args": {"time_min": "time_min", "time_max": "time_max"},
    }
    return ParamSpec.model_construct(**fields)


def test_an_op_declares_a_query_by_its_method_and_its_query_body() -> None:
    assert declared_query(_op("REPORT", _query_body())) == REPORT
    # not: another method with the query body, a REPORT with any other body, a write
    assert declared_query(_op("PUT", _query_body())) is None
    assert declared_query(_op("GET", _query_body())) is None
    assert declared_query(_op("PROPFIND", _query_body())) is None
    assert declared_query(_op("REPORT", ParamSpec(template="<x>{user}</x>"))) is None
    assert declared_query(_op("REPORT", ParamSpec(arg="user"))) is None
    assert declared_query(_op("REPORT", _query_body(), safety="write")) is None
    gate = _op("REPORT", _query_body()).model_copy(update={"gate": True})
    assert declared_query(gate) is None


def test_the_check_does_not_change_the_node() -> None:
    node = _node()
    before = copy.deepcopy(node)
    _check(node)
    assert node == before
