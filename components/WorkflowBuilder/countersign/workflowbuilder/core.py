"""WorkflowBuilder: signed plan + registry -> n8n workflow JSON. Pure and deterministic.

Two shapes (WorkflowBuilder LLD §1):

- **Step workflows** (what runs): one small workflow per interactive step — a Webhook trigger and
  the step's node. n8n runs the branches of one execution one after another, so the orchestrator
  gets real concurrency by calling independent steps' webhooks at the same time.
- **Batch workflows** (a preview's reads of one op that are ready together): the trigger, a Split
  Out node over ``body.items`` and the same op node. n8n's HTTP Request node sends the requests of
  all its input items at once, so N reads of one op cost one execution instead of N concurrent
  ones (LLD §1: on 2 cores n8n's per-execution work is the preview's bottleneck).

Injection rule (WorkflowBuilder SPEC, "no injection"): a node's parameters are the registry's
constants plus, for every data-bound parameter, a fixed expression written here that reads a JSON
value from the trigger body (``={{ $json.body.data["url"] }}``). Values a person supplied travel
only as JSON data; no person text is ever placed where n8n evaluates expressions.

Same op binding ⇒ same JSON (ids are uuid5 of the binding's content key; no clock, no
randomness).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Final

from countersign.binding import (
    BINARY,
    BoundNode,
    idempotency_header_path,
    resolve_step,
    set_path,
)
from countersign.kernel import BindingError, Plan, PlanStep
from countersign.registry import Registry

from .queries import SafeQuery, declared_query
from .readonly import CODE, HTTP_REQUEST, READ_METHODS, SPLIT_OUT, WEBHOOK, read_only_violations

__all__ = [
    "HTTP_REQUEST",
    "READ_METHODS",
    "CredentialRef",
    "StepWorkflow",
    "build_batch_workflow",
    "build_step_workflow",
    "build_workflow_for_step",
    "read_only_violations",
]

_NS: Final = uuid.UUID("5b0b3c0e-6f7e-4a53-9c61-636f756e7465")  # "counte…": a fixed namespace
TRIGGER: Final = "Trigger"
#: the Code node that turns the files among the trigger's data into the item's binary properties
FILES: Final = "Files"
SPLIT: Final = "Split items"
#: the trigger-body field a batch workflow splits into one item per step
BATCH_FIELD: Final = "body.items"


@dataclass(frozen=True)
class CredentialRef:
    """An n8n credential the generated nodes use (id and name in n8n)."""

    id: str
    name: str


@dataclass(frozen=True)
class StepWorkflow:
    """One step's workflow and the webhook path that runs it."""

    step: int
    path: str
    workflow: dict[str, Any]


def _uid(*parts: object) -> str:
    return str(uuid.uuid5(_NS, "/".join(str(p) for p in parts)))


def _data_expr(root: str, path: str) -> str:
    # The key is registry-authored; json.dumps gives a valid JS string literal for it.
    if "{{" in path or "}}" in path:
        raise BindingError(f"parameter path {path!r} may not contain '{{{{' or '}}}}'")
    return "={{ " + root + ".data[" + json.dumps(path) + "] }}"


def _node_parameters(bound: BoundNode, root: str) -> dict[str, Any]:
    params: dict[str, Any] = json.loads(json.dumps(bound.parameters))
    _refuse_expressions(params, bound)
    for path in sorted(bound.data):
        if not path.startswith(BINARY):  # a file, not a parameter: the Files node carries it
            set_path(params, path, _data_expr(root, path))
    key_path = idempotency_header_path(bound)
    if key_path is not None:  # the key travels as data like any other value
        set_path(params, key_path, _data_expr(root, key_path))
    if bound.node_type == HTTP_REQUEST:
        # The orchestrator reads status codes itself (e.g. 412 from If-None-Match on a replay).
        set_path(params, "options.response.response.fullResponse", True)
        set_path(params, "options.response.response.neverError", True)
    return params


