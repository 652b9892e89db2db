"""Hostile and careless input through the real entry point: one clear error line and exit code 1, or
a correct answer; never a traceback, never a hang (each call runs under a 20 s alarm).

A fixed corpus of hostile files (FIFOs, devices, directories, BOMs, other encodings, NaN, Infinity,
1e309, 5,000-digit integers, deep nesting, duplicate keys) for every file-reading command, and
Hypothesis-generated text for the log, workload and size readers.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import run_cli

DEEP = "[" * 100_000 + "]" * 100_000
CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 256,
    "torch_dtype": "bfloat16",
}


@pytest.fixture(autouse=True)
def _alarm() -> Iterator[None]:
    def fired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("a test ran for 120 s: a reader must not hang")

    old = signal.signal(signal.SIGALRM, fired)
    signal.alarm(120)  # a whole property test (up to 100 examples) on a loaded machine, not one call
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _one_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert "Traceback" not in out + err
    assert code == 1, (code, out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    return err


def _hostile(tmp_path: Path, name: str) -> dict[str, Path]:
    """Files named ``name`` (so suffix rules pass) with hostile content, plus special files."""
    files: dict[str, bytes] = {
        "empty": b"",
        "latin1": "caf\xe9 = 1\n".encode("latin-1"),
        "nan": json.dumps({**CONFIG, "num_hidden_layers": float("nan")}).encode(),
        "infinity": b'{"model_type": "llama", "num_hidden_layers": Infinity}',
        "huge-float": b'{"model_type": "llama", "num_hidden_layers": 1e309}',
        "huge-int": b'{"model_type": "llama", "num_hidden_layers": ' + b"9" * 5000 + b"}",
        "deep": DEEP.encode(),
        "binary": bytes(range(256)) * 64,
    }
    out: dict[str, Path] = {}
    for key, data in files.items():
        folder = tmp_path / key
        folder.mkdir()
        path = folder / name
        path.write_bytes(data)
        out[key] = path
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / name)
    out["fifo"] = fifo_dir / name
    directory = tmp_path / "dir" / name
    directory.mkdir(parents=True)
    out["directory"] = directory
    out["device"] = Path("/dev/zero")
    return out


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("config.json", ("cost", "{}")),
        ("engine.log", ("calibrate", "{}")),
        ("trace.jsonl", ("trace", "stats", "{}")),
        ("trace.csv", ("trace", "stats", "{}", "--format", "azure")),
        ("trace.jsonl", ("trace", "stats", "{}", "--format", "mooncake")),
        ("trace.jsonl", ("trace", "stats", "{}", "--format", "tracelab")),
        ("trace.json", ("trace", "stats", "{}", "--format", "weka")),
        ("trace.json", ("trace", "stats", "{}", "--format", "otel")),
        ("trace.jsonl", ("trace", "stats", "{}", "--format", "kvbudget")),
        ("model.gguf", ("cost", "{}", "--engine", "llamacpp")),
        ("prices.toml", ("compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--prices", "{}")),
        ("workload.toml", ("workload", "check", "{}")),
        ("workload.yaml", ("workload", "check", "{}")),
    ],
)
def test_hostile_files_give_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, argv: tuple[str, ...]
) -> None:
    for kind, path in _hostile(tmp_path, name).items():
        args = [str(path) if a == "{}" else a for a in argv]
        code, out, err = run_cli(capsys, *args)
        assert "Traceback" not in out + err, (kind, err)
        if code == 0:  # a reader may skip bad rows and say so; it must never print a wrong answer silently
            assert kind in ("empty",) or "bad row" in out or "skipped" in out, (kind, out)
            continue
        assert code == 1 and err.startswith("Error: ") and err.count("\n") == 1, (kind, code, err)


def test_config_numbers_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _hostile(tmp_path, "config.json")
    assert "NaN is not a number kvbudget accepts" in _one_error(capsys, "cost", str(files["nan"]))
    assert "Infinity is not a number" in _one_error(capsys, "cost", str(files["infinity"]))
    assert "1e309 is out of range" in _one_error(capsys, "cost", str(files["huge-float"]))
    assert "5,000 digits is out of range" in _one_error(capsys, "cost", str(files["huge-int"]))
    assert "nests deeper" in _one_error(capsys, "cost", str(files["deep"]))
    assert "is a FIFO, not a regular file" in _one_error(capsys, "cost", str(files["fifo"]))
    assert "is a device, not a regular file" in _one_error(capsys, "calibrate", "/dev/zero")
    assert "not UTF-8 text (byte 0xe9 at offset 3)" in _one_error(capsys, "cost", str(files["latin1"]))


def test_a_bom_is_not_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(CONFIG).encode())
    code, out, err = run_cli(capsys, "cost", str(path), "--tokens", "1k")
    assert code == 0, err
    assert "per token" in out


def test_duplicate_yaml_keys_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("arrival:\n  rate_per_s: 1\narrival:\n  rate_per_s: 2\n", encoding="utf-8")
    assert "key 'arrival' is given twice (line 3)" in _one_error(capsys, "workload", "check", str(path))


def test_outputs_are_validated_before_the_work_and_never_replace_a_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = Path(__file__).parent / "data" / "traces" / "weka_kv_cache_tester"
    first = sorted(trace.glob("*.json"))[0]
    assert "exists and is not a regular file" in _one_error(
        capsys, "trace", "convert", str(first), "--out", "/dev/null"
    )
    assert "does not exist" in _one_error(
        capsys, "trace", "convert", str(first), "--out", str(tmp_path / "no" / "such" / "dir.jsonl")
    )
    assert "is one of the input files" in _one_error(capsys, "trace", "convert", str(first), "--out", str(first))
    out = tmp_path / "steps.jsonl"
    code, _, err = run_cli(capsys, "trace", "convert", str(first), "--out", str(out))
    assert code == 0, err
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # ordinary permissions, not a temp file's 0600
    assert [p.name for p in tmp_path.iterdir()] == ["steps.jsonl"]  # no temporary file left behind


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=2000))
def test_any_text_as_an_engine_log(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    path = tmp_path / "fuzz.log"
    path.write_text(text, encoding="utf-8")
    code, out, err = run_cli(capsys, "calibrate", str(path), "--json")
    assert "Traceback" not in out + err
    assert code in (0, 1)
    if code == 1:
        assert err.startswith("Error: ") and err.count("\n") == 1
    else:
        json.loads(out)


LOG_LINES = st.sampled_from(
    [
        "Available KV cache memory: {n}.{n} GiB",
        "GPU KV cache size: {n},{n} tokens",
        "Maximum concurrency for {n} tokens per request: {n}.{n}x",
        "llama_kv_cache: size = {n}.00 MiB ( {n} cells, {n} layers, {n}/{n} seqs), K (f16): {n}.00 MiB, V (f16): 1 MiB",
        "KV Cache is allocated. #tokens: {n}, K size: {n}.{n} GB, V size: {n}.{n} GB",
        "max_total_num_tokens={n}, chunked_prefill_size=-{n}, max_running_requests={n}, context_len={n}",
        "ValueError: To serve at least one request with the models's max seq len ({n}), ({n}.{n} GiB KV cache is "
        "needed, which is larger than the available KV cache memory (-{n}.{n} GiB). Based on the available memory, "
        "the estimated maximum model length is {n}.",
        "llama_context: n_ctx = {n}",
        "llama_context: n_seq_max = {n}",
    ]
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.tuples(LOG_LINES, st.integers(0, 10**12)), min_size=1, max_size=8))
def test_sizing_lines_with_any_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[tuple[str, int]]
) -> None:
    path = tmp_path / "sizing.log"
    path.write_text("\n".join(line.replace("{n}", str(n)) for line, n in lines) + "\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "calibrate", str(path), "--model", "llama-3.1-8b", "--json")
    assert "Traceback" not in out + err
    assert code in (0, 1) and (code == 0 or (err.startswith("Error: ") and err.count("\n") == 1)), err


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(max_size=30))
def test_any_rate_and_price_argument(capsys: pytest.CaptureFixture[str], value: str) -> None:
    if value.startswith("-"):
        value = " " + value
    base = ("compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8k", "--json")
    for extra in (("--price", f"h100-sxm={value}"), ("--rate", value, "--workload", "examples/chat.toml")):
        code, out, err = run_cli(capsys, *base, *extra)
        assert "Traceback" not in out + err
        assert code == 0 or (code == 1 and err.startswith("Error: ") and err.count("\n") == 1), err


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(max_size=40))
def test_any_size_argument(capsys: pytest.CaptureFixture[str], value: str) -> None:
    if value.startswith("-"):
        value = " " + value  # argparse would read it as an option
    code, out, err = run_cli(capsys, "cost", "llama-3.1-8b", "--tokens", value, "--json")
    assert "Traceback" not in out + err
    assert code in (0, 1)
    if code == 1:
        assert err.startswith("Error: ") and err.count("\n") == 1


# ---- silent wrong answers, fixed at their mechanism ------------------------------------------------


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _step(session: str, step: int, start: float, prompt: int) -> dict[str, object]:
    return {"session": session, "step": step, "start_s": start, "prompt_tokens": prompt, "output_tokens": 10}


def test_equal_session_ids_in_two_files_are_two_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _jsonl(tmp_path / "a.jsonl", [_step("s1", 0, 0, 1000), _step("s1", 1, 5, 1500)])
    b = _jsonl(tmp_path / "b.jsonl", [_step("s1", 0, 0, 100), _step("s1", 1, 5, 200)])
    code, out, err = run_cli(capsys, "trace", "stats", str(a), str(b), "--json")
    assert code == 0, err
    assert json.loads(out)["sessions"] == 2
    code, out, err = run_cli(capsys, "trace", "stats", str(a), str(b), "--json", "--sessions-span-files")
    assert code == 0, err
    assert json.loads(out)["sessions"] == 1  # the user says the files are one trace
    assert "given twice" in _one_error(capsys, "trace", "stats", str(a), str(a))


def test_counts_past_any_real_context_are_bad_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "big.jsonl", [_step("s", 0, 0, 2**63)])
    assert "past any real context" in _one_error(
        capsys, "trace", "stats", str(path), "--format", "kvbudget", "--strict"
    )


def test_corrupt_gzip_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"not really gzip" * 10)
    assert "a corrupt gzip file" in _one_error(capsys, "trace", "stats", str(path), "--format", "kvbudget")


def test_options_an_engine_cannot_honour(capsys: pytest.CaptureFixture[str]) -> None:
    assert "give both sides of K/V" in _one_error(capsys, "cost", "llama-3.1-8b", "--kv-dtype", "fp8/")
    err = _one_error(capsys, "cost", "llama-3.1-8b", "--engine", "vllm", "--tp", "64")
    assert "divide the 32 attention heads" in err
    assert "a version is a release number" in _one_error(capsys, "cost", "llama-3.1-8b", "--engine", "vllm@latest")
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--gpu", "h100", "--context", "8k", "--utilization", "0.5")
    assert code == 0 and "--utilization 0.5 is ignored: ideal has no memory fraction" in out + err


def _safetensors(path: Path, tensors: dict[str, tuple[int, int]], data: int) -> Path:
    header = {n: {"dtype": "BF16", "shape": [(e - b) // 2], "data_offsets": [b, e]} for n, (b, e) in tensors.items()}
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * data)
    return path


def test_safetensors_offsets_are_checked_against_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvbudget.errors import ConfigError
    from kvbudget.weights.sources import read_safetensors_header

    ok = _safetensors(tmp_path / "ok.safetensors", {"a": (0, 8), "b": (8, 16)}, 16)
    assert [row[3] for row in read_safetensors_header(ok)] == [8, 8]
    past = _safetensors(tmp_path / "past.safetensors", {"a": (0, 8), "b": (8, 4096)}, 16)
    with pytest.raises(ConfigError, match="ends at byte 4,096 of a 16-byte data section"):
        read_safetensors_header(past)
    overlap = _safetensors(tmp_path / "overlap.safetensors", {"a": (0, 8), "b": (4, 12)}, 16)
    with pytest.raises(ConfigError, match="overlap"):
        read_safetensors_header(overlap)


def _valid_gguf(path: Path) -> bytes:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("fuzz")
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(256)
    w.add_head_count(4)
    w.add_head_count_kv([2, 2])
    w.add_key_length(64)
    w.add_value_length(64)
    w.add_token_list(["a", "b", "c"])
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_gguf_headers(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject) -> None:
    """A valid GGUF mutated (bytes flipped, cut short, extended, a count made huge): kvbudget costs it or gives one
    error line, never a traceback, a hang or a large allocation."""
    base = tmp_path / "base.gguf"
    raw = bytearray(base.read_bytes() if base.exists() else _valid_gguf(base))
    for _ in range(data.draw(st.integers(0, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "count", "extend"]))
        if kind == "flip" and raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        elif kind == "count" and len(raw) >= 16:
            at = data.draw(st.integers(4, len(raw) - 8))
            raw[at : at + 8] = data.draw(st.integers(0, 2**64 - 1)).to_bytes(8, "little")
        else:
            raw += data.draw(st.binary(max_size=64))
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(bytes(raw))
    code, out, err = run_cli(capsys, "cost", str(path), "--engine", "llamacpp", "--tokens", "1k")
    assert "Traceback" not in out + err
    assert code == 0 or (code == 1 and err.startswith("Error: ") and err.count("\n") == 1), err


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.recursive(
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
        max_leaves=12,
    ),
    length_delta=st.integers(-16, 16),
    data=st.binary(max_size=64),
)
def test_generated_safetensors_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: object, length_delta: int, data: bytes
) -> None:
    """Any JSON as a safetensors header, with a declared length that may be wrong: the weights of the model
    directory are read exactly, or the plan fails in one line."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(CONFIG))
    raw = json.dumps(header).encode()
    length = max(0, len(raw) + length_delta)
    (model / "model.safetensors").write_bytes(length.to_bytes(8, "little") + raw + data)
    code, out, err = run_cli(capsys, "weights", str(model))
    assert "Traceback" not in out + err
    assert code == 0 or (code == 1 and err.startswith("Error: ") and err.count("\n") == 1), err
