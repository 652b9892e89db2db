"""Parameters of a vision-language model's vision tower and projector, from the ``vision_config`` beside the decoder.

A serving engine loads the whole checkpoint, vision tower included: vLLM's "Model loading took" counts it, and so
must the weights the plan subtracts before the KV pool. The decoder count (weights/params.py) covers the text model;
this module adds the tower where its ``vision_config`` names an encoder with a rule, and says so where it does not.

* SigLIP (``siglip_vision_model``; Gemma 3, PaliGemma): transformers modeling_siglip.py SiglipVisionEmbeddings
  (patch_embedding Conv2d(channels, hidden, patch, patch) with bias; position_embedding of (image // patch)^2 rows),
  per encoder layer q/k/v/out_proj Linear(hidden, hidden) with bias, layer_norm1/2 (weight and bias), fc1
  Linear(hidden, intermediate) and fc2 Linear(intermediate, hidden) with bias; post_layernorm; the attention-pooling
  head only where ``vision_use_head`` (Gemma 3 sets it false). vLLM builds the same tensors (siglip.py).
* Gemma 3's projector (modeling_gemma3.py Gemma3MultiModalProjector, vLLM gemma3_mm.py): mm_input_projection_weight
  (vision hidden x text hidden) and mm_soft_emb_norm (vision hidden).
* Qwen2-VL's and Qwen2.5-VL's ViT and patch merger (``_qwen_vit``): Qwen2-VL-7B-Instruct 8,291,375,616 and
  Qwen2.5-VL-7B-Instruct 8,292,166,656 parameters published, the Qwen2 decoder's 7,615,616,512 + 675,759,104 /
  676,550,144.

Checked against the published totals: gemma-3-4b-it 4,300,079,472 and gemma-3-27b-it 27,432,406,640 parameters
(the checkpoints' safetensors metadata on the Hub), the decoder's 3,880,263,168 / 27,009,346,304 + the tower's
416,866,032 + the projector. The tower is kept at 16 bits under weight quantization (the ``vision`` kind:
quantized VLM checkpoints list it in their ignore lists) and is read only when an image is encoded, so it counts
toward memory, not toward the bytes a decoded token reads (``active`` 0).
"""

from __future__ import annotations

from collections.abc import Mapping

from kvbudget.weights.blocks import Part

VISION = "vision tower"
SIGLIP = "siglip_vision_model"


def _int(cfg: Mapping[str, object], key: str, default: int) -> int:
    value = cfg.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _siglip(v: Mapping[str, object]) -> int:
    # SiglipVisionConfig defaults (transformers configuration_siglip.py): hidden 768, intermediate 3072, 12 layers,
    # 3 channels, image 224, patch 16, vision_use_head True
    hidden, inter = _int(v, "hidden_size", 768), _int(v, "intermediate_size", 3072)
    layers, channels = _int(v, "num_hidden_layers", 12), _int(v, "num_channels", 3)
    image, patch = _int(v, "image_size", 224), _int(v, "patch_size", 16)
    embeddings = channels * patch * patch * hidden + hidden + (image // patch) ** 2 * hidden
    layer = 4 * (hidden * hidden + hidden) + 2 * 2 * hidden + hidden * inter + inter + inter * hidden + hidden
    total = embeddings + layers * layer + 2 * hidden  # post_layernorm
    if v.get("vision_use_head", True) is not False:
        # SiglipMultiheadAttentionPoolingHead: probe (hidden), nn.MultiheadAttention (in_proj 3 x hidden^2 + 3 x hidden,
        # out_proj hidden^2 + hidden), layernorm (2 x hidden), an MLP (fc1, fc2 with biases)
        total += hidden + 4 * hidden * hidden + 4 * hidden + 2 * hidden + 2 * hidden * inter + inter + hidden
    return total


def _qwen_vit(v: Mapping[str, object], text_hidden: int, gated: bool) -> int:
    """Qwen2-VL's and Qwen2.5-VL's ViT with its patch merger (transformers modeling_qwen2_vl.py,
    modeling_qwen2_5_vl.py; vLLM qwen2_vl.py / qwen2_5_vl.py load the same tensors).

    PatchEmbed: Conv3d(channels, width, (temporal_patch, patch, patch)) without bias. Each block: qkv Linear(width,
    3 width) and proj Linear(width, width) with biases; Qwen2-VL: LayerNorm norm1/norm2 (weight and bias) and an MLP
    fc1/fc2 of width x mlp_ratio with biases; Qwen2.5-VL: RMSNorm norm1/norm2 and a gated MLP (gate, up, down) of
    intermediate_size with biases. PatchMerger: ln_q (LayerNorm, RMSNorm in 2.5) over width, then Linear(width x
    merge^2, width x merge^2) and Linear(width x merge^2, out) with biases, out = the text hidden size."""
    depth, channels = _int(v, "depth", 32), _int(v, "in_chans", _int(v, "in_channels", 3))
    patch, temporal, merge = (
        _int(v, "patch_size", 14),
        _int(v, "temporal_patch_size", 2),
        _int(v, "spatial_merge_size", 2),
    )
    if gated:  # Qwen2_5_VLVisionConfig: hidden_size is the ViT width, out_hidden_size the decoder's
        width, inter = _int(v, "hidden_size", 1280), _int(v, "intermediate_size", 3420)
        out = _int(v, "out_hidden_size", text_hidden)
        norm = width
        mlp = 3 * width * inter + 2 * inter + width
    else:  # Qwen2VLVisionConfig: embed_dim is the ViT width, hidden_size the decoder's
        width = _int(v, "embed_dim", 1280)
        inter = width * _int(v, "mlp_ratio", 4)
        out = _int(v, "hidden_size", text_hidden)
        norm = 2 * width
        mlp = 2 * width * inter + inter + width
    block = 2 * norm + (width * 3 * width + 3 * width) + (width * width + width) + mlp
    merged = width * merge * merge
    merger = norm + merged * merged + merged + merged * out + out
    return channels * temporal * patch * patch * width + depth * block + merger


QWEN_VIT = {"qwen2_vl": False, "qwen2_vl_text": False, "qwen2_5_vl": True, "qwen2_5_vl_text": True}  # gated MLP?


def vision_parts(config: Mapping[str, object], text_hidden: int, model_type: str) -> tuple[list[Part], str]:
    """The vision tower (and projector) parts of a VLM config, and a note ("" when there is no vision_config).
    Qwen2-VL's flat config.json names no model_type in its vision_config: the decoder's says which ViT it is."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return [], ""
    kind = vision.get("model_type") or model_type
    if kind == SIGLIP:
        params, what = _siglip(vision), "SigLIP"
        if model_type == "gemma3_text":
            params += _int(vision, "hidden_size", 768) * (text_hidden + 1)  # Gemma3MultiModalProjector
    elif isinstance(kind, str) and kind in QWEN_VIT:
        gated = QWEN_VIT[kind]
        params, what = _qwen_vit(vision, text_hidden, gated), "Qwen2.5-VL ViT" if gated else "Qwen2-VL ViT"
    else:
        return [], f"vision tower ({kind or 'no model_type'}) not counted: no rule for it; pass --weights-size"
    note = f"vision tower ({what}) and projector: {params:,} parameters"
    return [Part(VISION, "vision", params, 0)], note