def _refuse_expressions(value: Any, bound: BoundNode) -> None:
    """Registry constants are trusted, but an expression among them would hide I/O: refuse it
    unless it is a Code node's source (which n8n does not evaluate as an expression)."""
    if isinstance(value, str) and (value.startswith("=") or "{{" in value):
        raise BindingError(
            f"step {bound.step}: registry constant for {bound.uses}.{bound.call} looks like an "
            "n8n expression; constants must be literals"
        )
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "jsCode" and bound.node_type == CODE:
                continue
            _refuse_expressions(v, bound)
    elif isinstance(value, list):
        for v in value:
            _refuse_expressions(v, bound)


def _credentials(bound: BoundNode, creds: Mapping[str, CredentialRef]) -> dict[str, Any] | None:
    if bound.credential is None:
        return None
    ref = creds.get(bound.credential)
    if ref is None:
        raise BindingError(
            f"step {bound.step} ({bound.uses}.{bound.call}) needs an n8n credential of type "
            f"{bound.credential!r}, which is not configured"
        )
    return {bound.credential: {"id": ref.id, "name": ref.name}}


def _trigger(
    content: str, role: str, path: str, creds: Mapping[str, CredentialRef]
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "httpMethod": "POST",
        "path": path,
        "responseMode": "lastNode",
        "responseData": "firstEntryJson",
        "options": {},
    }
    node: dict[str, Any] = {
        "id": _uid(content, role, "trigger"),
        "name": TRIGGER,
        "type": WEBHOOK,
        "typeVersion": 2,
        "position": [0, 0],
        "webhookId": _uid(content, role, "webhook"),
        "parameters": params,
    }
    auth = creds.get("httpHeaderAuth")
    if auth is not None:
        params["authentication"] = "headerAuth"
        node["credentials"] = {"httpHeaderAuth": {"id": auth.id, "name": auth.name}}
    return node


#: what n8n keeps of a workflow's executions (WorkflowBuilder SPEC "What n8n keeps"; the names
#: and values are n8n 2.41.1's ``IWorkflowSettings``, read in ``execution-lifecycle/
#: to-save-settings.js``): a read keeps nothing — its execution is deleted when it ends, so the
#: calendars and mailboxes it read (other people's event titles among them) never rest in n8n;
#: a write keeps its whole record, success or error, because the reconciler reads it by the
#: idempotency key until the write is settled (then N8nRuntime's ``prune_settled`` deletes it);
#: node by node (``saveExecutionProgress``) only when its provider cannot be asked afterwards
#: (the registry's ``probe``): n8n stores the webhook's body when it creates the execution, so a
#: killed n8n's record still carries the key, and a probed write's provider settles what the
#: record cannot (ExecuteOrchestrator SPEC 10); the mail, unprobed, keeps progress so an n8n
#: killed after its node answered still holds that answer
KEEP_NONE: Final = "none"
KEEP_ALL: Final = "all"
#: names the rule above in every workflow's content key (change it with the rule)
_RECORDS: Final = "reads-none/writes-all/progress-unless-probed"


def _settings(keep: str, *, progress: bool = False) -> dict[str, Any]:
    return {
        "executionOrder": "v1",
        "saveDataSuccessExecution": keep,
        "saveDataErrorExecution": keep,
        "saveManualExecutions": False,
        # saved after each node too (before the op's node sends: ~40 % of n8n's part of a write,
        # BENCHMARKS §2), only for a record that must hold the node's answer itself (above)
        "saveExecutionProgress": keep == KEEP_ALL and progress,
        "callerPolicy": "workflowsFromSameOwner",
    }


def _keep(bound: BoundNode, nodes: list[dict[str, Any]], query: SafeQuery | None = None) -> str:
    """``none`` when the op is a read by the registry AND the workflow provably cannot write
    (``read_only_violations`` finds nothing: the allow-list that guards a preview), else ``all``
    — a doubt keeps the record."""
    probe = {"nodes": nodes, "connections": {}}
    # a query the op declares (a CalDAV REPORT, ``queries``) is a read here as in a preview
    if bound.safety == "read" and not read_only_violations(probe, query=query):
        return KEEP_NONE
    return KEEP_ALL


