"""calibrate on real published start-up logs (tests/data/logs/SOURCES.md cites each one).

Figures are asserted exactly as the logs print them; reconciliations are asserted where the model
and settings are known from the source.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.measure.calibrate import calibrate
from kvbudget.measure.logs import read_log
from tests.helpers import refused_in_one_line, run_cli, write_config

LOGS = Path(__file__).parent.parent / "data" / "logs"
GiB = 2**30
MiB = 2**20


def _rows(path: Path, model: str | None, **given: object) -> dict[str, tuple[bool | str, float]]:
    """figure -> (agrees, diff_pct); ("derived", diff_pct) for a figure derived from the log's own figures."""
    cal = calibrate(read_log(path), model, dict(given))  # type: ignore[arg-type]
    return {r.figure: ("derived" if r.derived else r.agrees, r.diff_pct) for r in cal.rows}


def test_vllm_v0_064_single_line_profile_reconciles_blocks_and_budget() -> None:
    # vLLM #10517 (RTX 3090, Llama-3.1-8B, max_model_len 20000)
    path = LOGS / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"
    log = read_log(path)
    assert log.engine == "vllm" and log.generation == "V0"
    m = log.measured
    assert m["total_gpu_memory_bytes"].text == "23.58 GiB"
    assert m["weights_bytes"].value == round(14.9888 * GiB)  # "14.9888 GB" is GiB in vLLM V0
    assert m["kv_blocks"].value == 1952
    assert m["max_concurrency"].value == 1.56
    assert log.setting("utilization") == 0.9
    assert log.setting("context") == 20000
    rows = _rows(path, "llama-3.1-8b")
    # the budget is arithmetic of the log's own figures: derived (consistent), never counted as agreement
    assert rows == {"available_kv_bytes": ("derived", 0.0), "kv_blocks": (True, 0.0), "max_concurrency": (True, 0.0)}


def test_vllm_v0_refusal_reports_the_tokens_the_cache_holds() -> None:
    path = LOGS / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-29k-refusal.log"
    log = read_log(path)
    assert log.refusal is not None and log.refusal.kind == "max_seq_len_too_long"
    assert log.refusal.max_context == 23648 == 1478 * 16
    assert _rows(path, "llama-3.1-8b")["kv_tokens"] == (True, 0.0)


def test_vllm_v0_multiline_profile_of_pr_10511() -> None:
    path = LOGS / "vllm" / "v0-0.6.5dev-multiline-llama3-8b.log"
    m = read_log(path).measured
    assert [
        m[k].text
        for k in (
            "total_gpu_memory_bytes",
            "weights_bytes",
            "non_torch_bytes",
            "activation_peak_bytes",
            "available_kv_bytes",
        )
    ] == ["79.22 GiB", "14.96 GiB", "1.79 GiB", "1.26 GiB", "53.29 GiB"]
    # Meta-Llama-3-8B has Llama-3.1-8B's KV geometry; the budget check does not depend on it anyway
    assert _rows(path, "llama-3.1-8b") == {"available_kv_bytes": ("derived", 0.0)}


def test_vllm_v0_cross_attention_model_is_not_given_v1_rules() -> None:
    cal = calibrate(read_log(LOGS / "vllm" / "v0-0.7-llama32-11b-vision-h100.log"), "llama-3.2-11b-vision")
    assert cal.rows == []
    assert any("V0" in n and "not predicted" in n for n in cal.notes)


def test_the_version_is_read_from_the_v0_engine_line_and_the_api_servers_banner() -> None:
    # 0.7.x V0 "Initializing a V0 LLM engine (v0.7.2)" (lines posted behind "# "), and the banner of 0.10 on
    # ("... █  version 0.16.0"), the two start-ups of issue 23's sixth pass whose version line is one of these
    v0 = read_log(LOGS / "vllm" / "v0-0.7.2-qwen25-72b-awq-2xa40.log")
    assert (v0.version, v0.generation) == ("0.7.2", "V0")
    assert v0.measured["available_kv_bytes"].text == "14.63 GiB"
    v1 = read_log(LOGS / "vllm" / "v1-0.16.0-llama3-70b-awq-2xl40s.log")
    assert (v1.version, v1.generation) == ("0.16.0", "V1")
    assert v1.measured["available_kv_bytes"].text == "20.16 GiB" and v1.measured["kv_tokens"].value == 132_128
    assert v1.setting("tp") == 2


