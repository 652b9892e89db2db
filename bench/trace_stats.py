"""Trace statistics benchmark: speed against a bare JSON parse, and peak memory, as cold processes.

Two parts, results printed as one JSON line:

* **shipped**: ``kvbudget trace stats <every shipped trace> --json`` (tests/data/traces: WEKA,
  Mooncake, TraceLab, Azure, OpenTelemetry; 20 files, about 44,700 steps), formats detected as a
  user would. Target: median under 3 s (issue 4).
* **large_mooncake**: a synthetic Mooncake-style JSONL trace (plain rows: ``timestamp``,
  ``input_length``, ``output_length``, ``hash_ids`` chained from a few shared system prompts, one id
  per 512 tokens), written to a temporary directory with a fixed seed (``--mb``, 200 MB by default).
* **large_weka**: about the same number of bytes of WEKA documents, made by replicating the shipped
  WEKA traces (tests/data/traces/weka_kv_cache_tester) under new file names and document ids, each
  copy a session of its own (requests carry up to a few thousand chained 64-token block ids).

Each large trace is measured in fresh interpreters: (a) a bare pass that ``json.loads`` the same
bytes (every line of the JSONL, every WEKA document whole), (b) ``trace_stats(read_records(files))``.
Reported: each one's time, the speed ratio (bare time / stats time: 1.0 means as fast as the parse
alone; issue 10 goal 0.6) and each one's peak RSS (``resource.getrusage``; issue 10: under 200 MiB
for 1 GB of any format).

``--smoke`` (scripts/check) runs one round on a 5 MB trace and fails only on a gross regression
(the shipped traces over 3x the target, peak RSS of the stats pass over the bound); the full run
enforces the shipped-trace target and the memory bound and reports the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 3.0
RSS_BOUND_MIB = 200
TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
SUFFIXES = (".json", ".jsonl", ".csv")

BARE = """
import json, resource, sys, time
start = time.perf_counter()
rows = 0
for name in sys.argv[1:]:
    with open(name, encoding="utf-8") as f:
        if name.endswith(".jsonl"):
            for line in f:
                if line.strip():
                    json.loads(line)
                    rows += 1
        else:
            json.loads(f.read())
            rows += 1
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": elapsed, "rows": rows, "peak_kib": peak}))
"""

STATS = """
import json, resource, sys, time
from kvbudget.workload.stats import trace_stats
from kvbudget.workload.traces import read_records
start = time.perf_counter()
bad = []
stats = trace_stats(read_records(sys.argv[1:], bad_rows=bad), len(bad))
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": elapsed, "steps": stats.steps, "peak_kib": peak, "stats": stats.to_json()}))
"""


def trace_files() -> list[str]:
    return sorted(str(p) for p in TRACES.rglob("*") if p.suffix in SUFFIXES)


def cold_run(files: list[str]) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kvbudget", "trace", "stats", *files, "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    result: dict[str, object] = json.loads(done.stdout)
    return elapsed, result


def write_mooncake(path: Path, size_bytes: int, seed: int = 10) -> int:
    """A Mooncake-style JSONL trace of about ``size_bytes``: rows share one of 8 chained system-prompt
    prefixes, then have ids of their own; timestamps in ms, increasing. Returns the number of rows."""
    rng = random.Random(seed)
    prefixes = [list(range(k * 64, k * 64 + rng.randint(2, 40))) for k in range(8)]
    next_id = 8 * 64
    written = rows = 0
    stamp = 0
    with path.open("w", encoding="utf-8") as f:
        while written < size_bytes:
            shared = prefixes[rng.randrange(8)]
            own = rng.randint(1, 60)
            ids = shared + list(range(next_id, next_id + own))
            next_id += own
            prompt = (len(ids) - 1) * 512 + rng.randint(1, 512)
            line = json.dumps(
                {"timestamp": stamp, "input_length": prompt, "output_length": rng.randint(1, 2000), "hash_ids": ids}
            )
            f.write(line + "\n")
            written += len(line) + 1
            rows += 1
            stamp += rng.randint(0, 50)
    return rows


def write_weka(folder: Path, size_bytes: int) -> list[Path]:
    """Copies of the shipped WEKA traces (each under its own file name and document ``id``, so each is
    a session of its own) until they hold about ``size_bytes``. Returns the files written."""
    originals = sorted((TRACES / "weka_kv_cache_tester").glob("trace_*.json"))
    texts = [(p.stem, p.read_text(encoding="utf-8")) for p in originals]
    files: list[Path] = []
    written = 0
    while written < size_bytes:
        for stem, text in texts:
            copy = f"{stem}_{len(files):06d}"
            path = folder / f"{copy}.json"
            body = text.replace(f'"id":"{stem}"', f'"id":"{copy}"', 1)
            path.write_text(body, encoding="utf-8")
            files.append(path)
            written += len(body.encode())
            if written >= size_bytes:
                break
    return files


def measure(script: str, paths: list[Path]) -> dict[str, object]:
    command = [sys.executable, "-c", script, *map(str, paths)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def large(fmt: str, mb: float, rounds: int) -> dict[str, object]:
    """The bare parse and the statistics of ``mb`` megabytes of one format, side by side."""
    with tempfile.TemporaryDirectory(prefix="kvbudget-bench-") as tmp:
        if fmt == "mooncake":
            paths = [Path(tmp) / "mooncake_large.jsonl"]
            rows = write_mooncake(paths[0], int(mb * 1_000_000))
        else:
            paths = write_weka(Path(tmp), int(mb * 1_000_000))
            rows = len(paths)
        size = sum(p.stat().st_size for p in paths)
        measure(BARE, paths)  # warm the OS file cache for both
        bare: list[dict[str, object]] = []
        stats: list[dict[str, object]] = []
        for _ in range(rounds):  # alternated, so a busy spell on the shared machine hits both alike
            bare.append(measure(BARE, paths))
            stats.append(measure(STATS, paths))
    bare_s = statistics.median(float(str(r["s"])) for r in bare)
    stats_s = statistics.median(float(str(r["s"])) for r in stats)
    bare_peak = max(int(str(r["peak_kib"])) for r in bare) / 1024
    stats_peak = max(int(str(r["peak_kib"])) for r in stats) / 1024
    return {
        "format": fmt,
        "bytes": size,
        "files": len(paths),
        "rows": rows,
        "steps": stats[0]["steps"],
        "bare_json_s": round(bare_s, 3),
        "stats_s": round(stats_s, 3),
        "speed_vs_bare_json": round(bare_s / stats_s, 3),
        "bare_json_peak_rss_mib": round(bare_peak, 1),
        "stats_peak_rss_mib": round(stats_peak, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="one round, 5 MB, lenient bounds (CI)")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--mb", type=float, default=0.0, help="size of the synthetic trace (200 MB; smoke 5 MB)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.smoke else 5)
    files = trace_files()
    _, result = cold_run(files)  # warm the OS file cache; every measured run is still a fresh interpreter
    times = sorted(cold_run(files)[0] for _ in range(rounds))
    median = statistics.median(times)
    bound = TARGET_S * 3 if args.smoke else TARGET_S
    mb = args.mb or (5.0 if args.smoke else 200.0)
    large_rounds = 1 if args.smoke else max(1, min(rounds, 3))
    big = {fmt: large(fmt, mb, large_rounds) for fmt in ("mooncake", "weka")}
    print(
        json.dumps(
            {
                "benchmark": "trace_stats",
                "shipped": {
                    "command": "kvbudget trace stats <shipped traces> --json",
                    "files": len(files),
                    "bytes": sum(Path(f).stat().st_size for f in files),
                    "steps": result["steps"],
                    "sessions": result["sessions"],
                    "bad_rows": result["bad_rows"],
                    "rounds": rounds,
                    "median_s": round(median, 4),
                    "min_s": round(times[0], 4),
                    "max_s": round(times[-1], 4),
                    "target_s": TARGET_S,
                },
                "large_mooncake": big["mooncake"],
                "large_weka": big["weka"],
            }
        )
    )
    if not isinstance(result["steps"], int) or result["steps"] == 0:
        print("FAIL: no steps read from the shipped traces", file=sys.stderr)
        return 1
    if median > bound:
        print(f"FAIL: median {median:.3f} s is over {bound:.3f} s", file=sys.stderr)
        return 1
    for fmt, figures in big.items():
        peak = figures["stats_peak_rss_mib"]
        if isinstance(peak, float) and peak > RSS_BOUND_MIB:
            print(f"FAIL: trace stats of {fmt} peaked at {peak:.1f} MiB, over {RSS_BOUND_MIB} MiB", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
