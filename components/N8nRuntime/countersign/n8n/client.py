"""Async client for n8n's REST API (public API with an API key) and its webhooks.

Only connection errors and 5xx answers are retried (exponential backoff with jitter, bounded); a
404 "not registered" from a webhook right after activation is retried too (n8n 2.x registers
webhooks asynchronously, and a 404 creates no execution, so retrying it is safe). Everything else
becomes an ``N8nApiError`` with the status and a body excerpt.

A write (``call_webhook(..., write=True)``) is re-sent only when it provably never reached n8n: a
refused or timed-out connect, or that 404. After anything else — a read timeout, a dropped
connection, a 5xx — the request may have run, so the error is raised at once, marked ``sent``
(the write protocol in ``countersign.steps`` then makes the key ``unknown``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from .errors import N8nApiError, N8nUnavailableError

__all__ = ["N8nClient"]


def _iso_ms(when: datetime) -> str:
    """An instant as n8n's API takes it: UTC, milliseconds (rounded down), ``Z``."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class N8nClient:
    """One keep-alive connection pool to one n8n."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        attempts: int = 5,
        backoff_s: float = 0.1,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._attempts = attempts
        self._backoff = backoff_s
        # the key goes with the public API's requests only: a webhook or resume call's headers
        # are the trigger's output, which n8n stores in the execution's data (the key would rest
        # in every write's record)
        self._key = {"X-N8N-API-KEY": api_key}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> N8nClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _headers_for(self, url: str, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """The key is added to the public API's requests only (``__init__``)."""
        return {**(headers or {}), **self._key} if url.startswith("/api/") else headers

    async def _request(
        self,
        operation: str,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        retry_404: bool = False,
        idempotent: bool = True,
    ) -> Any:
        delay = self._backoff
        last: Exception | None = None
        sent = False  # did any attempt possibly reach n8n? (a write may then have happened)
        # a webhook can answer 404 for ~1 s after activation (asynchronous registration)
        attempts = max(self._attempts, 8) if retry_404 else self._attempts
        headers = self._headers_for(url, headers)
        for attempt in range(attempts):
            try:
                r = await self._http.request(method, url, json=json, params=params, headers=headers)
            except httpx.TransportError as e:
                reached = not isinstance(e, httpx.ConnectError | httpx.ConnectTimeout)
                sent = sent or reached
                last = N8nUnavailableError(f"n8n {operation}: {type(e).__name__}: {e}", sent=sent)
                if reached and not idempotent:
                    raise last from e
            else:
                if r.status_code < 400:
                    if not r.content:
                        return None
                    try:
                        return r.json()
                    except ValueError:
                        return r.text
                err = N8nApiError(operation, r.status_code, r.text)
                if r.status_code < 500 and not (retry_404 and r.status_code == 404):
                    raise err
                sent = sent or r.status_code != 404
                last = err
                if r.status_code != 404 and not idempotent:
                    raise err
            if attempt + 1 < attempts:
                await asyncio.sleep(delay * (1 + random.random()))  # noqa: S311 - jitter only
                delay = min(delay * 2, 1.0)
        if last is None:  # attempts < 1
            raise N8nUnavailableError(f"n8n {operation}: no attempt was made", sent=False)
        if isinstance(last, N8nUnavailableError):
            raise N8nUnavailableError(last.message, sent=sent)
        raise last

    # ---- workflows ------------------------------------------------------------------------------
    async def create_workflow(self, workflow: Mapping[str, Any]) -> dict[str, Any]:
        """Create a workflow (inactive); returns n8n's record (with ``id``)."""
        out: dict[str, Any] = await self._request(
            "create workflow", "POST", "/api/v1/workflows", json=workflow
        )
        return out

    async def get_workflow(self, workflow_id: str) -> dict[str, Any]:
        """One workflow."""
        out: dict[str, Any] = await self._request(
            f"get workflow {workflow_id}", "GET", f"/api/v1/workflows/{workflow_id}"
        )
        return out

    async def list_workflows(
        self, *, name: str | None = None, active: bool | None = None
    ) -> list[dict[str, Any]]:
        """Workflows, optionally filtered by exact name / active state (all pages)."""
        params: dict[str, Any] = {"limit": 250}
        if name is not None:
            params["name"] = name
        if active is not None:
            params["active"] = str(active).lower()
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            if cursor:
                params["cursor"] = cursor
            page = await self._request("list workflows", "GET", "/api/v1/workflows", params=params)
            out.extend(page.get("data", []))
            cursor = page.get("nextCursor")
            if not cursor:
                return out

    async def update_workflow(
        self, workflow_id: str, workflow: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Replace a workflow's definition."""
        out: dict[str, Any] = await self._request(
            f"update workflow {workflow_id}",
            "PUT",
            f"/api/v1/workflows/{workflow_id}",
            json=workflow,
        )
        return out

    async def activate(self, workflow_id: str) -> dict[str, Any]:
        """Activate (registers its webhooks)."""
        out: dict[str, Any] = await self._request(
            f"activate workflow {workflow_id}", "POST", f"/api/v1/workflows/{workflow_id}/activate"
        )
        return out

    async def deactivate(self, workflow_id: str) -> dict[str, Any]:
        """Deactivate."""
        out: dict[str, Any] = await self._request(
            f"deactivate workflow {workflow_id}",
            "POST",
            f"/api/v1/workflows/{workflow_id}/deactivate",
        )
        return out

    async def delete_workflow(self, workflow_id: str) -> None:
        """Delete."""
        await self._request(
            f"delete workflow {workflow_id}", "DELETE", f"/api/v1/workflows/{workflow_id}"
        )

    # ---- executions -----------------------------------------------------------------------------
    async def list_executions(
        self,
        *,
        workflow_id: str | None = None,
        status: str | None = None,
        limit: int = 100,
        include_data: bool = False,
    ) -> list[dict[str, Any]]:
        """Recent executions (one page), with their run data when asked."""
        params: dict[str, Any] = {"limit": limit}
        if include_data:
            params["includeData"] = "true"
        if workflow_id is not None:
            params["workflowId"] = workflow_id
        if status is not None:
            params["status"] = status
        page = await self._request("list executions", "GET", "/api/v1/executions", params=params)
        data: list[dict[str, Any]] = page.get("data", [])
        return data

    async def execution_pages(
        self, *, include_data: bool = False, page_size: int = 100, max_pages: int = 100
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Every execution, newest first, a page at a time (following ``nextCursor``)."""
        cursor: str | None = None
        for _ in range(max_pages):
            params: dict[str, Any] = {"limit": page_size}
            if include_data:
                params["includeData"] = "true"
            if cursor:
                params["cursor"] = cursor
            page = await self._request(
                "list executions", "GET", "/api/v1/executions", params=params
            )
            yield list(page.get("data", []))
            cursor = page.get("nextCursor")
            if not cursor:
                return

    async def executions_page(
        self,
        *,
        cursor: str | None = None,
        workflow_id: str | None = None,
        status: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        include_data: bool = False,
        limit: int = 250,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of executions, highest id (newest) first, and the cursor of the next page
        (``None`` after the last). n8n 2.x filters by start time, both bounds inclusive
        (``startedAfter`` / ``startedBefore``, sent to the millisecond, rounded down), and hides
        running executions unless ``status="running"``. With ``include_data`` the data of large
        executions comes too (``ignoreDataSizeLimit``) instead of being left out."""
        params: dict[str, Any] = {"limit": limit}
        if include_data:
            params.update(includeData="true", ignoreDataSizeLimit="true")
        for name, value in (("workflowId", workflow_id), ("status", status), ("cursor", cursor)):
            if value:
                params[name] = value
        for name, when in (("startedAfter", started_after), ("startedBefore", started_before)):
            if when is not None:
                params[name] = _iso_ms(when)
        page = await self._request("list executions", "GET", "/api/v1/executions", params=params)
        data: list[dict[str, Any]] = list(page.get("data", []))
        return data, page.get("nextCursor") or None

    async def get_execution(
        self, execution_id: str | int, *, include_data: bool = True
    ) -> dict[str, Any]:
        """One execution, with its run data when asked."""
        out: dict[str, Any] = await self._request(
            f"get execution {execution_id}",
            "GET",
            f"/api/v1/executions/{execution_id}",
            params={"includeData": str(include_data).lower()},
        )
        return out

    async def delete_execution(self, execution_id: str | int) -> None:
        """Delete an execution."""
        await self._request(
            f"delete execution {execution_id}", "DELETE", f"/api/v1/executions/{execution_id}"
        )

    # ---- credentials ----------------------------------------------------------------------------
    async def create_credential(
        self, name: str, type_: str, data: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Create a credential (e.g. ``smtp``, ``httpHeaderAuth``); returns ``{id, name, type}``."""
        out: dict[str, Any] = await self._request(
            f"create credential {name!r}",
            "POST",
            "/api/v1/credentials",
            json={"name": name, "type": type_, "data": dict(data)},
        )
        return out

    # ---- webhooks -------------------------------------------------------------------------------
    async def call_webhook(
        self,
        path: str,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
        test: bool = False,
        write: bool = False,
    ) -> Any:
        """POST to a production webhook (``/webhook/<path>``); the workflow's response.

        ``write``: the workflow has an external effect, so the request is re-sent only while it
        provably never reached n8n (module docstring)."""
        prefix = "webhook-test" if test else "webhook"
        return await self._request(
            f"webhook {path}",
            "POST",
            f"/{prefix}/{path}",
            json=body,
            headers=headers,
            retry_404=True,
            idempotent=not write,
        )

    async def resume(self, resume_url: str, body: Any = None) -> Any:
        """Resume a waiting execution through its resume URL (only after a verified approval)."""
        return await self._request("resume execution", "POST", resume_url, json=body or {})