def test_interleaved_ranks_keep_the_smallest_capacity_and_name_the_ranks() -> None:
    log = read_log(LOGS / "vllm" / "v0-bracketed-tp4-rtx3090-interleaved.log")
    assert log.ranks == {"pid493", "pid507", "pid521", "pid577"} or log.ranks >= {"pid507", "pid521", "pid577"}
    assert log.measured["available_kv_bytes"].text == "1.57 GiB"
    assert log.measured["total_gpu_memory_bytes"].text == "23.58 GiB"
    assert log.setting("utilization") == 0.99


def test_vllm_v1_lines_and_concurrency_from_logged_tokens() -> None:
    # vLLM PR #17122: Llama-3.1-8B on an L40S, 158,656 tokens, 4.84x at 32,768
    path = LOGS / "vllm" / "v1-pr17122-llama31-8b-l40s.log"
    log = read_log(path)
    assert log.generation == "V1"
    assert log.measured["kv_tokens"].value == 158_656
    assert log.measured["weights_bytes"].text == "14.9889 GiB"
    # 4.84x is 158,656 logged tokens / 16 / 2,048 blocks: derived from the log, so nothing was compared
    assert _rows(path, "llama-3.1-8b") == {"max_concurrency": ("derived", 0.0)}
    cal = calibrate(log, "llama-3.1-8b")
    assert cal.summary() == {"compared": 0, "agree": 0, "derived": 1, "derived_consistent": 1}


def test_vllm_v1_refusal_with_estimated_max_model_len() -> None:
    log = read_log(LOGS / "vllm" / "v1-fp8-kv-221k-refusal.log")
    r = log.refusal
    assert r is not None and r.kind == "kv_cache_too_small"
    assert (r.max_context, log.setting("context")) == (122080, 221000)
    assert r.needed_bytes == round(10.12 * GiB) and r.available_bytes == round(5.59 * GiB)
    assert log.generation == "V1"


def test_vllm_and_sglang_on_the_same_deployment() -> None:
    # vLLM #21348: Qwen3-235B-A22B-FP8 on 4 x H100, TP 4. SGLang's K+V bytes for its 367,404 tokens
    # agree with kvbudget exactly; vLLM's token count is 1.15% below kvbudget's (open: docs/measure.md).
    sg = _rows(LOGS / "sglang" / "qwen3-235b-fp8-tp4-h100-kv-allocated.log", "qwen3-235b-a22b", tp=4)
    assert sg == {"k_plus_v_bytes": (True, 0.0)}
    vl = _rows(LOGS / "vllm" / "v1-qwen3-235b-fp8-tp4-h100.log", "qwen3-235b-a22b", tp=4)
    assert vl["kv_tokens"][0] is False and 1.0 < vl["kv_tokens"][1] < 1.3


def test_sglang_kv_line_with_the_cache_dtype_first_and_an_mla_latent_buffer(tmp_path: Path) -> None:
    # releases after 0.5.10 print "KV Cache is allocated. dtype: torch.bfloat16, #tokens: N, K size: ..." (the H100
    # Qwen3-30B-A3B-FP8 log of 2026-08-27): the tokens and K + V are read, and agree with kvbudget's cell
    h100 = LOGS / "sglang" / "qwen3-30b-a3b-fp8-h100-0.5.18.log"
    log = read_log(h100)
    assert log.measured["kv_tokens"].value == 392_920 and log.measured["k_bytes"].value == round(17.99 * GiB)
    assert _rows(h100, "qwen3-30b-a3b") == {"k_plus_v_bytes": (True, 0.0)}
    # an MLA model's one latent buffer, as MLATokenToKVPool prints it (0.5.10 mem_cache/memory_pool.py line 702):
    # DeepSeek-V2-Lite caches kv_lora_rank 512 + qk_rope_head_dim 64 in bf16 for 27 layers, 31,104 B a token, in
    # size + page slots: (1,000,000 + 1) x 31,104 B = 28.97 GiB
    mla = tmp_path / "mla.log"
    mla.write_text("[2026-01-01 00:00:00] KV Cache is allocated. #tokens: 1000000, KV size: 28.97 GB\n")
    log = read_log(mla)
    assert log.engine == "sglang" and log.measured["kv_tokens"].value == 1_000_000
    assert log.measured["kv_bytes"].value == round(28.97 * GiB) and "k_bytes" not in log.measured
    assert _rows(mla, "deepseek-v2-lite") == {"k_plus_v_bytes": (True, 0.0)}


