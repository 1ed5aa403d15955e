"""Is this n8n workflow read-only? Decided from the JSON itself, by node type AND ``typeVersion``.

Invariant §3.2 (preview never writes). The registry's ``safety: read`` flag is a claim; this
module checks what n8n will actually do with the generated nodes. It is an allow-list: a node
passes only if its ``(type, typeVersion)`` is listed here and its parameters are read-only under
the rules of that version; every other node — an unknown type, an unknown version, a connector
operation not listed — is a violation. Pure: no I/O.

Where the rules come from (n8n 2.41.1, ``n8n-nodes-base/dist/nodes/``):

- ``HttpRequest/HttpRequest.node.js`` maps typeVersion 1 → ``V1/HttpRequestV1``, 2 →
  ``V2/HttpRequestV2``, and 3, 4, 4.1, 4.2, 4.3, 4.4, 4.5 → ``V3/HttpRequestV3``.
- V1 and V2 read the method with ``getNodeParameter('requestMethod')`` (property ``requestMethod``,
  default ``GET``); a ``method`` key on those versions is not a parameter at all.
- V3 reads it with ``getNodeParameter('method')`` (``V3/Description.js``: property ``method``,
  default ``GET``, options DELETE GET HEAD OPTIONS PATCH POST PUT + the WebDAV set); V3 sends a
  body with GET too (only HEAD/OPTIONS/TRACE are ``methodsWithoutBody``).
- The parameter and option names below are the ``properties`` of each version's description;
  body-carrying ones are listed separately and make a node a write whatever the method.

Expressions: n8n evaluates a string that starts with ``=`` or contains ``{{``. The only expression
allowed in a read node is the builder's own fixed data reference
(``={{ $json.body.data["<path>"] }}``, or ``={{ $json.data["<path>"] }}`` behind a batch
workflow's Split Out; see ``core._data_expr``), and only where it cannot choose
the method, a header name or a body: the URL and the *value* of a query or header parameter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from countersign.kernel import DocumentError, loads_strict

from .queries import SafeQuery, query_violations, split_query

__all__ = [
    "HTTP_REQUEST",
    "HTTP_REQUEST_VERSIONS",
    "READ_METHODS",
    "read_only_violations",
]

HTTP_REQUEST: Final = "n8n-nodes-base.httpRequest"
WEBHOOK: Final = "n8n-nodes-base.webhook"
MERGE: Final = "n8n-nodes-base.merge"
WAIT: Final = "n8n-nodes-base.wait"
CODE: Final = "n8n-nodes-base.code"
SET: Final = "n8n-nodes-base.set"
NOOP: Final = "n8n-nodes-base.noOp"
RESPOND: Final = "n8n-nodes-base.respondToWebhook"
SPLIT_OUT: Final = "n8n-nodes-base.splitOut"

#: Safe methods (RFC 9110 §9.2.1), spelled exactly as n8n's option values.
READ_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
#: Headers many servers honour to turn a GET into another method.
_OVERRIDE_NAMES: Final = frozenset(
    {"x-http-method-override", "x-http-method", "x-method-override", "_method"}
)


@dataclass(frozen=True)
class _HttpVersion:
    """How one family of HTTP Request versions reads its method, and what else it accepts."""

    family: str
    method_param: str
    params: frozenset[str]  # parameters that do not carry a body
    body_params: frozenset[str]  # parameters that send a body (a write whatever the method)
    options: frozenset[str]  # read-only entries of ``options``
    query_ui: tuple[str, str]  # (fixedCollection, list key) of query parameters
    header_ui: tuple[str, str]
    json_headers: str
    json_query: str


_LEGACY = _HttpVersion(
    family="V1/V2",
    method_param="requestMethod",
    params=frozenset(
        {
            "authentication",
            "nodeCredentialType",
            "genericAuthType",
            "requestMethod",
            "url",
            "allowUnauthorizedCerts",
            "responseFormat",
            "dataPropertyName",
            "jsonParameters",
            "options",
            "headerParametersJson",
            "headerParametersUi",
            "queryParametersJson",
            "queryParametersUi",
            "infoMessage",
        }
    ),
    body_params=frozenset(
        {"sendBinaryData", "binaryPropertyName", "bodyParametersJson", "bodyParametersUi"}
    ),
    # not listed: bodyContentType, bodyContentCustomMimeType (body), proxy
    options=frozenset(
        {
            "batchInterval",
            "batchSize",
            "fullResponse",
            "followAllRedirects",
            "followRedirect",
            "ignoreResponseCode",
            "splitIntoItems",
            "timeout",
            "useQueryString",
        }
    ),
    query_ui=("queryParametersUi", "parameter"),
    header_ui=("headerParametersUi", "parameter"),
    json_headers="headerParametersJson",
    json_query="queryParametersJson",
)
_V3 = _HttpVersion(
    family="V3",
    method_param="method",
    params=frozenset(
        {
            "curlImport",
            "method",
            "url",
            "authentication",
            "nodeCredentialType",
            "googleApiWarning",
            "genericAuthType",
            "provideSslCertificates",
            "provideSslCertificatesNotice",
            "sslCertificate",
            "sendQuery",
            "specifyQuery",
            "queryParameters",
            "jsonQuery",
            "sendHeaders",
            "specifyHeaders",
            "headerParameters",
            "jsonHeaders",
            "options",
            "infoMessage",
        }
    ),
    body_params=frozenset(
        {
            "sendBody",
            "contentType",
            "specifyBody",
            "bodyParameters",
            "jsonBody",
            "body",
            "inputDataFieldName",
            "rawContentType",
        }
    ),
    # not listed: pagination (adds body parameters, follows URLs from responses), proxy,
    # sendCredentialsOnCrossOriginRedirect, webdavMethods (MKCOL, MOVE, COPY)
    options=frozenset(
        {
            "batching",
            "allowUnauthorizedCerts",
            "queryParameterArrays",
            "lowercaseHeaders",
            "redirect",
            "response",
            "timeout",
        }
    ),
    query_ui=("queryParameters", "parameters"),
    header_ui=("headerParameters", "parameters"),
    json_headers="jsonHeaders",
    json_query="jsonQuery",
)

#: The allow-list: HTTP Request typeVersion → how that version reads its method.
HTTP_REQUEST_VERSIONS: Final[Mapping[float, _HttpVersion]] = {
    1: _LEGACY,
    2: _LEGACY,
    3: _V3,
    4: _V3,
    4.1: _V3,
    4.2: _V3,
    4.3: _V3,
    4.4: _V3,
    4.5: _V3,
}

#: Nodes that neither send nor call out: (type) → versions known in n8n 2.41.1.
_PURE: Final[Mapping[str, frozenset[float]]] = {
    WEBHOOK: frozenset({1, 1.1, 2, 2.1}),  # the trigger: receives, never sends
    SET: frozenset({1, 2, 3, 3.1, 3.2, 3.3, 3.4, 3.5}),
    NOOP: frozenset({1}),
    # answers the caller of the webhook (the orchestrator), nobody else
    RESPOND: frozenset({1, 1.1, 1.2, 1.3, 1.4, 1.5}),
    # one item per array entry (Transform/SplitOut, v1 only): moves data, calls nothing
    SPLIT_OUT: frozenset({1}),
}
#: Merge: v2+ modes that only combine items (v3's combineBySql runs alasql, which can load URLs).
_MERGE_VERSIONS: Final = frozenset({2, 2.1, 3, 3.1, 3.2})
_MERGE_MODES: Final = frozenset({"append", "combine", "chooseBranch"})
_CODE_VERSIONS: Final = frozenset({1, 2})
#: Names that reach I/O from a Code node's sandbox (n8n's task runner exposes
#: ``helpers.httpRequest`` / ``helpers.request`` to the code: @n8n/task-runner runner-types.js) or
#: escape it. A name list, not a proof: it catches an edit that calls out, not an obfuscated one.
_CODE_DENIED: Final = re.compile(
    r"\b(helpers|httpRequest|request|fetch|require|import|process|globalThis|global|self|this|"
    r"constructor|prototype|__proto__|eval|Function|Reflect|Proxy|XMLHttpRequest|WebSocket|"
    r"\$http|\$getWorkflowStaticData)\b|\\[ux]|\[\s*['\"`]"
)

#: Connector nodes: (type, typeVersion) → (default resource, read (resource, operation) pairs).
#: From each node's description in n8n 2.41.1 (Google/Calendar, Google/Gmail, Slack).
_GCAL_READS = (
    "event",
    frozenset({("calendar", "availability"), ("event", "get"), ("event", "getAll")}),
)
_GMAIL_READS = (
    "message",
    frozenset((r, o) for r in ("message", "label", "draft", "thread") for o in ("get", "getAll")),
)
_SLACK_READS = (
    "message",
    frozenset(
        {
            ("channel", "get"),
            ("channel", "getAll"),
            ("channel", "history"),
            ("channel", "replies"),
            ("user", "info"),
            ("user", "getAll"),
        }
    ),
)
_CONNECTOR_READS: Final[Mapping[tuple[str, float], tuple[str, frozenset[tuple[str, str]]]]] = {
    **{("n8n-nodes-base.googleCalendar", v): _GCAL_READS for v in (1, 1.1, 1.2, 1.3)},
    **{("n8n-nodes-base.gmail", v): _GMAIL_READS for v in (2, 2.1, 2.2)},
    **{("n8n-nodes-base.slack", v): _SLACK_READS for v in (2, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7)},
}
#: Nodes that send by nature, named so the message says why.
_SENDERS: Final = frozenset(
    {"n8n-nodes-base.emailSend", "n8n-nodes-base.executeCommand", "n8n-nodes-base.ssh"}
)

#: Exactly what ``core._data_expr`` writes, for either root (step / batch workflow).
_DATA_REF: Final = re.compile(
    r'=\{\{ (?:\$json\.body|\$json)\.data\["(?:[^"\\{}]|\\[^{}])*"\] \}\}'
)


def _is_expression(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith("=") or "{{" in value)


def _is_data_ref(value: Any) -> bool:
    return isinstance(value, str) and _DATA_REF.fullmatch(value) is not None


def _version(node: Mapping[str, Any]) -> float | None:
    v = node.get("typeVersion")
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _empty(value: Any) -> bool:
    return value is None or value is False or value in ("", {}, [])


def _walk(value: Any, path: str) -> list[tuple[str, Any]]:
    """Every leaf of a parameter tree with its dotted path (``a.b[0].c``), in document order.
    Iterative, so a deep tree is walked rather than crashing the check."""
    leaves: list[tuple[str, Any]] = []
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, Mapping):
            stack.extend((f"{at}.{k}" if at else str(k), c) for k, c in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{at}[{i}]", c) for i, c in reversed(list(enumerate(v))))
        else:
            leaves.append((at, v))
    return leaves


def _literal(value: Any, allowed: frozenset[str]) -> bool:
    """``value`` is one of ``allowed`` (a string: any other JSON value is a violation, never a
    ``TypeError`` from hashing an object or a list)."""
    return isinstance(value, str) and value in allowed


def _keys(value: Mapping[Any, Any]) -> list[Any]:
    """A mapping's keys in a stable order whatever their types."""
    return sorted(value, key=lambda k: (type(k).__name__, str(k)))


