"""TensorRT-LLM's runtime memory from its own profiling pass (engines/trtllm_profile.py), held to the figures its
start-up logs print (tests/data/memory/trtllm_logs.csv, each row cited) and to the formulas of _util.py
KvCacheCreator and modules/logits_processor.py."""

from __future__ import annotations

import csv
from pathlib import Path

from kvbudget.api import PlanRequest, Tokens, plan_deployment
from kvbudget.engines import trtllm_profile
from kvbudget.engines.overhead import ACT_FACTOR, activations
from kvbudget.model.sources import resolve

GiB = 2**30
ROOT = Path(__file__).parents[2]
ROWS = {
    r["case"]: r
    for r in csv.DictReader((ROOT / "tests" / "data" / "memory" / "trtllm_logs.csv").read_text().splitlines())
}
SMOLLM = str(ROOT / "tests" / "data" / "memory" / "configs" / "SmolLM2-135M-Instruct")


def test_the_dummy_requests_are_max_num_tokens_cut_at_max_seq_len_minus_one() -> None:
    # _create_dummy_context_requests(net_max_seq_len - 1): the DGX Spark log (max_seq_len 131,072) sends one request
    # of 8,192 tokens, whose temporary cache it printed: 'Allocated 0.56 GiB for max tokens in paged KV cache (8224)'
    # (+ 1 generated token; its overlap scheduler was off, and the + 1 it adds would not cross a block here)
    assert trtllm_profile.dummy_requests(8192, 131_072) == (8192,)
    for overlap in (False, True):
        assert trtllm_profile.temporary_kv_tokens((8192,), overlap) == 8224
    # the RTX 4070 SUPER log (max_seq_len 2,049): four requests of 2,048 tokens, the last one not shorter
    assert trtllm_profile.dummy_requests(8192, 2049) == (2048,) * 4
    assert trtllm_profile.dummy_requests(8192, 3001) == (3000, 3000, 2192)
    # ceil((2,048 + 2) / 32) = 65 blocks each, the cache the pass holds and adds back
    assert trtllm_profile.temporary_kv_tokens((2048,) * 4) == 4 * 65 * 32


def test_the_logits_are_one_gathered_row_per_request_in_bf16_and_fp32() -> None:
    # LogitsProcessor: hidden_states[cumsum(seq_lens) - 1], the lm_head over the whole vocabulary, then .float()
    spec = resolve(SMOLLM)
    assert trtllm_profile.logits_bytes(spec, 4) == 4 * 49_152 * (2 + 4)
    parts = {
        t.name: t for t in trtllm_profile.terms(spec, tp=1, max_num_tokens=8192, max_seq_len=2049, batched_basis="")
    }
    assert parts["logits"].low == parts["logits"].high == 1_179_648
    # 256 fp32 rows of the vLLM-derived sampler term were 48 MiB; TensorRT-LLM's greedy dummy pass keeps 1.1 MiB
    assert parts["logits"].high < 256 * 49_152 * 4 // 40


def test_the_moe_activation_term_meets_the_itemized_dgx_spark_log() -> None:
    """gpt-oss-120b, TensorRT-LLM 1.1.0rc3: 'Memory dynamically allocated during inference (inside torch) in memory
    usage profiling: 0.85 GiB' (torch peak - what torch held before the pass: the activations, the logits and the
    attention and MoE workspaces). Held out: the range's low end is within 5% of it; the dense formula (a 2 x 2,880
    wide MLP per token) was under half of it."""
    row = ROWS["gpt-oss-120b-dgx-spark-1.1.0rc3"]
    assert "Memory dynamically allocated during inference (inside torch) ...: 0.85 GiB" in row["citation"]
    logged = 0.85 * GiB
    spec = resolve("gpt-oss-120b")
    parts = {
        t.name: t for t in trtllm_profile.terms(spec, tp=1, max_num_tokens=8192, max_seq_len=131_072, batched_basis="")
    }
    act = parts["activations"]
    assert abs(act.low - logged) / logged < 0.05 and act.high > logged
    assert ACT_FACTOR[1] * activations(spec, 1, 8192) < logged / 2


