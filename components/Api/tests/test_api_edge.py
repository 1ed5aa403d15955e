"""The HTTP server's edge over raw sockets (Api SPEC, the edge; ``countersign.api.server``).

The server here is configured by ``server.server_config`` — the one ``countersign api`` (which
``countersign up`` starts) runs — over the whole app on the real stack, with a 1 s read deadline.
Every ambiguous framing is answered 400 ``http_framing`` and the connection is closed (RFC 9112
§6.1: behind a proxy that frames it the other way, the rest would be a smuggled request); a
request that stalls — in its headers, in its body, or never starting — is answered 408
``request_timeout`` and closed. The control: a well-framed request is answered and its
connection stays open, so "closed" below is the server's decision, not the test's.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from countersign.api.testing import ALICE, ApiHarness, harness
from countersign.n8n import N8nHandle
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

READ_TIMEOUT_S = 1.0
BODY = b'{"text": "hello"}'


@pytest.fixture
def edge(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
) -> Iterator[ApiHarness]:
    with harness(
        n8n,
        db,
        registry,
        keyring,
        radicale,
        smtp_server,
        api_smtp_credential,
        read_timeout_s=READ_TIMEOUT_S,
    ) as h:
        yield h


def _exchange(h: ApiHarness, data: bytes, *, wait_s: float = 4.0) -> tuple[bytes, bool, float]:
    """Send ``data``; read until the server closes or ``wait_s`` passes: (bytes, closed, s)."""
    url = urlsplit(h.base)
    with socket.create_connection((url.hostname, url.port)) as s:
        s.settimeout(0.2)
        s.sendall(data)
        got, start = b"", time.monotonic()
        while time.monotonic() - start < wait_s:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return got, True, time.monotonic() - start
            got += chunk
        return got, False, time.monotonic() - start


def _request(h: ApiHarness, head: str, body: bytes = BODY) -> bytes:
    auth = f"Authorization: Bearer {h.keys[ALICE]}\r\n"
    first, _, rest = head.partition("\r\n")
    return f"{first}\r\nHost: 127.0.0.1\r\n{auth}{rest}".encode() + body


def _problem(raw: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


CHUNKED = b"11\r\n" + BODY + b"\r\n0\r\n\r\n"

#: (name, head lines after the request line, body): every one is ambiguous or malformed framing
SMUGGLING = [
    ("CL and TE", "Content-Length: 17\r\nTransfer-Encoding: chunked\r\n\r\n", CHUNKED),
    ("TE before CL", "Transfer-Encoding: chunked\r\nContent-Length: 17\r\n\r\n", CHUNKED),
    ("TE odd case", "tRaNsFeR-eNcOdInG: ChUnKeD\r\ncontent-LENGTH: 17\r\n\r\n", CHUNKED),
    ("TE padded", "Transfer-Encoding: \t chunked \t\r\nContent-Length: 17\r\n\r\n", CHUNKED),
    ("TE folded", "Transfer-Encoding:\r\n chunked\r\nContent-Length: 17\r\n\r\n", CHUNKED),
    ("TE chunked, identity", "Transfer-Encoding: chunked, identity\r\n\r\n", CHUNKED),
    ("TE identity", "Transfer-Encoding: identity\r\nContent-Length: 17\r\n\r\n", BODY),
    ("TE twice", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", CHUNKED),
    ("TE gzip, chunked", "Transfer-Encoding: gzip, chunked\r\n\r\n", CHUNKED),
    ("TE space before colon", "Transfer-Encoding : chunked\r\n\r\n", CHUNKED),
    ("TE with a NUL", "Transfer-Encoding: chunked\x00\r\n\r\n", CHUNKED),
    ("CL twice, different", "Content-Length: 17\r\nContent-Length: 18\r\n\r\n", BODY),
    ("CL list, different", "Content-Length: 17, 18\r\n\r\n", BODY),
    ("CL signed", "Content-Length: +17\r\n\r\n", BODY),
    ("CL hex", "Content-Length: 0x11\r\n\r\n", BODY),
    ("CL space before colon", "Content-Length : 17\r\n\r\n", BODY),
]


@pytest.mark.parametrize(("name", "headers", "body"), SMUGGLING, ids=[s[0] for s in SMUGGLING])
def test_ambiguous_framing_is_refused_and_the_connection_closed(
    edge: ApiHarness, name: str, headers: str, body: bytes
) -> None:
    # a second request pipelined behind the body: it must never be answered
    smuggled = _request(edge, "GET /v1/me HTTP/1.1\r\n\r\n", b"")
    raw, closed, _ = _exchange(
        edge, _request(edge, f"POST /v1/intents HTTP/1.1\r\n{headers}", body) + smuggled
    )
    assert closed, f"{name}: the connection was kept open"
    status, doc = _problem(raw)
    assert status == 400 and doc["code"] == "http_framing", (name, raw[:300])
    assert raw.count(b"HTTP/1.1 ") == 1, f"{name}: the smuggled request was answered"


def test_transfer_encoding_in_http_1_0_is_refused_and_closed(edge: ApiHarness) -> None:
    head = "POST /v1/intents HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw, closed, _ = _exchange(edge, _request(edge, head, CHUNKED))
    assert closed and _problem(raw)[0] == 400


def test_well_framed_requests_are_answered_and_kept_alive(edge: ApiHarness) -> None:
    """The control: chunked alone and Content-Length alone both work, twice on one connection."""
    chunked = _request(
        edge,
        "POST /v1/intents HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        CHUNKED,
    )
    sized = _request(
        edge,
        f"POST /v1/intents HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n",
    )
    raw, closed, _ = _exchange(edge, chunked + sized, wait_s=3.0)
    assert not closed
    # no Intake is configured for chat text here: a 422 problem from the app, twice
    assert raw.count(b"HTTP/1.1 ") == 2 and b"400 Bad Request" not in raw, raw[:400]


STALLS = [
    ("body never finished", "POST /v1/intents HTTP/1.1\r\nContent-Length: 170\r\n\r\n", BODY),
    (
        "chunked body never ended",
        "POST /v1/intents HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"11\r\n" + BODY + b"\r\n",
    ),
    ("headers never finished", "POST /v1/intents HTTP/1.1\r\nContent-Length: 17\r\n", b""),
    ("only the request line", "GET /v1/me HTTP/1.1\r\n", b""),
]


@pytest.mark.parametrize(("name", "head", "body"), STALLS, ids=[s[0] for s in STALLS])
def test_a_stalled_request_is_timed_out_and_closed(
    edge: ApiHarness, name: str, head: str, body: bytes
) -> None:
    data = _request(edge, head, body) if "\r\n\r\n" in head else head.encode()
    raw, closed, took = _exchange(edge, data, wait_s=READ_TIMEOUT_S + 5)
    assert closed, f"{name}: still open after {took:.1f} s"
    assert READ_TIMEOUT_S * 0.9 <= took <= READ_TIMEOUT_S + 2, took
    status, doc = _problem(raw)
    assert status == 408 and doc["code"] == "request_timeout", raw[:300]


def test_a_trickling_body_is_cut_at_the_deadline(edge: ApiHarness) -> None:
    """One byte every 0.3 s never finishes 17 bytes inside 1 s: the deadline is for the whole
    request, not per read."""
    url = urlsplit(edge.base)
    with socket.create_connection((url.hostname, url.port)) as s:
        s.sendall(
            _request(edge, f"POST /v1/intents HTTP/1.1\r\nContent-Length: {len(BODY)}\r\n\r\n", b"")
        )
        start = time.monotonic()
        for byte in BODY:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.3)
        s.settimeout(3)
        raw = b""
        with_close = False
        while True:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                with_close = True
                break
            raw += chunk
    assert with_close and b"408 Request Timeout" in raw
    assert time.monotonic() - start < len(BODY) * 0.3 + 3
