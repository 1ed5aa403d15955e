"""``read_only_violations`` never raises (invariant §3.2, GLOBAL_SPEC §13 row 2).

Whatever JSON value sits in any parameter the check inspects — of every node type and
``typeVersion`` on its allow-list — or in a node's ``type``, ``name``, ``typeVersion`` or
``parameters``, the answer is a list of violations (which the preview refuses and audits), never
an exception. A method, mode, language, resource or operation that is not a string is a
violation, not a ``TypeError`` from hashing an object or a list.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.workflowbuilder import HTTP_REQUEST, read_only_violations
from countersign.workflowbuilder.readonly import (
    _CODE_VERSIONS,
    _CONNECTOR_READS,
    _MERGE_VERSIONS,
    _PURE,
    CODE,
    HTTP_REQUEST_VERSIONS,
    MERGE,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
NOT_STRING = JSON.filter(lambda v: not isinstance(v, str))


def _http_params(version: float) -> list[str]:
    spec = HTTP_REQUEST_VERSIONS[version]
    return sorted(
        {*spec.params, *spec.body_params, "method", "requestMethod", spec.json_headers}
        | {spec.json_query, spec.query_ui[0], spec.header_ui[0]}
    )


#: (type, typeVersion, the parameters the check reads) for everything on the allow-list
TARGETS: list[tuple[str, float, list[str]]] = [
    *((HTTP_REQUEST, v, _http_params(v)) for v in HTTP_REQUEST_VERSIONS),
    *((CODE, v, ["language", "jsCode", "mode"]) for v in _CODE_VERSIONS),
    *((MERGE, v, ["mode"]) for v in _MERGE_VERSIONS),
    *((t, v, ["resource", "operation"]) for (t, v) in _CONNECTOR_READS),
    *((t, v, ["anything"]) for t, vs in _PURE.items() for v in vs),
]


@st.composite
def odd_nodes(draw: st.DrawFn) -> dict[str, Any]:
    t, version, names = draw(st.sampled_from(TARGETS))
    params = {n: draw(JSON) for n in draw(st.lists(st.sampled_from(names), min_size=1))}
    if t == HTTP_REQUEST and draw(st.booleans()):
        spec = HTTP_REQUEST_VERSIONS[version]
        ui, lst = draw(st.sampled_from([spec.query_ui, spec.header_ui]))
        params[ui] = {
            lst: draw(st.lists(st.dictionaries(st.sampled_from(["name", "value"]), JSON)))
        }
        params["options"] = draw(st.dictionaries(st.sampled_from(sorted(spec.options)), JSON))
    node: dict[str, Any] = {"name": draw(JSON), "type": t, "typeVersion": version}
    node["parameters"] = params
    for key in draw(st.lists(st.sampled_from(["type", "typeVersion", "parameters", "name"]))):
        node[key] = draw(JSON)
    return node


@settings(max_examples=600, deadline=None)
@given(node=odd_nodes())
def test_any_json_anywhere_in_a_node_is_a_list_never_an_exception(node: dict[str, Any]) -> None:
    out = read_only_violations({"nodes": [node]})
    assert isinstance(out, list)
    assert all(isinstance(v, str) for v in out)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(sorted(HTTP_REQUEST_VERSIONS)), method=NOT_STRING)
def test_a_method_that_is_not_a_string_is_a_violation(version: float, method: Any) -> None:
    param = HTTP_REQUEST_VERSIONS[version].method_param
    node = {"name": "read", "type": HTTP_REQUEST, "typeVersion": version}
    node["parameters"] = {param: method, "url": "http://h/x"}
    out = read_only_violations({"nodes": [node]})
    assert any(f"takes its method from {param!r}" in v for v in out), out


@pytest.mark.parametrize(
    ("node", "says"),
    [
        (
            {"type": HTTP_REQUEST, "typeVersion": 4.2, "parameters": {"method": {"GET": 1}}},
            "method",
        ),
        (
            {"type": HTTP_REQUEST, "typeVersion": 2, "parameters": {"requestMethod": ["GET"]}},
            "method",
        ),
        ({"type": MERGE, "typeVersion": 3, "parameters": {"mode": ["append"]}}, "mode"),
        ({"type": CODE, "typeVersion": 2, "parameters": {"language": {"a": 1}}}, "language"),
        ({"type": ["n8n-nodes-base.set"], "typeVersion": 1, "parameters": {}}, "type"),
        ({"type": {"t": 1}, "typeVersion": 1, "parameters": {}}, "type"),
        (
            {
                "type": HTTP_REQUEST,
                "typeVersion": 4.2,
                "parameters": {"jsonHeaders": '{"a":1,"a":2}'},
            },
            "jsonHeaders",
        ),
        (
            {"type": HTTP_REQUEST, "typeVersion": 4.2, "parameters": {"jsonQuery": "[" * 5000}},
            "jsonQuery",
        ),
    ],
)
def test_odd_types_are_named_violations(node: dict[str, Any], says: str) -> None:
    out = read_only_violations({"nodes": [{"name": "n", **node}]})
    assert out
    assert any(says in v for v in out), out


def test_a_deep_parameter_tree_is_walked_not_a_crash() -> None:
    deep: Any = "={{ 1 }}"
    for _ in range(5000):
        deep = {"x": deep}
    node = {"name": "n", "type": HTTP_REQUEST, "typeVersion": 4.2, "parameters": {"options": deep}}
    assert read_only_violations({"nodes": [node]})
