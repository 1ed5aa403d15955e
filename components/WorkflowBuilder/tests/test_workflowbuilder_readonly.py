"""``read_only_violations`` against generated workflows (issue 10, hole 1; invariant §3.2).

Hypothesis builds writing workflows in every shape the review found and more — an HTTP Request
node of a random known or unknown typeVersion whose method sits in the parameter that version
reads or in the other one, in any letter case; expressions in the method or URL; bodies; options
that mutate or follow; method-override headers; nodes that send (mail, chat, calendar writes,
Code calling n8n's HTTP helper, Merge running SQL, Wait) — and asserts each is refused. It also
builds genuinely read-only workflows and asserts they pass, so the check cannot be "refuse all".
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from countersign.kernel import Plan, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.signer import plan_hash
from countersign.workflowbuilder import (
    HTTP_REQUEST,
    CredentialRef,
    build_step_workflow,
    declared_query,
    read_only_violations,
)
from countersign.workflowbuilder.core import _data_expr

LEGACY = (1, 2)  # HttpRequestV1 / V2: getNodeParameter('requestMethod')
V3 = (3, 4, 4.1, 4.2, 4.3, 4.4, 4.5)  # HttpRequestV3: getNodeParameter('method')
KNOWN = LEGACY + V3
UNKNOWN: list[Any] = [0, 0.5, 1.5, 2.5, 3.5, 4.6, 4.55, 5, 6, 10, -1, "4.2", "1", None, True]
WRITE_METHODS = ["POST", "PUT", "PATCH", "DELETE", "MKCOL", "MOVE", "COPY", "PROPPATCH", "LOCK"]
READ = ["GET", "HEAD", "OPTIONS"]
DATA_URL = _data_expr("$json.body", "url")


def _param(version: float) -> str:
    return "requestMethod" if version in LEGACY else "method"


def _other(version: float) -> str:
    return "method" if version in LEGACY else "requestMethod"


def _wf(*nodes: dict[str, Any]) -> dict[str, Any]:
    trigger = {
        "name": "Trigger",
        "type": "n8n-nodes-base.webhook",
        "typeVersion": 2,
        "parameters": {"httpMethod": "POST", "path": "p", "responseMode": "lastNode"},
    }
    return {"nodes": [trigger, *nodes], "connections": {}}


def _http(version: Any, **params: Any) -> dict[str, Any]:
    return {"name": "read", "type": HTTP_REQUEST, "typeVersion": version, "parameters": params}


@st.composite
def any_case(draw: st.DrawFn, word: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.lower() if f else c.upper() for c, f in zip(word, flips, strict=True))


# --- writing workflows ----------------------------------------------------------------------


@st.composite
def http_method_writes(draw: st.DrawFn) -> dict[str, Any]:
    """A known version, a writing method under the right or the wrong parameter name."""
    version = draw(st.sampled_from(KNOWN))
    method = draw(st.sampled_from(WRITE_METHODS).flatmap(any_case))
    name = draw(st.sampled_from([_param(version), _other(version)]))
    params: dict[str, Any] = {name: method, "url": draw(st.sampled_from(["http://h/x", DATA_URL]))}
    if name != _param(version) and draw(st.booleans()):
        params[_param(version)] = "GET"  # the read one says GET, the other says POST
    return _http(version, **params)


@st.composite
def unknown_versions(draw: st.DrawFn) -> dict[str, Any]:
    version = draw(
        st.one_of(
            st.sampled_from(UNKNOWN),
            st.floats(allow_nan=True).filter(lambda v: v not in KNOWN),
            st.integers().filter(lambda v: v not in KNOWN),
        )
    )
    method = draw(st.sampled_from(READ))
    return _http(version, **{draw(st.sampled_from(["method", "requestMethod"])): method})


@st.composite
def expression_writes(draw: st.DrawFn) -> dict[str, Any]:
    version = draw(st.sampled_from(KNOWN))
    hostile = draw(
        st.sampled_from(
            [
                "={{ 'POST' }}",
                "=GET",
                "GET{{ '' }}",
                '={{ $json.body.data["method"] }}',
                DATA_URL,
                "={{ $json.method }}",
            ]
        )
    )
    if draw(st.booleans()):
        return _http(version, **{_param(version): hostile, "url": "http://h/x"})
    url = draw(
        st.sampled_from(
            [
                "=http://h/{{ $json.id }}",
                "={{ $json.url }}",
                "http://h/{{ 1 }}",
                "={{ $json.body.data['url'] }}",
                DATA_URL + " ",
                "=" + "http://h/x",
                '={{ $json.body.data["url"] }}{{ $env.X }}',
            ]
        )
    )
    return _http(version, **{_param(version): "GET", "url": url})


V3_BODIES: list[dict[str, Any]] = [
    {"sendBody": True},
    {"sendBody": True, "contentType": "json", "specifyBody": "json", "jsonBody": '{"a": 1}'},
    {"jsonBody": "{}x"},
    {"body": "raw text"},
    {"bodyParameters": {"parameters": [{"name": "a", "value": "b"}]}},
    {"sendBody": True, "contentType": "binaryData", "inputDataFieldName": "data"},
    {"contentType": "raw", "rawContentType": "text/plain", "body": "x"},
    {"sendBody": "={{ true }}"},
]
LEGACY_BODIES: list[dict[str, Any]] = [
    {"jsonParameters": True, "bodyParametersJson": '{"a": 1}'},
    {"bodyParametersUi": {"parameter": [{"name": "a", "value": "b"}]}},
    {"sendBinaryData": True, "binaryPropertyName": "data"},
    {"binaryPropertyName": "data"},
]
V3_OPTIONS: list[dict[str, Any]] = [
    {"pagination": {"pagination": {"paginationMode": "updateAParameterInEachRequest"}}},
    {"webdavMethods": True},
    {"proxy": "http://proxy:3128"},
    {"sendCredentialsOnCrossOriginRedirect": True},
    {"somethingNew": 1},
]
LEGACY_OPTIONS: list[dict[str, Any]] = [
    {"bodyContentType": "json"},
    {"bodyContentCustomMimeType": "text/plain"},
    {"proxy": "http://proxy:3128"},
]


@st.composite
def body_or_option_writes(draw: st.DrawFn) -> dict[str, Any]:
    version = draw(st.sampled_from(KNOWN))
    legacy = version in LEGACY
    params: dict[str, Any] = {_param(version): draw(st.sampled_from(READ)), "url": "http://h/x"}
    if draw(st.booleans()):
        params.update(draw(st.sampled_from(LEGACY_BODIES if legacy else V3_BODIES)))
    else:
        params["options"] = draw(st.sampled_from(LEGACY_OPTIONS if legacy else V3_OPTIONS))
    return _http(version, **params)


@st.composite
def override_header_writes(draw: st.DrawFn) -> dict[str, Any]:
    version = draw(st.sampled_from(KNOWN))
    header = draw(st.sampled_from(["X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"]))
    header = draw(any_case(header))
    params: dict[str, Any] = {_param(version): "GET", "url": "http://h/x"}
    how = draw(st.sampled_from(["ui", "json"]))
    if version in LEGACY:
        if how == "ui":
            params["headerParametersUi"] = {"parameter": [{"name": header, "value": "DELETE"}]}
        else:
            params["jsonParameters"] = True
            params["headerParametersJson"] = json.dumps({header: "DELETE"})
    elif how == "ui":
        params["sendHeaders"] = True
        params["headerParameters"] = {"parameters": [{"name": header, "value": "DELETE"}]}
    else:
        params["sendHeaders"] = True
        params["specifyHeaders"] = "json"
        params["jsonHeaders"] = json.dumps({header: "DELETE"})
    return _http(version, **params)


def _node(t: str, version: Any, **params: Any) -> dict[str, Any]:
    return {"name": "n", "type": t, "typeVersion": version, "parameters": params}


OTHER_WRITES: list[dict[str, Any]] = [
    _node("n8n-nodes-base.emailSend", 2.1, toEmail="a@b", text="x"),
    _node("n8n-nodes-base.emailSend", 1, toEmail="a@b"),
    _node("n8n-nodes-base.gmail", 2.1, resource="message", operation="send"),
    _node("n8n-nodes-base.gmail", 2.1, operation="markAsRead"),
    _node("n8n-nodes-base.gmail", 2.1, resource="thread", operation="trash"),
    _node("n8n-nodes-base.gmail", 2.1),  # default operation: send
    _node("n8n-nodes-base.gmail", 2.1, resource="message", operation="={{ 'get' }}"),
    _node("n8n-nodes-base.gmail", 9, resource="message", operation="get"),  # unknown version
    _node("n8n-nodes-base.slack", 2.3, resource="message", operation="post"),
    _node("n8n-nodes-base.slack", 2.3, operation="get"),  # message.get does not exist
    _node("n8n-nodes-base.slack", 2.3, resource="channel", operation="archive"),
    _node("n8n-nodes-base.googleCalendar", 1.3, resource="event", operation="create"),
    _node("n8n-nodes-base.googleCalendar", 1.3, operation="delete"),
    _node("n8n-nodes-base.googleCalendar", 1.3),
    _node("n8n-nodes-base.wait", 1.1, resume="webhook"),
    _node("n8n-nodes-base.executeCommand", 1, command="curl -X POST x"),
    _node("n8n-nodes-base.telegram", 1.2, operation="sendMessage"),
    _node("n8n-nodes-base.postgres", 2.5, operation="executeQuery"),
    _node("n8n-nodes-base.merge", 3, mode="combineBySql", query="SELECT * FROM input1"),
    _node("n8n-nodes-base.merge", 1, mode="append"),  # v1 is not on the list
    _node("n8n-nodes-base.code", 2, jsCode="await helpers.httpRequest({method: 'POST'})"),
    _node("n8n-nodes-base.code", 2, jsCode="return this.helpers.request('http://h')"),
    _node("n8n-nodes-base.code", 2, jsCode="const f = fetch; return [{json: {}}]"),
    _node("n8n-nodes-base.code", 2, jsCode="globalThis['help'+'ers']"),
    _node("n8n-nodes-base.code", 2, jsCode="x[`constructor`]"),
    _node("n8n-nodes-base.code", 2, jsCode="={{ $json.code }}"),
    _node("n8n-nodes-base.code", 2, language="python", pythonCode="import urllib"),
    _node("n8n-nodes-base.code", 3, jsCode="return []"),
    _node("n8n-nodes-base.set", 99),
    {"name": "no version", "type": "n8n-nodes-base.set", "parameters": {}},
    {"name": "bad params", "type": HTTP_REQUEST, "typeVersion": 4.2, "parameters": "GET"},
]


def writing_nodes() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        http_method_writes(),
        unknown_versions(),
        expression_writes(),
        body_or_option_writes(),
        override_header_writes(),
        st.sampled_from(OTHER_WRITES),
    )


# --- read-only workflows --------------------------------------------------------------------


@st.composite
def http_reads(draw: st.DrawFn) -> dict[str, Any]:
    version = draw(st.sampled_from(KNOWN))
    params: dict[str, Any] = {"url": draw(st.sampled_from(["http://h/x?a=1", DATA_URL]))}
    if draw(st.booleans()):
        params[_param(version)] = draw(st.sampled_from(READ))
    value = st.sampled_from(["v", "", DATA_URL, _data_expr("$json.body", "q")])
    if version in LEGACY:
        if draw(st.booleans()):
            params["queryParametersUi"] = {"parameter": [{"name": "q", "value": draw(value)}]}
        if draw(st.booleans()):
            params["headerParametersUi"] = {"parameter": [{"name": "Accept", "value": draw(value)}]}
        params["options"] = draw(
            st.fixed_dictionaries(
                {},
                optional={"timeout": st.integers(1, 10_000), "fullResponse": st.booleans()},
            )
        )
    else:
        if draw(st.booleans()):
            params["sendQuery"] = True
            params["queryParameters"] = {"parameters": [{"name": "q", "value": draw(value)}]}
        if draw(st.booleans()):
            params["sendHeaders"] = True
            params["headerParameters"] = {
                "parameters": [{"name": "Idempotency-Key", "value": draw(value)}]
            }
        if draw(st.booleans()):
            params["sendBody"] = False
        params["options"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "timeout": st.integers(1, 10_000),
                    "response": st.just({"response": {"fullResponse": True, "neverError": True}}),
                    "redirect": st.just({"redirect": {"followRedirects": True}}),
                },
            )
        )
    return _http(version, **params)


PURE_NODES: list[dict[str, Any]] = [
    _node("n8n-nodes-base.set", 3.4, mode="manual"),
    _node("n8n-nodes-base.noOp", 1),
    _node("n8n-nodes-base.merge", 3, numberInputs=2),
    _node("n8n-nodes-base.merge", 3.2, mode="combine"),
    _node("n8n-nodes-base.respondToWebhook", 1.1, respondWith="firstIncomingItem"),
    _node(
        "n8n-nodes-base.code",
        2,
        mode="runOnceForAllItems",
        language="javaScript",
        jsCode="const a = $input.first().json.body.args;\nreturn [{json: {n: a.inputs.length}}];",
    ),
    _node("n8n-nodes-base.googleCalendar", 1.3, resource="calendar", operation="availability"),
    _node("n8n-nodes-base.googleCalendar", 1.3, operation="getAll"),
    _node("n8n-nodes-base.gmail", 2.1, resource="message", operation="get"),
    _node("n8n-nodes-base.slack", 2.3, resource="channel", operation="history"),
]


def reading_nodes() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(http_reads(), st.sampled_from(PURE_NODES))


# --- properties -----------------------------------------------------------------------------


@settings(max_examples=400)
@given(bad=writing_nodes(), good=st.lists(reading_nodes(), max_size=3), at=st.integers(0, 3))
@example(bad=_http(2, requestMethod="POST", url="http://h/x"), good=[], at=0)
@example(bad=_http(1, requestMethod="post", url="http://h/x"), good=[], at=0)
@example(bad=_http(4.2, method="Delete", url="http://h/x"), good=[], at=0)
def test_every_writing_workflow_is_refused(
    bad: dict[str, Any], good: list[dict[str, Any]], at: int
) -> None:
    nodes = list(good)
    nodes.insert(min(at, len(nodes)), bad)
    problems = read_only_violations(_wf(*nodes))
    assert problems, bad
    # the refusal names the offending node
    assert any(str(bad.get("name")) in p for p in problems)


@settings(max_examples=300)
@given(good=st.lists(reading_nodes(), min_size=1, max_size=4))
def test_every_read_only_workflow_passes(good: list[dict[str, Any]]) -> None:
    assert read_only_violations(_wf(*good)) == []


@given(version=st.sampled_from(KNOWN), method=st.sampled_from(READ).flatmap(any_case))
def test_a_method_is_read_only_only_as_n8n_spells_it(version: float, method: str) -> None:
    problems = read_only_violations(_wf(_http(version, **{_param(version): method, "url": "x"})))
    assert (problems == []) == (method in READ), problems


def test_messages_name_the_parameter_the_version_reads() -> None:
    (p,) = read_only_violations(_wf(_http(2, requestMethod="POST", url="http://h/")))
    assert "HTTP Request v2" in p and "'requestMethod'" in p and "found 'POST'" in p
    problems = read_only_violations(_wf(_http(4.2, requestMethod="POST", url="http://h/")))
    assert any("from 'method', not 'requestMethod'" in p for p in problems)
    (p,) = read_only_violations(_wf(_http(4.6, method="GET", url="http://h/")))
    assert "v4.6 is not a version this check knows" in p


def test_builder_data_references_are_the_only_accepted_expression() -> None:
    """The check accepts exactly what ``core._data_expr`` writes, for both workflow shapes (a
    step workflow's trigger body, a batch workflow's split item), and no other root."""
    roots = ["$json.body", "$json"]
    for root in roots:
        for path in ["url", "headerParameters.parameters[0].value", 'we"ird\\key']:
            node = _http(4.2, method="GET", url=_data_expr(root, path))
            assert read_only_violations(_wf(node)) == [], (root, path)
    other = _data_expr("$('Trigger').first().json.body.steps[\"3\"]", "url")
    assert read_only_violations(_wf(_http(4.2, method="GET", url=other)))


CREDS = {
    t: CredentialRef(id="c", name=t)
    for t in ("smtp", "gmailOAuth2", "slackApi", "googleCalendarOAuth2Api", "httpHeaderAuth")
}


@pytest.mark.parametrize(
    "policy",
    [
        Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"}),
        Policy(providers={"calendar": "google.calendar", "mail": "gmail", "chat": "slack"}),
    ],
)
@pytest.mark.parametrize(
    "intent",
    ["schedule_meeting", "find_meeting_time", "purchase_item", "watch_visa_slots"],
)
def test_the_registry_ops_are_classified_as_the_registry_says(
    registry: Registry, policy: Policy, intent: str
) -> None:
    """Every op the repository's registry binds: reads pass, writes are refused (on the JSON)."""
    plan = make_plan(make_intent(intent), [], registry, policy)
    assert isinstance(plan, Plan)
    h = plan_hash(plan)
    seen = 0
    for s in plan.graph:
        op = registry.op(s.uses, s.call)
        if op.gate or (s.mode == "durable" and op.safety == "write"):
            continue
        wf = build_step_workflow(plan, h, s.step, registry, credentials=CREDS).workflow
        problems = read_only_violations(wf, query=declared_query(op))
        assert (problems == []) == (op.safety == "read"), (s.uses, s.call, problems)
        seen += 1
    assert seen