@dataclass(frozen=True)
class _Node:
    """A node whose shape the check can read: its name, type, numeric version and parameters."""

    name: str
    type: str
    version: float
    params: Mapping[str, Any]


def _http_violations(node: _Node, query: SafeQuery | None = None) -> list[str]:
    name, version = node.name, node.version
    spec = HTTP_REQUEST_VERSIONS.get(version)
    label = f"{name}: HTTP Request v{version:g}"
    if spec is None:
        known = ", ".join(f"{v:g}" for v in sorted(HTTP_REQUEST_VERSIONS))
        return [f"{label} is not a version this check knows (known: {known}); treated as a write"]
    # a query the op declares (``queries``): its exact shape, then the rest as any read's
    p, claimed = split_query(node.params, query if spec is _V3 else None)
    found = query_violations(label, node.params, query) if claimed and query else []
    return [
        *found,
        *_method_violations(label, spec, p),
        *_param_violations(label, spec, p),
        *_expression_violations(label, spec, p),
        *_override_violations(label, spec, p),
    ]


def _method_violations(label: str, spec: _HttpVersion, p: Mapping[str, Any]) -> list[str]:
    """The parameter this version reads must be a literal safe method (absent = GET)."""
    out: list[str] = []
    method = p.get(spec.method_param, "GET")
    if _is_expression(method):
        out.append(
            f"{label} takes its method from {spec.method_param!r}; expected a literal "
            f"GET/HEAD/OPTIONS, found the expression {method!r}"
        )
    elif not _literal(method, READ_METHODS):
        out.append(
            f"{label} takes its method from {spec.method_param!r}; expected GET/HEAD/OPTIONS, "
            f"found {method!r:.80}"
        )
    # A method under the other version's name is not read by n8n, but it says what was meant.
    for other in ("method", "requestMethod"):
        if other != spec.method_param and other in p:
            out.append(
                f"{label} takes its method from {spec.method_param!r}, not {other!r} "
                f"(found {other}={p[other]!r})"
            )
    return out