def test_each_term_says_whether_it_is_computed_or_heuristic() -> None:
    spec = resolve(SMOLLM)
    parts = trtllm_profile.terms(spec, tp=1, max_num_tokens=8192, max_seq_len=2049, batched_basis="")
    assert [(t.name, t.how) for t in parts] == [
        ("activations", "heuristic"),
        ("logits", "computed"),
        ("CUDA graphs", "heuristic"),
        ("non-torch", "heuristic"),
    ]
    assert len(trtllm_profile.GRAPH_SIZES) == 34  # CudaGraphConfig: 1-31, 32, 64, 128
    # the plan's runtime line carries the same words, and its high end is what the plan reserves
    plan = plan_deployment(
        PlanRequest(model=SMOLLM, gpu_memory=12 * GiB, engine="trtllm@1.2.1", context=Tokens("2049"))
    )
    line = next(x for x in plan.ledger if x.label == "runtime overhead")
    assert line.provenance == "heuristic"
    assert "KvCacheCreator" in line.basis and "logits computed" in line.basis and "4 dummy requests" in line.basis
    overhead = trtllm_profile.profiled_overhead(parts)
    assert line.bytes == overhead.high == sum(t.high for t in parts if t.name != "logits")


def test_the_estimation_cache_is_the_dummy_requests_before_1_3_and_the_graph_warmup_and_batch_after() -> None:
    """_util.py _get_token_num_for_estimation: 1.1-era, the dummy requests' blocks; 2026 main, the largest of those, a
    max_seq_len request beside the CUDA-graph batch, and one block per max_batch_size slot, cut to fraction x free.
    Held to both logs that print the cache the pass ran in."""
    # 1.1.0rc3, DGX Spark (max_seq_len 131,072, max_batch_size 64, overlap scheduler off): 'Allocated 0.56 GiB for
    # max tokens in paged KV cache (8224)'; main's rule would have made it 4,160 blocks
    spark = ROWS["gpt-oss-120b-dgx-spark-1.1.0rc3"]
    requests = trtllm_profile.dummy_requests(8192, 131_072)
    old = trtllm_profile.estimation_kv_tokens(
        requests, max_seq_len=131_072, max_batch_size=64, version="1.1.0", overlap=False
    )
    assert old == 8224 and f"{old * int(spark['kv_size_per_token']) / GiB:.2f}" == spark["tmp_kv_gib"]
    new = trtllm_profile.estimation_kv_tokens(requests, max_seq_len=131_072, max_batch_size=64, version="1.3.0")
    assert new == (4097 + 64 - 1) * 32
    # 1.3.0rc15, Llama-3.1-8B (131,072 B per token at bf16, half at fp8; max_seq_len 131,072, max_batch_size 2,048):
    # 'Allocated 8.01 GiB for max tokens in paged KV cache' before the 6.35 GiB pool. The dummy requests' 8,224 tokens
    # would be 1.00 GiB (0.50 at fp8); main's 4,224 blocks are 16.5 GiB (8.25 at fp8), both above 8.01: the cache
    # was cut to fraction x free, 8.01 GiB, which the rule returns when given that budget
    llama = ROWS["llama-3.1-8b-nvfp4-rtx5070ti-wsl2-1.3.0rc15"]
    logged = float(llama["tmp_kv_gib"]) * GiB
    uncut = trtllm_profile.estimation_kv_tokens(requests, max_seq_len=131_072, max_batch_size=2048, version="1.3.0")
    assert uncut == 4224 * 32
    for per_token in (131_072, 65_536):
        assert trtllm_profile.temporary_kv_tokens(requests) * per_token < logged / 2
        assert uncut * per_token > logged
        budget = int(logged) // per_token
        cut = trtllm_profile.estimation_kv_tokens(
            requests, max_seq_len=131_072, max_batch_size=2048, version="1.3.0", budget_tokens=budget
        )
        assert cut == budget // 32 * 32 and f"{cut * per_token / GiB:.2f}" == llama["tmp_kv_gib"]
    # 1.2 keeps the older rule (its logs print no estimation cache)
    assert trtllm_profile.estimation_kv_tokens(requests, max_seq_len=131_072, max_batch_size=2048, version="1.2.1") == (
        trtllm_profile.temporary_kv_tokens(requests)
    )