def test_sglang_summary_line_and_tp_ranks() -> None:
    log = read_log(LOGS / "sglang" / "max-total-num-tokens-256k.log")
    assert log.engine == "sglang"
    assert log.measured["max_total_num_tokens"].value == 2_086_558
    assert (log.setting("context"), log.setting("max_num_seqs")) == (256000, 33)
    tp = read_log(LOGS / "sglang" / "qwen-omni-tp4-interleaved.log")
    assert tp.measured["kv_tokens"].value == 2_090_351 and tp.ranks == {"TP1", "TP2", "TP3"}
    assert tp.measured["k_bytes"].value == round(23.92 * GiB)  # SGLang "GB" is 2^30 bytes


def test_llamacpp_2024_kv_self_size_inside_ollama_reconciles_with_llama_33b_geometry(tmp_path: Path) -> None:
    # The 2024 Ollama log (vicuna-33B, "lmsys", 30B type): 60 layers of 52 MHA heads x 128, n_ctx 2048.
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 60,
        "num_attention_heads": 52,
        "num_key_value_heads": 52,
        "hidden_size": 6656,
        "torch_dtype": "float16",
    }
    path = LOGS / "ollama" / "2024-04-cpu-kv-self-size.log"
    log = read_log(path, "ollama")
    assert log.engine == "ollama" and log.measured["kv_cache_bytes"].value == 3120 * MiB
    assert log.measured["weights_bytes"].text == "CPU 17504.89 MiB"
    rows = _rows(path, str(write_config(tmp_path, cfg)))
    assert rows == {"kv cache bytes": (True, 0.0), "kv cache cells": (True, 0.0)}


def test_llamacpp_current_log_with_colour_codes_and_iswa() -> None:
    log = read_log(LOGS / "llamacpp" / "current-2026-dsv4-iswa-colour.log")
    assert log.engine == "llamacpp"
    assert (log.setting("cells"), log.setting("swa_cells")) == (64000, 4352)
    assert log.measured["kv_buffer_bytes"].text == "CUDA0 182.75 MiB"


def test_ollama_own_lines() -> None:
    log = read_log(LOGS / "ollama" / "2025-06-ollama-engine-offload.log")
    assert log.engine == "ollama"
    assert (log.setting("context"), log.setting("n_seq"), log.setting("n_batch")) == (8192, 2, 512)
    assert log.measured["ollama_estimated_kv_bytes"].text == "1.3 GiB"


def test_old_llamacpp_log_is_read() -> None:
    log = read_log(LOGS / "llamacpp" / "old-2024-01-kv-self-size-n_ctx512.log")
    assert log.generation == "llama_new_context_with_model"
    assert log.measured["kv_cache_bytes"].value == 160 * MiB and log.measured["kv_cells"].value == 512


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no vLLM, SGLang, TensorRT-LLM, llama.cpp or Ollama start-up lines in an empty file"),
        ("hello\nworld\n", "no vLLM, SGLang, TensorRT-LLM, llama.cpp or Ollama start-up lines in 2 lines"),
        ("INFO 01-01 [api_server.py:1] vLLM API server version 0.11.0\n", "a vllm log with no sizing lines"),
    ],
)
def test_logs_without_sizing_lines_fail_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "engine.log"
    assert message in refused_in_one_line(capsys, path, text, read_log, message, "calibrate", str(path))


def test_cli_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    path = LOGS / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"
    code, out, _ = run_cli(capsys, "calibrate", str(path), "--model", "llama-3.1-8b", "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) >= {
        "schema_version",
        "engine",
        "model",
        "settings",
        "measured",
        "refusal",
        "predicted",
        "reconciliation",
    }
    assert doc["engine"]["name"] == "vllm" and doc["refusal"] is None
    assert doc["measured"]["kv_blocks"] == {
        "value": 1952,
        "unit": "blocks",
        "line": 3,
        "text": "1952",
        "provenance": "measured",
    }
    assert [r["figure"] for r in doc["reconciliation"]] == ["available_kv_bytes", "kv_blocks", "max_concurrency"]
    assert [(r["kind"], r["agrees"]) for r in doc["reconciliation"]] == [
        ("derived", None),
        ("compared", True),
        ("compared", True),
    ]
    assert all(r["consistent"] and r["diff_pct"] == 0 for r in doc["reconciliation"])
    assert doc["summary"] == {"compared": 2, "agree": 2, "derived": 1, "derived_consistent": 1}
    assert doc["measured"]["activation_peak_bytes"]["provenance"] == "derived"  # peak_torch - weights


