"""Bad input: one clear line naming the file, field and fix, exit code 1, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import dense_config, run_cli, write_config


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in err
    return lines[0]


def test_malformed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": 32,', encoding="utf-8")
    line = _fails(capsys, "cost", str(path))
    assert str(path) in line and "not valid JSON" in line and "line 1" in line


def test_json_that_is_not_an_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(capsys, "cost", str(write_config(tmp_path, [1, 2, 3])))
    assert "must be a JSON object" in line


@pytest.mark.parametrize("field", ["num_attention_heads", "num_hidden_layers"])
def test_missing_required_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str) -> None:
    cfg = dense_config(32, 32, 8, 128)
    del cfg[field]
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert f"'{field}' is missing" in line and "config.json" in line


@pytest.mark.parametrize("value", [0, -8, 2.5, "eight"])
def test_zero_negative_or_non_integer_kv_heads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object
) -> None:
    cfg = dense_config(32, 32, 8, 128)
    cfg["num_key_value_heads"] = value
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert "num_key_value_heads" in line


def test_kv_heads_not_dividing_query_heads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = dense_config(32, 32, 6, 128)
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert "not a multiple of num_key_value_heads 6" in line


def test_head_dim_not_dividing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = dense_config(32, 32, 8, 128)
    del cfg["head_dim"]
    cfg["hidden_size"] = 4100
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert "hidden_size 4100 is not divisible by num_attention_heads 32" in line and "head_dim" in line


def test_unknown_model_type_fails_closed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = dense_config(32, 32, 8, 128, model_type="brand_new_arch", linear_attn_layers=[1, 2])
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert "'brand_new_arch'" in line and "linear_attn_layers" in line and "num_key_value_heads" in line


def test_dense_type_with_cache_changing_fields_fails_closed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = dense_config(32, 32, 8, 128, kv_lora_rank=512)
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert "kv_lora_rank" in line and "refusing to guess" in line


def test_unknown_layer_type_fails_closed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = dense_config(2, 32, 8, 128, layer_types=["full_attention", "linear_attention"])
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert "linear_attention" in line


def test_missing_model_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = dense_config(32, 32, 8, 128)
    del cfg["model_type"]
    line = _fails(capsys, "cost", str(write_config(tmp_path, cfg)))
    assert "'model_type' is missing" in line


def test_unreachable_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    line = _fails(capsys, "cost", "some-org/not-cached-model")
    assert "some-org/not-cached-model" in line and "cannot be reached" in line and "catalog" in line


def test_unknown_reference(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(capsys, "cost", "llama-9-70b")
    assert "kvbudget models" in line and "Llama" in line


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(capsys, "cost", "./nope/config.json")
    assert "no such file" in line


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--tokens", "32q"], "--tokens"),
        (["--tokens", "0"], "outside 1..1,099,511,627,776 tokens"),
        (["--sequences", "-2"], "--sequences"),
        (["--tp", "x"], "--tp"),
        (["--kv-dtype", "int3"], "unknown cache dtype"),
        (["--engine", "tgi"], "unknown engine"),
        (["--engine", "transformers<9"], "no rule change"),
    ],
)
def test_bad_options(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    line = _fails(capsys, "cost", "llama-3.1-8b", *argv)
    assert needle in line


def test_tp_that_does_not_split_heads(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(capsys, "cost", "llama-3.1-8b", "--tp", "3")
    assert "8 KV heads" in line and "--tp" in line


def test_hub_id_from_local_cache_when_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Hub id whose config sits in the huggingface_hub cache resolves with HF_HUB_OFFLINE=1."""
    pytest.importorskip("huggingface_hub")
    hub = tmp_path / "hf" / "hub"
    repo = hub / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef0123456789abcdef01234567", encoding="utf-8")
    write_config(snapshot, dense_config(16, 32, 8, 64))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(hub))
    code, out, err = run_cli(capsys, "cost", "acme/tiny-llama", "--json")
    assert code == 0, err
    assert '"kv_bytes_per_token": 32768' in out


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["simulate", "llama-3.1-8b", "--policy", "nonsense"],
            "Error: --policy: 'nonsense' is not a choice; choose one of reserve, paged, watermark",
        ),
        (
            ["plan", "llama-3.1-8b", "--units", "SI"],
            "Error: --units: 'SI' is not a choice; choose one of si, iec",
        ),
        (["plan"], "Error: model is required; see kvbudget plan --help"),
        (["calibrate", "--model", "foo"], "Error: LOG is required; see kvbudget calibrate --help"),
        (["plan", "llama-3.1-8b", "--tp"], "Error: --tp: give it a value; see kvbudget plan --help"),
        (
            ["plan", "llama-3.1-8b", "--bogus", "1"],
            "Error: --bogus: not an option of kvbudget plan; see kvbudget plan --help",
        ),
        (["trace", "stats", "x.json", "--format", "csv"], "Error: --format: 'csv' is not a choice; choose one of"),
        (["trace"], "Error: command is required; choose one of stats, convert; see kvbudget trace --help"),
        (["cost", "llama-3.1-8b", "extra"], "Error: 'extra': kvbudget cost takes no more words; see kvbudget cost"),
    ],
)
def test_a_usage_error_is_the_products_line_naming_the_field(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    """argparse's own errors (a choice, a missing value, an unknown option) read as every other error: one line
    that starts with the field, not ``kvbudget plan: argument --policy: invalid choice: ...``."""
    assert _fails(capsys, *argv).startswith(line)


def test_an_unknown_command_names_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(capsys, "nonsense")
    assert line.startswith("Error: command: 'nonsense' is not a choice; choose one of cost, table, models, gpus,"), line


def test_a_usage_error_under_json_is_the_error_document(capsys: pytest.CaptureFixture[str]) -> None:
    """--json holds for a usage error too: the error document on stdout, the same line on stderr (as the web API)."""
    import json

    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--units", "x", "--json")
    message = "--units: 'x' is not a choice; choose one of si, iec"
    assert code == 1 and err == f"Error: {message}\n"
    assert json.loads(out)["error"] == {"kind": "InputError", "message": message}


PLANNED = ("llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("simulate", *PLANNED, "--workload", "nope.toml"), "Error: --workload: nope.toml: no such file"),
        (("simulate", *PLANNED, "--trace", "nope.json"), "Error: --trace: nope.json: no such file"),
        (("size", *PLANNED, "--sessions", "8", "--workload", "nope.toml", "--no-simulate"), "Error: --workload: nope"),
        (("plan", *PLANNED, "--from-log", "nope.log"), "Error: --from-log: nope.log: no such file"),
        (("plan", *PLANNED, "--speed-from", "nope.json"), "Error: --speed-from: nope.json: no such file"),
        (("compare", *PLANNED, "--prices", "nope.toml"), "Error: --prices: nope.toml: no such file"),
        (("report", *PLANNED, "--loadtest", "nope.json", "--format", "md"), "Error: --loadtest: nope.json: no such"),
        (("loadtest", "http://127.0.0.1:9", "--workload", "nope.toml"), "Error: --workload: nope.toml: no such file"),
        (("loadtest", "http://127.0.0.1:9", "--trace", "nope.json"), "Error: --trace: nope.json: no such file"),
        (
            ("calibrate", "--model", "foo", "tests/data/logs/vllm/v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"),
            "Error: --model: 'foo' is not a catalog model",
        ),
        (
            ("simulate", "--model", "foo", "--gpu", "h100-sxm", "--context", "32k", "--workload", "examples/chat.toml"),
            "Error: --model: 'foo' is not a catalog model",
        ),
    ],
)
def test_a_file_or_model_option_that_fails_is_named_first(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], line: str
) -> None:
    """A missing --workload file read 'Error: nope.toml: no such file (workload file)': the option first, as every
    other error, then the file and what is wrong with it."""
    assert _fails(capsys, *argv).startswith(line)


