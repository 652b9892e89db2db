"""vLLM's vision-encoder dummy pass (engines/vllm_encoder.py), held to what vLLM logged and to its code's arithmetic."""

from __future__ import annotations

from pathlib import Path

from kvbudget.engines.vllm_encoder import encoder_pass
from kvbudget.model.sources import resolve

CONFIGS = Path(__file__).parents[1] / "data" / "memory" / "configs"


def _pass(model: str, version: str, context: int, batched: int, tp: int = 1):  # type: ignore[no-untyped-def]
    spec = resolve(model)
    hidden = spec.config["hidden_size"]
    assert isinstance(hidden, int)
    return encoder_pass(spec.config, spec.model_type, hidden, version=version, context=context, batched=batched, tp=tp)


def test_qwen25_vl_at_128000_tokens_profiles_the_logged_14_frame_video() -> None:
    # vLLM 0.23.0 on an A100 (batch 2,048): "Encoder cache will be initialized with a budget of 114688 tokens, and
    # profiled with 1 video items": 14 frames -> 7 temporal pairs x 16,384 merged tokens (max_pixels 12,845,056 / 28^2)
    p = _pass(str(CONFIGS / "Qwen2.5-VL-7B-Instruct"), "0.23.0", 128000, 2048)
    assert p is not None
    assert (p.modality, p.budget, p.items, p.tokens_per_item) == ("video", 114688, 1, 114688)
    assert p.patches == 114688 * 4
    # a block's MLP stage, (5 x 1280 + 3 x 3420) x 2 B per patch with the native norm (3 x 1280 in place), is above
    # the attention's 11 x 1280 x 2 B; plus the bf16 pixels (3 x 2 x 14 x 14 per patch) and two copies of the rotary
    # cos and sin (head_dim 80 / 2 = 40 values each)
    pixels = p.patches * 1176 * 2
    rotary = p.patches * 2 * 40 * 2
    assert p.peak_high == pixels + 2 * rotary + p.patches * (5 * 1280 + 3 * 3420) * 2
    assert p.peak_low == pixels + 2 * rotary + p.patches * (3 * 1280 + 3 * 3420) * 2
    assert 3 * 1280 + 3 * 3420 > 11 * 1280
    # held through the text pass: the pixels, one rotary copy and the video's 114,688 outputs of width 3,584
    assert p.held == pixels + rotary + 114688 * 3584 * 2


def test_a_short_context_profiles_one_image_sized_item() -> None:
    # at 4,096 tokens no two-frame pair fits: one frame, padded to the temporal patch, the size of the largest image
    p = _pass(str(CONFIGS / "Qwen2.5-VL-7B-Instruct"), "0.23.0", 4096, 8192)
    assert p is not None
    assert (p.tokens_per_item, p.budget, p.items) == (16384, 16384, 1)


def test_gemma3_counts_the_contiguous_placeholder_in_0_11_and_the_embeddings_later() -> None:
    # vLLM 0.11.0 (ROCm, batch 8,192): "budget of 8192 tokens, and profiled with 31 image items": 8,192 // 260
    p = _pass("gemma-3-27b-it", "0.11.0", 4096, 8192)
    assert p is not None
    assert (p.budget, p.items, p.tokens_per_item, p.patches) == (8192, 31, 260, 31 * 64 * 64)
    # 0.11.0 pads each cached output to (budget, hidden): 31 x 8,192 x 5,376 x 2 B, plus the bf16 pixels
    assert p.held == 31 * 3 * 896 * 896 * 2 + 31 * 8192 * 5376 * 2
    # 0.14.1 counts the 256 embeddings (get_num_embeds) and does not pad
    later = _pass("gemma-3-27b-it", "0.23.0", 4096, 8192)
    assert later is not None
    assert (later.items, later.tokens_per_item) == (32, 256)
    assert later.held == 32 * 3 * 896 * 896 * 2 + 32 * 256 * 5376 * 2


def test_versions_and_towers_without_a_rule_are_not_planned() -> None:
    assert _pass(str(CONFIGS / "Qwen2.5-VL-7B-Instruct"), "0.10.1", 4096, 2048) is None  # dummy data from the batch
    assert _pass("llama-3.1-8b", "0.23.0", 4096, 2048) is None  # no vision_config


def test_tensor_parallel_shards_the_towers_wide_tensors() -> None:
    one = _pass(str(CONFIGS / "Qwen2-VL-7B-Instruct"), "0.23.0", 4096, 2048)
    two = _pass(str(CONFIGS / "Qwen2-VL-7B-Instruct"), "0.23.0", 4096, 2048, tp=2)
    assert one is not None and two is not None
    assert two.peak_high < one.peak_high
    assert two.held == one.held  # inputs and outputs are whole on every rank
