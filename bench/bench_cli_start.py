"""Benchmark: how long a ``countersign`` verb takes from the shell (issue 28 §5).

Each sample is one fresh process of the installed console script (``.venv/bin/countersign``),
timed from ``fork`` to exit (wall), with its CPU (user + sys, from ``RUSAGE_CHILDREN``):

- ``verify FILE`` — what a CI pipeline calls per plan (aim ≤ 200 ms wall);
- ``verify --contract FILE`` — the same through typer and the Signer's models;
- ``--help`` — every verb listed;
- ``keys list`` — a verb that needs the Signer (pydantic) but nothing of the service stack;
- ``python -c pass`` — the interpreter's own start (the floor; the same on both sides).

``--before REV`` also runs the code of git revision REV (a temporary clone put first on
``PYTHONPATH``, so ``countersign.*`` comes from it; same interpreter, same packages), interleaved
with the current tree round by round so both see the same machine.

Run: ``.venv/bin/python bench/bench_cli_start.py [--n 20] [--before 45e82f7] [--verbs 'verify FILE']``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("countersign")
EXAMPLE = ROOT / "usecases" / "meeting" / "fixtures" / "default.intent.json"


def _env(home: Path, pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("COUNTERSIGN_")}
    env["COUNTERSIGN_HOME"] = str(home)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, cpu ms) of one run of the console script; it must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", "pass"] if args == ["(python -c pass)"] else [str(SCRIPT), *args]
    r = subprocess.run(cmd, capture_output=True, env=env, check=False)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{args}: exit {r.returncode}: {r.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def clone(rev: str, into: Path) -> str:
    """A clone of ``rev``; the PYTHONPATH that makes its components the ``countersign`` package."""
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", rev], check=True)
    return os.pathsep.join(str(p) for p in sorted((into / "components").iterdir()) if p.is_dir())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--before", default=None, help="git revision to compare with")
    ap.add_argument(
        "--verbs", default=None, help="only these, comma-separated (e.g. 'verify FILE')"
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        plan = Path(tmp) / "signed.json"
        made = subprocess.run(
            [str(SCRIPT), "plan", "--intent", str(EXAMPLE)],
            capture_output=True,
            env=_env(home, None),
            check=True,
        )
        plan.write_bytes(made.stdout)
        sides = {"now": _env(home, None)}
        if a.before:
            sides[a.before] = _env(home, clone(a.before, Path(tmp) / "before"))
        verbs = {
            "verify FILE": ["verify", str(plan)],
            "verify --contract FILE": ["verify", "--contract", str(plan)],
            "--help": ["--help"],
            "keys list": ["keys", "list"],
            "(python -c pass)": ["(python -c pass)"],  # the interpreter's own start, the floor
        }
        if a.verbs:
            verbs = {k: v for k, v in verbs.items() if k in a.verbs.split(",")}
        samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for side, env in sides.items():  # warm the file cache and .pyc files
            for args in verbs.values():
                if side != "now" and args[:2] == ["verify", "--contract"]:
                    continue
                once(args, env)
        for _ in range(a.n):
            for name, args in verbs.items():
                for side, env in sides.items():
                    if side != "now" and ("--contract" in args or args[0].startswith("(")):
                        continue  # the old verify had no --contract; the floor is one row
                    samples.setdefault((name, side), []).append(once(args, env))
        load = os.getloadavg()
        print(f"machine: {machine()}; n={a.n}; load average {load[0]:.1f} at the end")
        print("| verb | code | wall median ms | wall p95 ms | CPU median ms |")
        print("| --- | --- | ---: | ---: | ---: |")
        for (name, side), runs in samples.items():
            wall_med, wall_p95 = summary([w for w, _ in runs])
            cpu_med, _ = summary([c for _, c in runs])
            print(f"| `{name}` | {side} | {wall_med:.0f} | {wall_p95:.0f} | {cpu_med:.0f} |")


if __name__ == "__main__":
    main()