def build_step_workflow(
    plan: Plan,
    plan_hash: str,
    step: int,
    registry: Registry,
    *,
    credentials: Mapping[str, CredentialRef] | None = None,
) -> StepWorkflow:
    """The workflow that runs one non-gate step (interactive, or a durable read for a preview).

    The trigger body is ``{"data": {<param path>: value}, "args": {...}}`` (from
    ``countersign.binding.render_data`` and the resolved args); the step node's output is the
    webhook's response.

    Raises:
        BindingError: the step is a gate or a durable write, or does not bind (names the step).
    """
    s = plan.step(step)
    if s.gate_id is not None:
        raise BindingError(f"step {step} is gate {s.gate_id}; gates are not run as n8n steps")
    if s.mode != "interactive" and not s.dry_run:
        raise BindingError(f"step {step} is a durable write; it runs on Temporal, not n8n")
    return build_workflow_for_step(plan, plan_hash, s, registry, credentials=credentials)


def build_workflow_for_step(
    plan: Plan,
    plan_hash: str,
    s: PlanStep,
    registry: Registry,
    *,
    credentials: Mapping[str, CredentialRef] | None = None,
) -> StepWorkflow:
    """The step workflow for any step object of this plan, including compensation steps an
    execute derives from the registry (they are not in the signed graph).

    Step workflows are **content-addressed**: everything that varies per plan travels in the
    trigger body, so the workflow depends only on the op's binding (node type, version, registry
    constants, credential). Its path and name carry a hash of that content; every plan that uses
    the op shares one deployed workflow (deployed once, no per-plan activation delay). The plan's
    id and hash reach n8n in each execution's input data.
    """
    del plan, plan_hash  # the workflow is the same for every plan (see above)
    creds = credentials or {}
    node_name, key, node = _op_node(s, registry, creds, root="$json.body")
    path = f"cs-op-{key}"
    nodes = [_trigger(key, "op", path, creds), node]
    chain = [TRIGGER, node_name]
    bound = resolve_step(s, registry)
    op = registry.op(s.uses, s.call)
    names = _file_names(bound)
    if names:  # Trigger → Files → op node: the files reach the op as binary properties
        nodes.insert(1, _files_node(key, names))
        chain.insert(1, FILES)
    workflow = {
        "name": f"countersign op {s.uses}.{s.call} [{key}]",
        "nodes": nodes,
        "connections": {
            a: {"main": [[{"node": b, "type": "main", "index": 0}]]} for a, b in pairwise(chain)
        },
        "settings": _settings(_keep(bound, nodes, declared_query(op)), progress=not op.probe),
    }
    return StepWorkflow(step=s.step, path=path, workflow=workflow)


def _file_names(bound: BoundNode) -> list[str]:
    """The binary properties the op's node reads (its ``binary.<name>`` data paths)."""
    names = sorted(p.removeprefix(BINARY) for p in bound.data if p.startswith(BINARY))
    for name in names:
        if not name.isidentifier() or not name.isascii():
            raise BindingError(f"{bound.uses}.{bound.call}: file name {name!r} is not a name")
    return names


#: literal JavaScript (no expression, no I/O): each item keeps its JSON and gets, for every named
#: file the trigger's data holds (``{fileName, mimeType, text}``; null: none), a binary property
#: of that name — base64 of the UTF-8 text, as n8n keeps binary data in an item
_FILES_JS: Final = """const names = %s;
return $input.all().map((item) => {
  const data = (item.json.body || {}).data || {};
  const binary = {};
  for (const name of names) {
    const file = data["%s" + name];
    if (file && typeof file.text === "string") {
      binary[name] = {
        data: Buffer.from(file.text, "utf8").toString("base64"),
        mimeType: String(file.mimeType),
        fileName: String(file.fileName),
      };
    }
  }
  return Object.keys(binary).length ? { json: item.json, binary } : { json: item.json };
});
"""


