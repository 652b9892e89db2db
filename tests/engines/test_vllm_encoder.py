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


def test_pixtral_profiles_two_1540_images_with_their_row_breaks_in_0_11() -> None:
    # Mistral-Small-3.1/3.2's Pixtral (patch 14, image 1540, 2x2 merge): (1540 - 1) // 28 + 1 = 55 merged tokens a
    # side, each row closed by [IMG_BREAK] / [IMG_END]: 55 x 56 = 3,080 contiguous tokens in 0.11.0; 8,192 // 3,080 = 2
    p = _pass("mistral-small-3.2-24b", "0.11.0", 16000, 8192)
    assert p is not None
    assert (p.modality, p.budget, p.items, p.tokens_per_item) == ("image", 8192, 2, 3080)
    assert p.patches == 2 * 110 * 110  # 12,100 patches of 14 per image through the tower
    pixels = 2 * 3 * 1540 * 1540 * 2
    # the feed-forward stage, 4 x 1024 + 3 x 4096, is above the rotary stage's 15 x 1024; the high end adds the
    # patch_conv and ln_pre outputs (2 x 1024) and the gathered complex64 rotary table (32 x 8 B per patch)
    assert 4 * 1024 + 3 * 4096 > 15 * 1024
    assert p.peak_low == pixels + 24200 * (4 * 1024 + 3 * 4096) * 2
    assert p.peak_high == pixels + 24200 * ((6 * 1024 + 3 * 4096) * 2 + 32 * 8)
    # 0.11.0 pads each of the 2 outputs (3,025 rows of the text width 5,120) to the 8,192-token budget
    assert p.held == pixels + 2 * 8192 * 5120 * 2


def test_pixtral_pads_to_the_items_tokens_in_0_12_and_counts_embeddings_from_0_14() -> None:
    p12 = _pass("mistral-small-3.1-24b", "0.12.0", 16000, 8192)
    assert p12 is not None
    assert (p12.items, p12.tokens_per_item) == (2, 3080)
    assert p12.held == 2 * 3 * 1540 * 1540 * 2 + 2 * 3080 * 5120 * 2  # "encoder_output_shape[0] < max_mm_tokens"
    p14 = _pass("mistral-small-3.1-24b", "0.14.1", 16000, 8192)
    assert p14 is not None
    assert (p14.items, p14.tokens_per_item) == (2, 55 * 55)
    assert p14.held == 2 * 3 * 1540 * 1540 * 2 + 2 * 3025 * 5120 * 2


def test_llama4_profiles_16_plus_1_tiles_per_image_sharded_over_tp() -> None:
    # Llama-4-Scout (image 336, patch 14, pixel shuffle 0.5): 576 patches / 4 = 144 embeddings a tile; the dummy
    # image is 16 tiles tall (max_patches) + the global tile: 16 x (144 + 1) + 1 + 1 + 144 + 1 = 2,467 contiguous
    # tokens (17 x 144 = 2,448 embeddings); 8,192 // 2,467 = 3 images of 17 tiles x 577 positions (+ class token)
    p = _pass("llama-4-scout-17b-16e-instruct", "0.12.0", 8388608, 8192, tp=8)
    assert p is not None
    assert (p.budget, p.items, p.tokens_per_item) == (8192, 3, 2467)
    assert p.patches == 3 * 17 * 577 == 29427
    pixels = 3 * 17 * 3 * 336 * 336 * 2
    # at TP 8 the o_proj stage (3 x 1408 + 7 x 1408 / 8, + 1408 for the all-reduce's output) and the MLP
    # (3 x 1408 + 2 x 5632 / 8 + 1408) are above the rope stage (2 x 1408 + 13 x 1408 / 8)
    high = max(2 * 1408 + 13 * 1408 // 8, 3 * 1408 + 7 * 1408 // 8 + 1408, 3 * 1408 + 2 * 5632 // 8 + 1408)
    low = max(2 * 1408 + 13 * 1408 // 8, 3 * 1408 + 7 * 1408 // 8, 3 * 1408 + 2 * 5632 // 8)
    assert (high, low) == (7040, 5632)
    assert p.peak_high == pixels + 29427 * 7040 * 2
    assert p.peak_low == pixels + 29427 * 5632 * 2
    # 0.12.0 pads each of the 3 outputs (2,448 rows of width 5,120) to the item's 2,467 tokens
    assert p.held == pixels + 3 * 2467 * 5120 * 2
    one = _pass("llama-4-scout-17b-16e-instruct", "0.12.0", 8388608, 8192, tp=1)
    assert one is not None
    assert one.peak_high == pixels + 29427 * max(15 * 1408, 3 * 1408 + 2 * 5632) * 2  # no all-reduce at TP 1
    assert one.held == p.held


def test_the_0_12_padding_reaches_gemma3s_wrapper_tokens() -> None:
    # 0.12.0 pads each of Gemma 3's 256-row outputs to its 260 contiguous tokens (0.11.0: to the 8,192 budget)
    p = _pass("gemma-3-27b-it", "0.12.0", 4096, 8192)
    assert p is not None
    assert (p.items, p.tokens_per_item) == (31, 260)
    assert p.held == 31 * 3 * 896 * 896 * 2 + 31 * 260 * 5376 * 2