def _param_violations(label: str, spec: _HttpVersion, p: Mapping[str, Any]) -> list[str]:
    """No body; only parameters and options known to be read-only."""
    out: list[str] = []
    for key in _keys(p):
        value = p[key]
        if key in spec.body_params:
            if not _empty(value):
                out.append(f"{label} sends a body ({key}={value!r:.80})")
        elif key not in spec.params and key not in ("method", "requestMethod"):
            out.append(f"{label}: parameter {key!r} is not known to be read-only")
    options = p.get("options", {})
    if not isinstance(options, Mapping):
        out.append(f"{label}: options must be an object, found {options!r}")
        options = {}
    for key in _keys(options):
        if key not in spec.options:
            out.append(f"{label}: option {key!r} is not known to be read-only")
    return out


def _expression_violations(label: str, spec: _HttpVersion, p: Mapping[str, Any]) -> list[str]:
    """Expressions: only the builder's data reference, only in the URL or a parameter's value."""
    value_paths = {
        re.compile(rf"{re.escape(ui)}\.{re.escape(lst)}\[\d+\]\.value")
        for ui, lst in (spec.query_ui, spec.header_ui)
    }
    out: list[str] = []
    for path, leaf in _walk(p, ""):
        if not _is_expression(leaf):
            continue
        allowed = path == "url" or any(r.fullmatch(path) for r in value_paths)
        if not (allowed and _is_data_ref(leaf)):
            out.append(f"{label}: {path} is an n8n expression ({leaf!r}); expected a literal")
    return out


