"""What the fuzz matrix throws: hostile values for every kind of option or field, and hostile files for every
reader. Each kind's list is the class of mistake or attack, not one instance (tests/reliability/test_matrix.py
runs them; docs/reliability.md shows the matrix)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

LONG = "9" * 400
NUMBERS = [
    "9" * 40, LONG, "Infinity", "-inf", "nan", "1e400", "-0", "-1", "0", "1_000", "\u0663\u0662", "\uff13\uff12", " ",
    "", "0x10", "1e3", "3.5.1", "+5", "\u00a032", "32k\x00", "1" * 5000,
]  # fmt: skip
NAMES = [
    "-h", "--help", "x/..", "a--b/c", "~nouser/x", "a" * 5000, "a/" * 300, "\x00", "line\nbreak", "../../etc/passwd",
    "", " ", "org/name.git", "%s%n", "<script>alert(1)</script>", "\u202eevil",
]  # fmt: skip
CHOICES = ["nope", "", "-h", "a" * 5000, "\x00", "SI", "latent,expanded"]
RATES = [*NUMBERS, "5/fortnight", "1e9/s", "0/h", "-2/h", "50/", "/h", "1/0"]
SIZES = [*NUMBERS, "80XB", "80 GiBB", "1e30GB", "0GB", "-24GB", "9" * 40 + "TB", "1.5iB", "NaNGB"]
HOSTS = ["", "a" * 5000, "-h", "host.invalid", "999.999.999.999", "[::1", "\x00"]
PORTS = ["99999", "-1", "1e3", "\u0663", "", "http", "8731 8732", LONG]
ADDRESSES = ["", "-h", "a" * 5000, "\x00", "host:99999", "[::1", "http://host:80", "ray://", "host.invalid:9", " auto"]
URLS = ["", "-h", "ftp://x", "http://", "http://[::1", "a" * 5000, "file:///etc/passwd", "http://host.invalid:9/"]

# the kind of every value a command takes -> what the matrix gives it
VALUES: dict[str, list[str]] = {
    "tokens": NUMBERS,
    "prefix": NUMBERS,
    "count": NUMBERS,
    "running": NUMBERS,
    "layers": [*NUMBERS, "auto,all", "AUTO ", "none", "-2", "65537"],
    "split": [*NUMBERS, "3,1,", ",", "0,0", "-1,1", "1e3,1", "nan,1", "1," * 20, "3;1", "inf,1"],
    "gpus": NUMBERS,
    "sessions": NUMBERS,
    "index": NUMBERS,
    "jobs": [*NUMBERS, "99999"],
    "memory": SIZES,
    "positive": NUMBERS,
    "fraction": [*NUMBERS, "1.0000000001", "0.0"],
    "share": [*NUMBERS, "100%", "-5%", "5%%"],
    "seconds": [*NUMBERS, "10y", "1e9h", "0s"],
    "bandwidth": [*NUMBERS, "1e99", "3.35PB/s", "TB/s"],
    "per_second": RATES,
    "tolerance": [*NUMBERS, "1", "0.9999999999999999", "1e-400", "-0.0"],
    "startup": [*NUMBERS, "last ", "LAST", "first", "0", "-1"],
    "text": NAMES,
    "model": NAMES,
    "engine": NAMES,
    "gpu": NAMES,
    "link": NAMES,
    "kv_dtype": NAMES,
    "weights": NAMES,
    "serving_weights": NAMES,
    "choice": CHOICES,
    "path": [],  # hostile files (FILES below), not values
    "out": ["/dev/full", "/nonexistent/dir/out", "", "{tmp}", "{tmp}/-h", "/dev/null/x"],  # never the cwd
    "host": HOSTS,
    "port": PORTS,
    "url": URLS,
    "address": ADDRESSES,  # a Ray cluster's (--ray)
    "switch": [],  # a switch takes no value: given with one is the check
}

CONFIG = {
    "model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "hidden_size": 256, "torch_dtype": "bfloat16", "vocab_size": 1000, "intermediate_size": 512,
}  # fmt: skip


def _config(**changes: object) -> bytes:
    return json.dumps({**CONFIG, **changes}).encode()


def _gguf(block_count: int, heads: int = 4, kv_heads: int = 2, array: int | None = None) -> bytes:
    """A GGUF v3 header of a llama with the given counts (no tensors), and optionally an array claiming ``array``
    items it does not hold."""
    kv: list[bytes] = []

    def key(name: str) -> bytes:
        return struct.pack("<Q", len(name)) + name.encode()

    def u64(name: str, value: int) -> None:
        kv.append(key(name) + struct.pack("<I", 10) + struct.pack("<Q", value % 2**64))

    kv.append(key("general.architecture") + struct.pack("<I", 8) + key("llama"))
    u64("llama.block_count", block_count)
    u64("llama.attention.head_count", heads)
    u64("llama.attention.head_count_kv", kv_heads)
    u64("llama.embedding_length", 256)
    u64("llama.context_length", 4096)
    if array is not None:
        kv.append(key("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<I", 8) + struct.pack("<Q", array))
    return b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 0) + struct.pack("<Q", len(kv)) + b"".join(kv)


def _safetensors(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


GENERIC: dict[str, bytes] = {
    "empty": b"",
    "latin1": "caf\xe9 = 1\n".encode("latin-1"),
    "binary": bytes(range(256)) * 16,
    "deep-json": b"[" * 100_000 + b"]" * 100_000,
    "huge-int": b'{"a": ' + b"9" * 5000 + b"}",
    "nan": b'{"a": NaN, "b": Infinity}',
    "long-line": b"x" * (2 * 2**20) + b"\n",
    "nul": b"\x00" * 4096,
}

# reader -> (file name, {case: bytes}) of files aimed at that format
SPECIFIC: dict[str, tuple[str, dict[str, bytes]]] = {
    "config": (
        "config.json",
        {
            "layers-1e6": _config(num_hidden_layers=10**6),
            "layers-1e12": _config(num_hidden_layers=10**12),
            "layers-1e40": _config(num_hidden_layers=10**39),
            "heads-1e30": _config(num_attention_heads=10**30, num_key_value_heads=10**30),
            "experts-1e9": _config(model_type="mixtral", num_local_experts=10**9, num_experts_per_tok=2),
            "layer-types-1e6": _config(model_type="gemma3_text", layer_types=["sliding_attention"] * 10**6),
            "negative": _config(num_hidden_layers=-2),
            "float-layers": _config(num_hidden_layers=2.5),
            "string-layers": _config(num_hidden_layers="2"),
            "list": b"[1, 2]",
        },
    ),
    "gguf": (
        "model.gguf",
        {
            "blocks-1e6": _gguf(10**6),
            "blocks-1e12": _gguf(10**12),
            "blocks-2^64": _gguf(2**64 - 1),
            "kv-over-heads": _gguf(2, heads=4, kv_heads=8),
            "array-2^60": _gguf(2, array=2**60),
            "truncated": _gguf(2)[:40],
        },
    ),
    "safetensors": (
        "model.safetensors",
        {
            "deep": _safetensors(b"[" * 50_000 + b"]" * 50_000),
            "length-2^63": struct.pack("<Q", 2**63) + b"{}",
            "not-utf8": _safetensors(b'{"\xff": 1}'),
            "shape-1e30": _safetensors(
                json.dumps({"w": {"dtype": "F16", "shape": [10**30], "data_offsets": [0, 2]}}).encode()
            ),
            "rank-1e5": _safetensors(
                json.dumps({"w": {"dtype": "F16", "shape": [1] * 100_000, "data_offsets": [0, 2]}}).encode()
            ),
            "nan-offsets": _safetensors(b'{"w": {"dtype": "F16", "shape": [1], "data_offsets": [NaN, 2]}}'),
        },
    ),
    "index": (
        "model.safetensors.index.json",
        {
            "not-utf8": b'{"weight_map": {"a": "\xff.safetensors"}}',
            "deep": b'{"weight_map": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "escape": b'{"weight_map": {"a": "../../../../dev/zero"}}',
            "absolute": b'{"weight_map": {"a": "/dev/zero"}}',
            "not-strings": b'{"weight_map": {"a": [1], "b": {"c": 2}}}',
        },
    ),
    "workload": (
        "workload.toml",
        {
            "retries-forever": b"[arrival]\nrate_per_s = 1\n[retries]\ntimeout_s = 5\nmax_retries = 1000000000000\n",
            "backoff-overflow": (
                b"[arrival]\nrate_per_s = 1\n[retries]\ntimeout_s = 5\nmax_retries = 100\nbackoff_multiplier = 1e300\n"
            ),
            "rate-inf": b"[arrival]\nrate_per_s = inf\n",
            "rate-huge": b"[arrival]\nrate_per_s = 1e300\n",
            "tokens-huge": b"[arrival]\nrate_per_s = 1\n[input_tokens]\ndist = 'constant'\nvalue = 1e300\n",
        },
    ),
    "trace": (
        "trace.jsonl",
        {
            "timestamps-back": b'{"timestamp": 10, "input_length": 5, "output_length": 5}\n'
            b'{"timestamp": 1, "input_length": 5, "output_length": 5}\n',
            "inf-lengths": b'{"timestamp": 0, "input_length": Infinity, "output_length": 1e400}\n',
            "huge-ints": b'{"timestamp": 0, "input_length": ' + b"9" * 400 + b', "output_length": 1}\n',
        },
    ),
    "log": (
        "engine.log",
        {
            "huge-figure": b"INFO: # GPU blocks: " + b"9" * 400 + b", # CPU blocks: 1\n",
            "many-startups": b"INFO: # GPU blocks: 100, # CPU blocks: 1\n" * 10_000,
            "figure-1e50": b"INFO: Memory profiling takes 1 seconds\nINFO: model weights took 1"
            + b"0" * 50
            + b" GiB\n",
        },
    ),
    "prices": (
        "prices.toml",
        {"price-inf": b'h100-sxm = "inf/h"\n', "price-long": b'h100-sxm = "' + b"9" * 400 + b'/h"\n'},
    ),
    "loadtest-result": ("loadtest.json", {"not-a-result": b'{"schema_version": 1}', "nan": b'{"levels": [NaN]}'}),
    # --speed-from: the speeds of a load test's levels (simulate/measured.py)
    "speed-result": (
        "loadtest.json",
        {
            "other-engine": b'{"server": {"engine": "sglang", "model": "qwen3-32b"}, "levels": [{"sessions": 1, '
            b'"decode_tokens_per_s": {"p50": 50}, "prefill_tokens_per_s": {"p50": 5000}}]}',
            "speed-1e-300": b'{"levels": [{"sessions": 1, "decode_tokens_per_s": {"p50": 1e-300}, '
            b'"prefill_tokens_per_s": {"p50": 1e-300}}]}',
            "sessions-bool-zero-huge": b'{"levels": [{"sessions": true}, {"sessions": 0}, {"sessions": '
            + b"9" * 400
            + b', "decode_tokens_per_s": {"p50": 50}, "prefill_tokens_per_s": {"p50": 5000}}]}',
            "many-levels": b'{"levels": ['
            + b",".join(b'{"sessions": %d, "decode_tokens_per_s": {"p50": 50}}' % n for n in range(1, 5000))
            + b"]}",
            "no-speeds": b'{"levels": [{"sessions": 4, "decode_tokens_per_s": {"p50": null}}]}',
            # --speed-from LOG: an engine's serving lines (simulate/measured_log.py)
            "log-running-huge": b"Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, "
            b"Running: " + b"9" * 400 + b" reqs, Waiting: 0 reqs\n",
            "log-throughput-inf": (
                b"Avg prompt throughput: "
                + b"9" * 400
                + b".0 tokens/s, Avg generation throughput: "
                + b"9" * 400
                + b".0 tokens/s, Running: 4 reqs, Waiting: 0 reqs\n"
            )
            * 3,
            "log-slots-only": b"slot launch_slot_: id  0 | task 1 | processing task\n" * 5000,
        },
    ),
}


def special_files(folder: Path, name: str) -> dict[str, Path]:
    """A FIFO, a directory and a device, each where ``name`` is expected."""
    out: dict[str, Path] = {}
    fifo = folder / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / name)
    out["fifo"] = fifo / name
    directory = folder / "dir" / name
    directory.mkdir(parents=True)
    out["directory"] = directory
    out["device"] = Path("/dev/zero")
    out["missing"] = folder / "missing" / name
    return out


def hostile_files(folder: Path, reader: str) -> dict[str, Path]:
    """Every hostile file for ``reader``: the generic ones, its format's own, and the special files."""
    name, specific = SPECIFIC[reader]
    out = special_files(folder, name)
    for case, data in {**GENERIC, **specific}.items():
        where = folder / case
        where.mkdir()
        path = where / name
        path.write_bytes(data)
        out[case] = path
    return out


Builder = Callable[[Path], list[str]]
