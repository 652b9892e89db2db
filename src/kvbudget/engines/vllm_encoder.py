"""The vision encoder's dummy pass of vLLM's profile run, per GPU, from the model's ``vision_config``.

vLLM V1's ``profile_run`` (v1/worker/gpu_model_runner.py, read in 0.11.0, 0.23.0 and 0.33.0) first pushes a batch of
dummy multimodal items of the largest size through the vision tower and keeps their outputs in the encoder cache,
then runs the text model's dummy batch and sampler; the batch inputs (``batched_dummy_mm_inputs``, a local of
profile_run) and the cached outputs stay referenced until the text pass ends. So the torch peak is

    max(encoder forward peak, held + text peak),  held = dummy pixels + encoder outputs [+ rotary tables]

* The budget: ``compute_mm_encoder_budget`` (v1/core/encoder_cache_manager.py): max(max_num_batched_tokens, the
  largest item's tokens) (SchedulerConfig sets max_num_encoder_input_tokens = encoder_cache_size =
  max_num_batched_tokens: config/scheduler.py). Items: budget // tokens per item, at least 1 (MultiModalBudget
  .get_max_items: v1/worker/utils.py 0.11.0, multimodal/encoder_budget.py 0.23.0; with chunked prefill, V1's default,
  the decoder bound max_num_seqs x items per prompt is above it). The modality with the most tokens is profiled.
* Tokens per item: vLLM 0.10.1-0.11.0 count an item's contiguous placeholder (``get_mm_max_contiguous_tokens``,
  multimodal/profiling.py: Gemma 3's 256 soft tokens + "\\n\\n", <start_of_image>, <end_of_image>, "\\n\\n" = 260, so
  the logged 31 items of an 8,192 budget); 0.14.1 and 0.23.0 count the embeddings only (``get_num_embeds``: 256).
* 0.11.0's profile_run pads each dummy output to (budget, hidden) before caching it ("encoder_output_shape[0] <
  encoder_budget"); 0.12.0 pads it to the item's tokens instead ("encoder_output_shape[0] <
  max_mm_tokens_per_item": the contiguous placeholder, so Pixtral's and Llama 4's separators count as rows);
  0.10.1 and 0.14.1 do not pad.
* A ``--limit-mm-per-prompt`` of 0 for every modality (a text-only deployment) or ``--skip-mm-profiling`` skips the
  pass (profile_run); ``--mm-processor-kwargs`` max_pixels shrinks the Qwen items. The plan takes the defaults.

The tower's forward peak is the tensors one block holds at its largest moment, read from vLLM's code (below), for an
attention whose memory is linear in the sequence (FlashAttention varlen for the Qwen ViT, "Using
AttentionBackendEnum.FLASH_ATTN for MMEncoderAttention" in the 0.23.0 log; SigLIP's MultiHeadAttention): an eager
O(seq^2) attention is not modelled. vLLM 0.8-0.10 (the dummy video built from max_num_tokens in 0.10.1, not
max_model_len) and V0 are not planned here: their plans say the pass is not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvbudget.engines.base import version_tuple
from kvbudget.weights.vision import LLAMA4_VISION, PIXTRAL, QWEN_VIT, SIGLIP

V1_ENCODER_SINCE = (0, 11)  # the versions whose dummy pass is read and planned (module docstring)
# 0.11.0 pads outputs to the budget, 0.12.0 to the item's tokens; 0.10.1 and 0.14.1 do not (0.11.1, 0.13 unread: taken
# as the release before them)
PADDED_TO_BUDGET = ((0, 11), (0, 12))
PADDED_TO_ITEM = ((0, 12), (0, 14))
EMBEDS_ONLY_SINCE = (0, 14)  # tokens per item: the contiguous placeholder before (0.11.0), the embeddings (0.14.1)
# Qwen2-VL-7B-Instruct / Qwen2.5-VL-7B-Instruct preprocessor_config.json "max_pixels": 12845056 (vLLM reads
# image_processor.size["longest_edge"]); qwen2_vl.py _MAX_FRAMES_PER_VIDEO = 14 (0.11.0 and 0.23.0)
QWEN_MAX_PIXELS = 12_845_056
QWEN_MAX_FRAMES = 14
GEMMA3_IMAGE_WRAP = 4  # "\n\n<start_of_image>" ... "<end_of_image>\n\n" around the soft tokens (full_image_sequence)
DTYPE = 2  # the processor casts pixels to the model dtype (0.11.0 multimodal/processing.py, 0.23.0 context.py)


@dataclass(frozen=True)
class EncoderPass:
    """The dummy multimodal batch vLLM profiles and the bytes it holds, per GPU."""

    modality: str
    items: int
    tokens_per_item: int
    budget: int
    patches: int  # positions through the tower, all items
    peak_low: int  # the encoder forward's torch peak (inputs, block activations, rotary tables)
    peak_high: int
    held: int  # held through the text dummy pass: pixels, cached outputs [padded], rotary tables
    basis: str


def _int(cfg: Mapping[str, object], key: str, default: int) -> int:
    value = cfg.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _items(budget: int, per_item: int) -> int:
    return max(1, budget // per_item)  # MultiModalBudget.get_max_items


def _qwen(
    v: Mapping[str, object],
    text_hidden: int,
    gated: bool,
    version: tuple[int, ...],
    context: int,
    batched: int,
    tp: int,
) -> EncoderPass:
    """Qwen2-VL's / Qwen2.5-VL's ViT (vLLM qwen2_vl.py, qwen2_5_vl.py).

    Items (qwen2_vl.py Qwen2VLProcessingInfo): the largest image is max_pixels // (patch x merge)^2 = 16,384 merged
    tokens (65,536 patches per temporal pair); the dummy video has the most frames up to 14 whose tokens fit
    max_model_len, frames padded to the temporal patch (2): grid_t = ceil(frames / 2), tokens = grid_t x 16,384.

    Per patch and block, at TP t (qkv, MLP widths sharded), 2 B each (0.23.0 Qwen2_5_VisionBlock.forward): the
    attention holds the block input, norm1's output (an argument, alive during the call), qkv (3W/t), the contiguous
    q/k copy and its rotated copy (2W/t each; Qwen2-VL: the cat and the rotated copy), the context (W/t) and proj's
    output: 2W + 9W/t. The MLP holds the block input, the attention output, norm2's two outputs (the native
    fused_add_rms_norm returns new tensors, "rms_norm=['native']" in the 0.23.0 log; the CUDA op writes in place:
    two fewer), gate_up (2I/t), the SiLU-and-mul output (I/t) and down_proj's output: 5W + 3I/t (low 3W + 3I/t).
    Qwen2-VL's MLP (fc1, QuickGELU, fc2): the input, norm2's output, fc1 and the activation: 2W + 2I/t."""
    width = _int(v, "hidden_size" if gated else "embed_dim", 1280)
    inter = _int(v, "intermediate_size", 3420) if gated else width * _int(v, "mlp_ratio", 4)
    out = _int(v, "out_hidden_size", text_hidden) if gated else _int(v, "hidden_size", text_hidden)
    heads = _int(v, "num_heads", 16)
    patch, merge = _int(v, "patch_size", 14), _int(v, "spatial_merge_size", 2)
    temporal, channels = _int(v, "temporal_patch_size", 2), _int(v, "in_chans", _int(v, "in_channels", 3))
    unit = patch * merge
    frame_tokens = QWEN_MAX_PIXELS // (unit * unit)  # 16,384 for patch 14, merge 2
    frames = max([f for f in range(1, QWEN_MAX_FRAMES + 1) if -(-f // temporal) * frame_tokens <= context] or [1])
    grid_t = -(-frames // temporal)
    per_item = grid_t * frame_tokens  # video; an image (grid_t 1) is never larger
    modality = "video" if grid_t > 1 else "image or video"  # one frame pads to an image's two: the same tensors
    budget = max(batched, per_item)
    items = _items(budget, per_item)
    patches = items * per_item * merge * merge
    pixels = patches * channels * temporal * patch * patch * DTYPE
    # rotary cos and sin of head_dim / 2 per patch (partial_rotary_factor 0.5), the lru-cached copy and the batch's
    # torch.cat copy (0.23.0 Qwen2_5_VisionTransformer.get_rope_by_thw, prepare_encoder_metadata)
    rotary = patches * 2 * (width // heads // 2) * DTYPE
    attention = 2 * width + 9 * width // tp
    if gated:
        mlp_high, mlp_low = 5 * width + 3 * inter // tp, 3 * width + 3 * inter // tp
    else:
        mlp_high = mlp_low = 2 * width + 2 * inter // tp
    high = pixels + 2 * rotary + patches * max(attention, mlp_high) * DTYPE
    low = pixels + 2 * rotary + patches * max(attention, mlp_low) * DTYPE
    outputs = items * per_item * out * DTYPE
    held = pixels + rotary + _padded(outputs, items, budget, out, version)
    what = "Qwen2.5-VL" if gated else "Qwen2-VL"
    basis = (
        f"{what} ViT over {items} dummy {modality} item(s) of {per_item:,} tokens ({patches:,} patches of width "
        f"{width}, MLP {inter}; {frames} frame(s) at max_pixels {QWEN_MAX_PIXELS:,})"
    )
    return EncoderPass(modality, items, per_item, budget, patches, low, high, held, basis)


def _padded(
    outputs: int, items: int, budget: int, hidden: int, version: tuple[int, ...], per_item: int | None = None
) -> int:
    """The cached outputs (gpu_model_runner.py profile_run): vLLM 0.11.0 pads each to (budget, hidden), 0.12.0 to
    (the item's tokens, hidden) where the output has fewer rows (``per_item``: None where it never has)."""
    if PADDED_TO_BUDGET[0] <= version[:2] < PADDED_TO_BUDGET[1]:
        return items * budget * hidden * DTYPE
    if per_item is not None and PADDED_TO_ITEM[0] <= version[:2] < PADDED_TO_ITEM[1]:
        return max(outputs, items * per_item * hidden * DTYPE)
    return outputs


def _siglip_gemma3(
    v: Mapping[str, object],
    cfg: Mapping[str, object],
    text_hidden: int,
    version: tuple[int, ...],
    batched: int,
    tp: int,
) -> EncoderPass:
    """Gemma 3's SigLIP tower (vLLM siglip.py, gemma3_mm.py; pan-and-scan off, the processor's default).

    One image is (image_size / patch)^2 patches and mm_tokens_per_image (256) soft tokens after the projector's
    pooling. Per patch and layer, 2 B each (0.11.0 SiglipEncoderLayer.forward, SiglipMLP.forward): the attention
    holds the residual, layer_norm1's output, qkv (3W/t), the attention output and out_proj's: 3W + 4W/t; the MLP
    the residual, layer_norm2's output, fc1 and the activation: 2W + 2I/t."""
    width, inter = _int(v, "hidden_size", 1152), _int(v, "intermediate_size", 4304)
    image, patch, channels = _int(v, "image_size", 896), _int(v, "patch_size", 14), _int(v, "num_channels", 3)
    soft = _int(cfg, "mm_tokens_per_image", 256)  # Gemma3Config default
    per_item = soft + (GEMMA3_IMAGE_WRAP if version[:2] < EMBEDS_ONLY_SINCE else 0)
    budget = max(batched, per_item)
    items = _items(budget, per_item)
    patches = items * (image // patch) ** 2
    pixels = items * channels * image * image * DTYPE
    block = max(3 * width + 4 * width // tp, 2 * width + 2 * inter // tp)
    peak = pixels + patches * block * DTYPE
    held = pixels + _padded(items * soft * text_hidden * DTYPE, items, budget, text_hidden, version, per_item)
    basis = f"SigLIP over {items} dummy images of {per_item} tokens ({patches:,} patches of width {width}, MLP {inter})"
    return EncoderPass("image", items, per_item, budget, patches, peak, peak, held, basis)


def _pixtral(
    v: Mapping[str, object],
    cfg: Mapping[str, object],
    text_hidden: int,
    version: tuple[int, ...],
    batched: int,
) -> EncoderPass:
    """Pixtral (Mistral-Small-3.1/3.2; vLLM 0.11.0 and 0.12.0 pixtral.py, the same code in both).

    The dummy image is the largest, image_size square (PixtralProcessingInfo.get_image_size_with_most_features:
    mistral_common's max_image_size; Mistral3's HF path: vision_config.image_size). Its tokens: a grid of
    (image - 1) // (patch x merge) + 1 merged tokens a side (transformers image_processing_pixtral.py
    _num_image_tokens, which vLLM's PixtralHFEncoderInfo calls; mistral_common's _image_to_num_tokens alike), each row
    closed by [IMG_BREAK] (the last by [IMG_END]): rows x (cols + 1) contiguous tokens (0.11.0-0.13), rows x cols
    embeddings (0.14.1). 1540 / 14 with the 2x2 merge: 55 x 56 = 3,080 tokens, 3,025 embeddings, 110^2 = 12,100
    patches through the tower.

    The tower as --config-format mistral loads it (VisionTransformer: plain nn.Linear, whole on every rank;
    xformers' memory_efficient_attention, a dependency of 0.11.0 on x86-64 Linux, so the attention is linear in the
    patches). Per patch and block, 2 B each: the attention holds the block input, attention_norm's output, q, k, v,
    then apply_rotary_emb_vit's fp32 copies of q and k (2W each), their complex64 products (2W each) and the bf16
    results (W each): 15W; the feed-forward holds the block input, the attention output r (still referenced),
    h = x + r, ffn_norm's output and silu(w1), w3 and their product: 4W + 3I. The high end adds the
    patch_conv outputs and ln_pre's output that VisionTransformer.forward keeps referenced (2W) and the gathered
    rotary table (head_dim / 2 complex64 per patch). Mistral3's HF-format tower (PixtralHFVisionModel) shards the
    linears over TP; the whole-tower figure is the larger."""
    width, inter = _int(v, "hidden_size", 1024), _int(v, "intermediate_size", 4096)
    heads = _int(v, "num_attention_heads", 16)
    image, patch, channels = _int(v, "image_size", 1540), _int(v, "patch_size", 14), _int(v, "num_channels", 3)
    merge = _int(cfg, "spatial_merge_size", 2)
    side = (image - 1) // (patch * merge) + 1  # merged tokens a side
    embeds = side * side
    per_item = embeds if version[:2] >= EMBEDS_ONLY_SINCE else side * (side + 1)
    budget = max(batched, per_item)
    items = _items(budget, per_item)
    patches = items * (side * merge) ** 2
    pixels = items * channels * image * image * DTYPE
    block = max(15 * width, 4 * width + 3 * inter)
    rotary = (width // heads // 2) * 8  # complex64 per patch
    low = pixels + patches * block * DTYPE
    high = pixels + patches * ((2 * width + block) * DTYPE + rotary)
    held = pixels + _padded(items * embeds * text_hidden * DTYPE, items, budget, text_hidden, version, per_item)
    basis = (
        f"Pixtral over {items} dummy image(s) of {per_item:,} tokens ({side} x {side} merged, {patches:,} patches of "
        f"width {width}, MLP {inter})"
    )
    return EncoderPass("image", items, per_item, budget, patches, low, high, held, basis)


LLAMA4_MAX_TILES = (
    16  # transformers image_processing_llama4_fast.py max_patches default ("up to 17 tiles" with the global)
)


def _llama4(
    v: Mapping[str, object],
    text_hidden: int,
    version: tuple[int, ...],
    batched: int,
    tp: int,
) -> EncoderPass:
    """Llama 4's vision model (vLLM 0.12.0 mllama4.py; the rope in layers/rotary_embedding/llama4_vision_rope.py).

    The dummy image is max_patches (16) tiles tall and one wide (Mllama4ProcessingInfo
    .get_image_size_with_most_features, "h:w = 16:1"): aspect ratio (16, 1), so 16 tiles + the global one = 17 tiles
    of image_size^2 (patches_per_image, Mllama4MultiModalProcessor._call_hf_processor). Each tile gives
    (image // patch)^2 x pixel_shuffle_ratio^2 = 144 embeddings (get_patch_per_chunk); the placeholder
    (transformers processing_llama4.py _prompt_split_image): <|image_start|>, per tile row the row's tiles of 144
    <|patch|> (an x separator between tiles) and a <|tile_y_separator|>, then <|image|>, the global tile's 144 and
    <|image_end|>: 16 x 145 + 147 = 2,467 contiguous tokens, 17 x 144 = 2,448 embeddings. Each tile runs
    (image // patch)^2 + 1 positions (the class token) through the tower.

    Per position and layer at TP t (mm_encoder_tp_mode "weights", the default: qkv, fc1 and fc2 sharded), 2 B each
    (Llama4VisionEncoderLayer.forward): the attention holds the residual, input_layernorm's output, qkv (3W/t), the
    rope's fp32 copies of q and k, their complex64 products and the bf16 results (10W/t): 2W + 13W/t; then the
    attention output and its contiguous copy (2W/t) and o_proj's output (W, another W for the all-reduce's output
    at t > 1, the high end): 3W + 7W/t; the MLP holds the residual, post_attention_layernorm's output, fc1 and GELU
    (2I/t) and fc2's output (W, + W reduced): 3W + 2I/t. FlashAttention / SDPA over 577-position tiles: linear."""
    width, inter = _int(v, "hidden_size", 1408), _int(v, "intermediate_size", 5632)
    image, patch, channels = _int(v, "image_size", 336), _int(v, "patch_size", 14), _int(v, "num_channels", 3)
    ratio = v.get("pixel_shuffle_ratio", 0.5)
    shuffle = round(1 / ratio**2) if isinstance(ratio, float) and 0 < ratio <= 1 else 4
    grid = (image // patch) ** 2
    chunk = grid // shuffle  # 144
    tiles = LLAMA4_MAX_TILES + 1
    embeds = tiles * chunk
    contiguous = LLAMA4_MAX_TILES * (chunk + 1) + 1 + 1 + chunk + 1  # rows of one tile each: no x separators
    per_item = embeds if version[:2] >= EMBEDS_ONLY_SINCE else contiguous
    budget = max(batched, per_item)
    items = _items(budget, per_item)
    positions = items * tiles * (grid + 1)
    pixels = items * tiles * channels * image * image * DTYPE
    reduced = width if tp > 1 else 0
    low_block = max(2 * width + 13 * width // tp, 3 * width + 7 * width // tp, 3 * width + 2 * inter // tp)
    high_block = max(
        2 * width + 13 * width // tp, 3 * width + 7 * width // tp + reduced, 3 * width + 2 * inter // tp + reduced
    )
    low = pixels + positions * low_block * DTYPE
    high = pixels + positions * high_block * DTYPE
    held = pixels + _padded(items * embeds * text_hidden * DTYPE, items, budget, text_hidden, version, per_item)
    basis = (
        f"Llama 4 vision model over {items} dummy image(s) of {per_item:,} tokens ({tiles} tiles of {grid + 1} "
        f"positions, {positions:,} in all, width {width}, MLP {inter})"
    )
    return EncoderPass("image", items, per_item, budget, positions, low, high, held, basis)


def encoder_pass(
    config: Mapping[str, object],
    model_type: str,
    text_hidden: int,
    *,
    version: str,
    context: int,
    batched: int,
    tp: int,
) -> EncoderPass | None:
    """The dummy pass of a vision-language model on vLLM ``version`` (None: no vision_config, a tower without a rule,
    or a version not read; the caller says it is not counted)."""
    v = config.get("vision_config")
    ver = version_tuple(version)
    if not isinstance(v, Mapping) or ver[:2] < V1_ENCODER_SINCE:
        return None
    kind = v.get("model_type") or model_type
    if kind == SIGLIP and model_type == "gemma3_text":
        return _siglip_gemma3(v, config, text_hidden, ver, batched, tp)
    if isinstance(kind, str) and kind in QWEN_VIT:
        return _qwen(v, text_hidden, QWEN_VIT[kind], ver, context, batched, tp)
    if kind == PIXTRAL:
        return _pixtral(v, config, text_hidden, ver, batched)
    if kind == LLAMA4_VISION:
        return _llama4(v, text_hidden, ver, batched, tp)
    return None