def _override_violations(label: str, spec: _HttpVersion, p: Mapping[str, Any]) -> list[str]:
    """Headers (and query names) that override the method."""
    out: list[str] = []
    names: list[Any] = []
    for ui, lst in (spec.header_ui, spec.query_ui):
        block = p.get(ui)
        entries = block.get(lst) if isinstance(block, Mapping) else None
        if isinstance(entries, list):
            names += [e.get("name") for e in entries if isinstance(e, Mapping)]
    for key in (spec.json_headers, spec.json_query):
        raw = p.get(key)
        if _empty(raw) or _is_expression(raw):
            continue
        try:
            # strict: a header named twice has two readings (n8n keeps the last)
            parsed = loads_strict(raw, what=key) if isinstance(raw, str) else raw
        except DocumentError as e:
            out.append(f"{label}: {key} is not strict JSON ({e.message})")
            continue
        if isinstance(parsed, Mapping):
            names += list(parsed)
        else:
            out.append(f"{label}: {key} must be a JSON object, found {raw!r}")
    for n in names:
        if isinstance(n, str) and n.strip().lower() in _OVERRIDE_NAMES:
            out.append(f"{label}: {n!r} overrides the method")
    return out


def _code_violations(node: _Node) -> list[str]:
    name, version, p = node.name, node.version, node.params
    label = f"{name}: Code v{version:g}"
    if version not in _CODE_VERSIONS:
        return [f"{label} is not a version this check knows; treated as a write"]
    out: list[str] = []
    language = p.get("language", "javaScript")
    if not _literal(language, frozenset({"javaScript"})):
        out.append(f"{label}: language {language!r}; only JavaScript is checked")
    for key in _keys(p):
        if key not in ("mode", "language", "jsCode"):
            out.append(f"{label}: parameter {key!r} is not known to be read-only")
    code = p.get("jsCode", "")
    if not isinstance(code, str) or code.startswith("="):
        out.append(f"{label}: jsCode must be literal source, found {code!r:.60}")
    else:
        found = sorted({m.group(0) for m in _CODE_DENIED.finditer(code)})
        if found:
            out.append(
                f"{label}: the code uses {', '.join(repr(f) for f in found)}, which can reach "
                "the network or escape the sandbox; expected a pure computation"
            )
    return out


