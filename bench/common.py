"""Shared helpers for the benchmarks (timing, percentiles, machine line)."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from datetime import UTC, datetime


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]


def summary(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), pct(samples, 0.95)


def machine() -> str:
    model = "unknown"
    try:
        for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=False
        ).stdout.splitlines():
            if line.startswith("Model name"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores, {model}; python {platform.python_version()}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
