"""Start-up benchmark: ``kvbudget cost <catalog model> --json`` as a cold process, side by side with
what bounds it from below. Rounds alternate between the runs, so a busy spell on a shared machine
hits every one alike. Results are printed as one JSON line.

Runs, each a fresh interpreter:

* ``bare``: ``python -c pass`` (and ``bare_no_site``: ``python -S -c pass``, for reference);
* ``needed_imports``: ``python -c "import <every kvbudget module the answer loads>"``, found by a probe
  that runs the answer and lists ``sys.modules``: the floor lazy imports could reach;
* ``module``: ``python -m kvbudget cost llama-3.1-70b --json``;
* ``script``: the same through the ``kvbudget`` console script pip generates, where installed beside
  the interpreter;
* ``module_compiling``: ``module`` with no bytecode cache (``PYTHONDONTWRITEBYTECODE``), every
  kvbudget module compiled from source at every start, for reference.

Every other run has a bytecode cache, as an installed package does (pip compiles at install): a
temporary ``PYTHONPYCACHEPREFIX``, written by the warm-up run.

Reported: each run's median, and the ratio of each to ``bare`` (issue 10 goal 3: the answer within
4.6x a bare interpreter). Targets: median under 0.3 s, and no torch, transformers, gguf,
huggingface_hub or numpy import on that path. ``--smoke`` (scripts/check) runs fewer rounds and fails
only on a heavy import or a gross regression (3x the target), since CI machines vary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.3
GOAL_RATIO = 4.6  # issue 10 goal 3: 0.6x the fastest peer calculator
HEAVY = ("torch", "transformers", "gguf", "huggingface_hub", "numpy")
COMMAND = ["cost", "llama-3.1-70b", "--json"]

PROBE = (
    "import sys, io, json, contextlib\n"
    "from kvbudget.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    f"    main({COMMAND!r})\n"
    "print(json.dumps({'heavy': [m for m in %r if m in sys.modules],\n"
    "                  'kvbudget': [m for m in sys.modules if m == 'kvbudget' or m.startswith('kvbudget.')]}))\n"
) % (HEAVY,)


def probe() -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    found: dict[str, list[str]] = json.loads(out)
    return found


def runs(modules: list[str]) -> dict[str, list[str]]:
    """The command lines measured side by side (the console script only where it is installed)."""
    commands = {
        "bare": [sys.executable, "-c", "pass"],
        "bare_no_site": [sys.executable, "-S", "-c", "pass"],
        "needed_imports": [sys.executable, "-c", "import " + ", ".join(modules)],
        "module": [sys.executable, "-m", "kvbudget", *COMMAND],
    }
    script = Path(sys.executable).with_name("kvbudget.exe" if os.name == "nt" else "kvbudget")
    if script.is_file():
        commands["script"] = [str(script), *COMMAND]
    return commands


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def environments(cache: str) -> tuple[dict[str, str], dict[str, str]]:
    """(with a bytecode cache in ``cache``, without any)."""
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = cache
    compiling = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    compiling["PYTHONDONTWRITEBYTECODE"] = "1"
    return cached, compiling


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="few rounds, lenient bound (CI)")
    parser.add_argument("--rounds", type=int, default=0)
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.smoke else 20)
    found = probe()
    commands = runs(found["kvbudget"])
    commands["module_compiling"] = commands["module"]
    with tempfile.TemporaryDirectory(prefix="kvbudget-pyc-") as cache:
        cached, compiling = environments(cache)
        env = {name: compiling if name == "module_compiling" else cached for name in commands}
        for name, command in commands.items():  # warm the OS file cache and write the bytecode cache
            timed(command, env[name])
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(rounds):  # alternated: a busy spell on a shared machine hits every run alike
            for name, command in commands.items():
                times[name].append(timed(command, env[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    bare = medians["bare"]
    median = medians["module"]
    bound = TARGET_S * 3 if args.smoke else TARGET_S
    print(
        json.dumps(
            {
                "benchmark": "startup",
                "command": "kvbudget " + " ".join(COMMAND),
                "rounds": rounds,
                "median_s": round(median, 4),
                "min_s": round(min(times["module"]), 4),
                "max_s": round(max(times["module"]), 4),
                "target_s": TARGET_S,
                "runs_median_s": {name: round(m, 4) for name, m in medians.items()},
                "ratio_to_bare": {name: round(m / bare, 2) for name, m in medians.items()},
                "goal_ratio_to_bare": GOAL_RATIO,
                "bytecode_cache": True,
                "kvbudget_modules": len(found["kvbudget"]),
                "heavy_imports": found["heavy"],
            }
        )
    )
    if found["heavy"]:
        print(f"FAIL: the cost path imports {', '.join(found['heavy'])}", file=sys.stderr)
        return 1
    if median > bound:
        print(f"FAIL: median {median:.3f} s is over {bound:.3f} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
