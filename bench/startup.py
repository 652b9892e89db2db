"""Start-up benchmark: ``kvbudget cost <catalog model> --json`` as a cold process.

Target: median under 0.3 s on the development machine (2 cores), with no torch, transformers,
gguf or huggingface_hub import on that path. ``--smoke`` (used by scripts/check) runs fewer rounds
and fails only on a heavy import or a gross regression (3x the target), since CI machines vary;
the full run enforces the target. Results are printed as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGET_S = 0.3
HEAVY = ("torch", "transformers", "gguf", "huggingface_hub", "numpy")
COMMAND = ["cost", "llama-3.1-70b", "--json"]

PROBE = (
    "import sys, io, contextlib\n"
    "from kvbudget.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    f"    main({COMMAND!r})\n"
    f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
)


def cold_run() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvbudget", *COMMAND], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_imports() -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    return [m for m in out.strip().split(",") if m]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="few rounds, lenient bound (CI)")
    parser.add_argument("--rounds", type=int, default=0)
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.smoke else 20)
    cold_run()  # warm the OS file cache; every measured run is still a fresh interpreter
    times = sorted(cold_run() for _ in range(rounds))
    heavy = heavy_imports()
    median = statistics.median(times)
    bound = TARGET_S * 3 if args.smoke else TARGET_S
    print(
        json.dumps(
            {
                "benchmark": "startup",
                "command": "kvbudget " + " ".join(COMMAND),
                "rounds": rounds,
                "median_s": round(median, 4),
                "min_s": round(times[0], 4),
                "max_s": round(times[-1], 4),
                "target_s": TARGET_S,
                "heavy_imports": heavy,
            }
        )
    )
    if heavy:
        print(f"FAIL: the cost path imports {', '.join(heavy)}", file=sys.stderr)
        return 1
    if median > bound:
        print(f"FAIL: median {median:.3f} s is over {bound:.3f} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