def test_mid_2025_unified_cache_line_inside_an_lm_studio_log(tmp_path: Path) -> None:
    # Lines as an LM Studio server log printed them on 2025-07-22 (llama.cpp of mid 2025, quoted in a
    # public repository): DeepSeek-R1-0528-Qwen3-8B Q8_0, n_ctx 131072, unified cache; note "1/ 1 seqs".
    text = (
        "llama_context: n_seq_max     = 1\n"
        "llama_context: n_ctx         = 131072\n"
        "llama_context: kv_unified    = true\n"
        "2025-07-22 01:19:21 [DEBUG]\n"
        " llama_kv_cache_unified: size = 18432.00 MiB (131072 cells,  36 layers,  1/ 1 seqs), K (f16): 9216.00 MiB,"
        " V (f16): 9216.00 MiB\n"
        "llama_context:      CUDA0 compute buffer size =  9240.00 MiB\n"
    )
    path = tmp_path / "lmstudio.log"
    path.write_text(text, encoding="utf-8")
    log = read_log(path)
    [cache] = log.caches
    assert (cache.cells, cache.layers, cache.seqs, cache.streams) == (131072, 36, 1, 1)
    assert log.generation == "llama_kv_cache_unified"
    # Qwen3-8B's geometry (36 layers x 8 KV heads x 128): 147,456 B per cell
    assert _rows(path, "qwen3-8b") == {"kv cache bytes": (True, 0.0), "kv cache cells": (True, 0.0)}


def test_the_text_writes_every_count_with_thousands_separators(capsys: pytest.CaptureFixture[str]) -> None:
    """calibrate's text printed "kv_blocks  1952" in its table and "context: 20000" among the settings, where every
    other count of the product reads 1,952: counts are written as counts, a byte figure as the log printed it."""
    path = LOGS / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-20k.log"
    code, out, err = run_cli(capsys, "calibrate", str(path), "--model", "llama-3.1-8b")
    assert code == 0, err
    assert "  context: 20,000  (line 4)" in out and "  concurrency_tokens: 20,000  (line 4)" in out
    row = next(line for line in out.splitlines() if line.startswith("kv_blocks"))
    assert row.split()[:2] == ["kv_blocks", "1,952"], row
    assert "3.81 GiB" in out  # a byte figure keeps the log's own printed form
    code, out, err = run_cli(capsys, "calibrate", str(LOGS / "llamacpp" / "current-2026-dsv4-iswa-colour.log"))
    assert code == 0, err
    assert "  cells: 64,000  (line 9)" in out and "(64,000 cells, 0 layers" in out


@pytest.mark.parametrize(
    ("line", "flashinfer"),
    [
        # vLLM 0.10.1 topk_topp_sampler.py, as the dennislee22 logs print them (tests/data/logs/SOURCES.md), all
        # four dated inside one start-up (the reader refuses a file whose dates go back)
        ("INFO 09-04 01:02:57 [topk_topp_sampler.py:50] Using FlashInfer for top-p & top-k sampling.", True),
        (
            "WARNING 09-04 01:02:57 [topk_topp_sampler.py:61] FlashInfer is not available. Falling back to the "
            "PyTorch-native implementation of top-p & top-k sampling. For the best performance, please install "
            "FlashInfer.",
            False,
        ),
        # vLLM 0.33.0 flashinfer_sampler_supported's two refusals, written from its format strings
        (
            "WARNING 09-04 01:02:57 [topk_topp_sampler.py:150] FlashInfer top-p/top-k sampling unavailable: "
            "unsupported compute capability 7.0; falling back. Set VLLM_USE_FLASHINFER_SAMPLER=0 to silence.",
            False,
        ),
        (
            "INFO 09-04 01:02:57 [topk_topp_sampler.py:121] FlashInfer top-p/top-k sampling disabled via "
            "VLLM_USE_FLASHINFER_SAMPLER=0.",
            False,
        ),
    ],
)
def test_the_sampler_a_vllm_log_names_is_read(tmp_path: Path, line: str, flashinfer: bool) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 09-04 01:02:21 [api_server.py:1805] vLLM API server version 0.10.1.1\n"
        f"(EngineCore_0 pid=1812) {line}\n"
        "(EngineCore_0 pid=1812) INFO 09-04 01:03:03 [gpu_model_runner.py:2007] Model loading took 14.2488 GiB and "
        "4.422213 seconds\n"
    )
    assert read_log(log).setting("flashinfer_sampler") is flashinfer