def _files_node(key: str, names: list[str]) -> dict[str, Any]:
    return {
        "id": _uid(key, "files"),
        "name": FILES,
        "type": CODE,
        "typeVersion": 2,
        "position": [150, 0],
        "parameters": {
            "mode": "runOnceForAllItems",
            "language": "javaScript",
            "jsCode": _FILES_JS % (json.dumps(names), BINARY),
        },
    }


def _op_node(
    s: PlanStep,
    registry: Registry,
    creds: Mapping[str, CredentialRef],
    *,
    root: str,
    batch: bool = False,
) -> tuple[str, str, dict[str, Any]]:
    """The op's node reading its data under ``root``, and the content key that names the
    workflow around it: ``(node name, key, node)``."""
    bound = resolve_step(s, registry)
    node: dict[str, Any] = {
        "type": bound.node_type,
        "typeVersion": bound.type_version,
        "parameters": _node_parameters(bound, root),
    }
    cred = _credentials(bound, creds)
    if cred is not None:
        node["credentials"] = cred
    node_name = f"{s.uses}.{s.call}"
    # the op's name is part of the content: two ops whose nodes happen to be identical (a DELETE
    # of a templated URL, say) would otherwise share a webhook path under two workflow names, and
    # n8n refuses to activate the second (409 "conflict with one of the webhooks")
    content: dict[str, Any] = {"op": node_name, **({"batch": True} if batch else {}), **node}
    # what n8n keeps is part of the content too: a workflow deployed under the old settings
    # (reads saved) is never reused — deploy keeps an existing workflow of the same name
    content["records"] = _RECORDS
    if registry.op(s.uses, s.call).probe:  # the op's records follow it (no progress saved)
        content["probe"] = True
    names = _file_names(bound)
    if names:  # the Files node is part of the workflow: a change to it is a new workflow
        content["files"] = _files_node("", names)["parameters"]
    key = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    return (
        node_name,
        key,
        {"id": _uid(key, "node"), "name": node_name, "position": [300, 0], **node},
    )


def build_batch_workflow(
    s: PlanStep,
    registry: Registry,
    *,
    credentials: Mapping[str, CredentialRef] | None = None,
) -> StepWorkflow:
    """The workflow that runs several read steps of one op in one n8n execution.

    Trigger body: ``{"items": [{"data": {...}, "args": {...}}, ...], "plan": {...}}``; a Split
    Out node makes one item per entry and the op's node reads each item's data
    (``={{ $json.data["url"] }}``, the same fixed reference as a step workflow's, one level up);
    the webhook answers with every output item, in the order of ``items``. Content-addressed like
    a step workflow (the op's binding, plus the word ``batch``), so all plans share it. ``s`` is
    any step of the op (its args do not enter the workflow). Only a preview uses it, and only
    after ``read_only_violations`` passed on it.
    """
    creds = credentials or {}
    if _file_names(resolve_step(s, registry)):
        raise BindingError(f"{s.uses}.{s.call} attaches files; a batch runs reads only")
    node_name, key, node = _op_node(s, registry, creds, root="$json", batch=True)
    path = f"cs-batch-{key}"
    trigger = _trigger(key, "batch", path, creds)
    trigger["parameters"]["responseData"] = "allEntries"
    split = {
        "id": _uid(key, "split"),
        "name": SPLIT,
        "type": SPLIT_OUT,
        "typeVersion": 1,
        "position": [150, 0],
        "parameters": {"fieldToSplitOut": BATCH_FIELD, "include": "noOtherFields", "options": {}},
    }
    workflow = {
        # not a prefix of the step workflow's name: n8n's name filter matches substrings
        "name": f"countersign batch {s.uses}.{s.call} [{key}]",
        "nodes": [trigger, split, node],
        "connections": {
            TRIGGER: {"main": [[{"node": SPLIT, "type": "main", "index": 0}]]},
            SPLIT: {"main": [[{"node": node_name, "type": "main", "index": 0}]]},
        },
        # a batch runs reads only (a preview checks it with read_only_violations first)
        "settings": _settings(KEEP_NONE),
    }
    return StepWorkflow(step=s.step, path=path, workflow=workflow)