def _node_violations(node: Mapping[str, Any], query: SafeQuery | None) -> list[str]:
    checked = _checked_node(node)
    if isinstance(checked, list):
        return checked
    if checked.type == HTTP_REQUEST:
        return _http_violations(checked, query)
    return _BY_TYPE.get(checked.type, _connector_violations)(checked)


def _checked_node(node: Mapping[str, Any]) -> _Node | list[str]:
    """The node with a string type, an object of parameters and a numeric typeVersion, or why
    it has not."""
    t, name = node.get("type"), node.get("name")
    if not isinstance(t, str):
        return [f"{name!r:.60}: node type must be a string, found {t!r:.60}"]
    version = _version(node)
    p = node.get("parameters", {})
    if not isinstance(p, Mapping):
        return [f"{name}: parameters must be an object"]
    if version is None:
        return [f"{name}: node {t} has no numeric typeVersion ({node.get('typeVersion')!r})"]
    return _Node(str(name), t, version, p)


def _pure_violations(node: _Node) -> list[str]:
    if node.version in _PURE[node.type]:
        return []
    return [f"{node.name}: node {node.type} v{node.version:g} is not a version this check knows"]


def _merge_violations(node: _Node) -> list[str]:
    mode = node.params.get("mode", "append")
    if node.version in _MERGE_VERSIONS and _literal(mode, _MERGE_MODES):
        return []
    return [
        f"{node.name}: node {node.type} v{node.version:g} mode {mode!r:.60} is not known to be "
        "read-only"
    ]


def _wait_violations(node: _Node) -> list[str]:
    return [f"{node.name}: node {node.type} is a gate; a preview never waits on one"]


def _sender_violations(node: _Node) -> list[str]:
    return [f"{node.name}: node {node.type} sends; it never runs in a preview"]


def _connector_violations(node: _Node) -> list[str]:
    """Any other node: a connector whose (resource, operation) is a listed read, or a
    violation."""
    reads = _CONNECTOR_READS.get((node.type, node.version))
    resource, operation = node.params.get("resource"), node.params.get("operation")
    if reads is not None and isinstance(operation, str) and not _is_expression(operation):
        default_resource, pairs = reads
        res = default_resource if resource is None else resource
        if isinstance(res, str) and (res, operation) in pairs:
            return []
    return [
        f"{node.name}: node {node.type} v{node.version:g} resource {resource!r} operation "
        f"{operation!r} is not known to be read-only"
    ]


#: the check of each node type this module knows; any other type is checked as a connector
_BY_TYPE: Final[Mapping[str, Callable[[_Node], list[str]]]] = {
    **dict.fromkeys(_PURE, _pure_violations),
    **dict.fromkeys(_SENDERS, _sender_violations),
    HTTP_REQUEST: _http_violations,
    CODE: _code_violations,
    MERGE: _merge_violations,
    WAIT: _wait_violations,
}


def read_only_violations(
    workflow: Mapping[str, Any], *, query: SafeQuery | None = None
) -> list[str]:
    """Why a workflow could change something (empty when every node only reads).

    Checked on the generated JSON itself, independently of the registry flag (module docstring):
    each node's ``(type, typeVersion)`` must be on the allow-list; HTTP Request must use a literal
    GET/HEAD/OPTIONS in the parameter its version reads, send no body, use only read-only options,
    and carry no expression except the builder's data reference in the URL or a parameter value;
    Code must be JavaScript that names no I/O; connector nodes must use a listed read operation.
    Anything else — Wait nodes, mail nodes, unknown types and versions — is a violation.

    ``query``: the safe method with a body that the op this workflow runs declares
    (``queries.declared_query`` of the registry op, passed by the caller — a workflow cannot
    declare itself); an HTTP Request v3+ node may send exactly that query (``queries``). None:
    no REPORT, PROPFIND or body passes.
    """
    problems: list[str] = []
    nodes = workflow.get("nodes", [])
    if not isinstance(nodes, list):
        return ["workflow: nodes must be a list"]
    for node in nodes:
        if not isinstance(node, Mapping):
            problems.append(f"workflow: node {node!r:.60} is not an object")
            continue
        problems.extend(_node_violations(node, query))
    return problems
