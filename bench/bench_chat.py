"""Benchmark: chat text → preview card on screen, timed in a real browser.

The whole stack as ``countersign up --detach`` starts it (embedded Postgres, n8n, Temporal, the
sandbox CalDAV and SMTP servers) in a throwaway data folder; Playwright drives Debian's chromium
headless. Each iteration types a complete meeting request into the chat page and measures, in
the page's own clock (``performance.now()``), from the form's submit to the card with the free
slots being in the DOM: Intake, plan, sign, store, the read-only preview on n8n (two CalDAV
reads and the overlap), the JSON over HTTP and the rendering. The server's own part of each
request (``POST /v1/intents``, from its access to the answer) is taken from the same run by
timing the fetch in the page, so the browser's share is the difference.

Run: ``.venv/bin/python bench/bench_chat.py [--n 30] [--out bench/results/chat.md]``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.api.testing import chromium
from countersign.kernel.process import free_port

TIMED = """
async (text) => {
  const log = document.getElementById("log");
  const before = log.querySelectorAll("section.card").length;
  let fetched = null;
  const realFetch = window.fetch;
  window.fetch = async (...args) => {
    const t = performance.now();
    const r = await realFetch(...args);
    if (String(args[0]).endsWith("/v1/intents")) fetched = performance.now() - t;
    return r;
  };
  const input = document.getElementById("text");
  input.value = text;
  const t0 = performance.now();
  const shown = new Promise((resolve) => {
    const check = () => {
      const cards = log.querySelectorAll("section.card");
      if (cards.length > before && cards[cards.length - 1].querySelector("input[type=radio]")) {
        obs.disconnect();
        resolve(performance.now() - t0);
      }
    };
    const obs = new MutationObserver(check);
    obs.observe(log, { childList: true, subtree: true });
  });
  document.getElementById("say").requestSubmit();
  const total = await shown;
  window.fetch = realFetch;
  return [total, fetched];
}
"""


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COUNTERSIGN_") and k != "DATABASE_URL"
    }
    if cache := os.environ.get("COUNTERSIGN_CACHE_DIR"):
        env["COUNTERSIGN_CACHE_DIR"] = cache
    return env | {"COUNTERSIGN_HOME": str(home), **extra}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("bench/results/chat.md"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cs-bench-chat-") as tmp:
        home = Path(tmp) / "home"
        port = free_port()
        env = _env(
            home,
            {
                "COUNTERSIGN_N8N_PORT": str(free_port()),
                "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
                "COUNTERSIGN_SANDBOX_PORTS": "free",
            },
        )
        cli = [sys.executable, "-m", "countersign.cli"]
        up = subprocess.run(
            [*cli, "up", "--detach", "--port", str(port)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=900,
        )
        try:
            if up.returncode != 0:
                raise SystemExit(f"countersign up failed:\n{up.stderr[-3000:]}")
            login = re.search(r"sign in \(once\)\s+(\S+)", up.stdout)
            assert login, up.stdout
            totals, fetches = [], []
            with chromium() as browser:
                page = browser.new_page()
                page.goto(login.group(1))
                page.wait_for_selector("#text")
                for i in range(args.n + 3):  # three warm-ups
                    text = (
                        "schedule a 30 minute meeting with Alice and Bob tomorrow afternoon "
                        f"called Bench {i}"
                    )
                    total, fetched = page.evaluate(TIMED, text)
                    if i >= 3:
                        totals.append(float(total))
                        fetches.append(float(fetched))
                    if i % 10 == 9:
                        page.reload()  # keep the DOM small: a person's page, not a thousand cards
                        page.wait_for_selector("#text")
        finally:
            subprocess.run([*cli, "down"], capture_output=True, env=env, check=False, timeout=300)
    t50, t95 = summary(totals)
    f50, f95 = summary(fetches)
    d = [t - f for t, f in zip(totals, fetches, strict=True)]
    d50, d95 = summary(d)
    report = (
        f"# Chat text → card on screen (browser-timed) — {machine()}\n\n"
        f"n = {args.n} (after 3 warm-ups), the stack from `countersign up`, headless chromium.\n\n"
        "| measure | p50 ms | p95 ms |\n|---|---:|---:|\n"
        f"| submit → card with slots in the DOM | {t50:.1f} | {t95:.1f} |\n"
        f"| of which `POST /v1/intents` (fetch, in the page) | {f50:.1f} | {f95:.1f} |\n"
        f"| of which the page (render, parse) | {d50:.1f} | {d95:.1f} |\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
