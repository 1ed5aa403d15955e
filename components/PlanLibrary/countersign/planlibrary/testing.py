"""Test seam for the PlanLibrary: ``FakeEmbeddings``, an OpenAI-compatible ``/v1/embeddings``
server on loopback (litellm really calls it) that records what it was sent and answers
deterministic vectors: each word hashed into one of ``dim`` buckets, so texts that share words
are near (retrieval through it behaves like a crude bag-of-words model)."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeEmbeddings", "bag_of_words"]


def bag_of_words(text: str, dim: int) -> list[float]:
    """The fake model's vector of ``text`` (not normalized; a word-less text gets bucket 0)."""
    vec = [0.0] * dim
    for word in text.lower().split() or [""]:
        vec[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dim] += 1.0
    return vec


class FakeEmbeddings:
    """An OpenAI-compatible ``POST /v1/embeddings`` answering ``dim``-long vectors."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {
                        "path": self.path,
                        "body": body,
                        "authorization": self.headers.get("Authorization"),
                    }
                )
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else list(texts or [])
                reply = json.dumps(
                    {
                        "object": "list",
                        "model": body.get("model", "test"),
                        "data": [
                            {
                                "object": "embedding",
                                "index": i,
                                "embedding": bag_of_words(str(t), outer.dim),
                            }
                            for i, t in enumerate(texts)
                        ],
                        "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