def test_the_python_api_names_the_option_too() -> None:
    import kvbudget
    from kvbudget.errors import InputError

    options = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k", "workload": "nope.toml"}
    request = kvbudget.SimulateRequest.from_options(options)
    with pytest.raises(InputError, match=r"^--workload: nope\.toml: no such file"):
        kvbudget.simulate_deployment(request)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("simulate", *PLANNED), "Error: --workload: give exactly one of --workload FILE or --trace FILE"),
        (("simulate", *PLANNED, "--workload", "examples/chat.toml", "--trace", "x"), "Error: --trace: give exactly"),
        (("simulate", *PLANNED, "--workload", "examples/chat.toml", "--sessions", "4", "--duration", "60"),
         "Error: --duration: give --sessions N or --duration S, not both"),
        (("simulate", "llama-3.1-8b", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k"),
         "Error: --model: give the model once"),
        (("size", *PLANNED, "--no-simulate"), "Error: --sessions: give the load as --sessions N"),
        (("size", *PLANNED, "--sessions", "6", "--rate", "1/s", "--no-simulate"),
         "Error: --rate: give the load as --sessions N"),
        (("plan", "llama-3.1-8b", "--context", "32k"), "Error: --gpu: give exactly one of --gpu NAME"),
        (("plan", *PLANNED, "--gpu-memory", "80GB"), "Error: --gpu-memory: give exactly one of --gpu NAME"),
        (("plan", *PLANNED, "--weights", "fp8", "--weights-size", "8GB"), "Error: --weights-size: give either"),
        (("infer", "--memory", "24GB", "--gpu", "h100-sxm", "--params", "8B", "--context", "32k"),
         "Error: --gpu: give --memory or --gpu, not both"),
        (("infer", "--kv-budget", "4GiB", "--memory", "24GB", "--params", "8B", "--context", "32k"),
         "Error: --kv-budget: give either --kv-budget or --memory/--gpu, not both"),
        (("infer", "--memory", "24GB", "--context", "32k"), "Error: --memory: give --memory (or --gpu) with --params"),
        (("infer", "--kv-budget", "4GiB", "--context", "32k"), "Error: --kv-heads: give --kv-heads and --head-dim"),
        (("loadtest", "http://127.0.0.1:9", "--model", "llama-3.1-8b"), "Error: --workload: give exactly one of"),
    ],
)  # fmt: skip
def test_options_given_together_or_missing_name_the_option(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], line: str
) -> None:
    """'give --sessions N or --duration S, not both' named no field first: each such line starts with the option
    to change (the one given second, or the one missing)."""
    assert _fails(capsys, *argv).startswith(line)
