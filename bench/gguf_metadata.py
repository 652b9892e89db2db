"""GGUF metadata benchmark: the cache geometry of a GGUF carrying a real-size tokenizer, read by kvbudget's own
header reader (model/gguf_file.py) and by the gguf package's GGUFReader, each in a fresh process (seconds and
peak RSS). The file holds Qwen3-8B's KV geometry, 151,936 tokens, their scores and types, and 151,387 merges, as
a converted Qwen GGUF does, and no tensor data beyond one tiny tensor. Issue 9 measured 6.6 s and 540 MB for
the gguf package on such a file; the target is under 1 s and 100 MiB. ``--smoke`` (scripts/check) fails only
on a gross regression (3x). Results are one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_S = 1.0
TARGET_RSS_MIB = 100
TOKENS, MERGES = 151_936, 151_387
READ = {
    "kvbudget": "from kvbudget.model.sources import resolve; s = resolve(sys.argv[1]); assert s.layers",
    "gguf": "import gguf; r = gguf.GGUFReader(sys.argv[1]); assert r.fields",
}
PROBE = (
    "import resource, sys, time\n"
    "t = time.perf_counter()\n"
    "{read}\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
)


def build(path: Path) -> int:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name("qwen3-8b-geometry")
    w.add_block_count(36)
    w.add_context_length(40_960)
    w.add_embedding_length(4096)
    w.add_feed_forward_length(12_288)
    w.add_head_count(32)
    w.add_head_count_kv(8)
    w.add_key_length(128)
    w.add_value_length(128)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"token{i}" for i in range(TOKENS)])
    w.add_token_types([1] * TOKENS)
    w.add_token_merges([f"m{i} n{i}" for i in range(MERGES)])
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.stat().st_size


def measure(reader: str, path: Path) -> tuple[float, float]:
    code = PROBE.format(read=READ[reader])
    done = subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True)
    seconds, rss_kib = done.stdout.split()
    return float(seconds), int(rss_kib) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="lenient bounds (CI)")
    args = parser.parse_args()
    slack = 3 if args.smoke else 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qwen3-tokenizer.gguf"
        size = build(path)
        ours_s, ours_mib = measure("kvbudget", path)
        theirs_s, theirs_mib = measure("gguf", path)
    ok = ours_s <= TARGET_S * slack and ours_mib <= TARGET_RSS_MIB * slack
    print(
        json.dumps(
            {
                "benchmark": "gguf_metadata",
                "file_bytes": size,
                "tokens": TOKENS,
                "kvbudget_s": round(ours_s, 3),
                "kvbudget_peak_rss_mib": round(ours_mib, 1),
                "gguf_package_s": round(theirs_s, 3),
                "gguf_package_peak_rss_mib": round(theirs_mib, 1),
                "bound_s": TARGET_S * slack,
                "bound_rss_mib": TARGET_RSS_MIB * slack,
                "ok": ok,
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
