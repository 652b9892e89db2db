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
* Pixtral (``pixtral``; Mistral-Small-3.1/3.2-24B's Mistral3ForConditionalGeneration, ``_pixtral``): transformers
  modeling_pixtral.py PixtralVisionModel (patch_conv Conv2d(channels, hidden, patch, patch) without bias, ln_pre
  RMSNorm; per layer attention_norm and ffn_norm RMSNorm, q/k/v/o_proj Linear(hidden, hidden) without bias, a gated
  MLP gate/up/down of intermediate_size without bias) and modeling_mistral3.py Mistral3MultiModalProjector (norm
  RMSNorm(vision hidden), patch_merger.merging_layer Linear(hidden x merge^2, hidden) without bias, linear_1
  Linear(hidden, text hidden) and linear_2 Linear(text hidden, text hidden), biased where
  multimodal_projector_bias); vLLM 0.11.0 pixtral.py (VisionTransformer, PatchMerger, Mistral3MultiModalProjector in
  mistral3.py) loads the same tensors. Mistral-Small-3.1-24B-Instruct-2503 / 3.2-24B-Instruct-2506: 24,011,361,280
  parameters published (keras-hub mistral3_presets.py), the decoder's 23,572,403,200 + the tower's 403,305,472 + the
  projector's 35,652,608.
* Llama 4's vision model (``llama4_vision_model``, ``_llama4_vision``): transformers modeling_llama4.py
  Llama4VisionModel (patch_embedding Llama4UnfoldConvolution Linear(channels x patch^2, hidden) without bias,
  class_embedding (hidden), positional_embedding_vlm ((image // patch)^2 + 1 rows), layernorm_pre/post LayerNorm;
  per layer q/k/v/o_proj Linear(hidden, hidden) with bias, fc1/fc2 of intermediate_size with bias, two LayerNorms;
  the vision_adapter's MLP2 fc1 Linear(intermediate, projector_input_dim) and fc2 Linear(projector_output_dim,
  projector_output_dim) without bias) and Llama4MultiModalProjector linear_1 Linear(vision_output_dim, text hidden)
  without bias; vLLM 0.12.0 mllama4.py builds the same. Llama-4-Scout-17B-16E-Instruct: 108,641,793,536 published,
  the decoder's 107,769,861,120 + the tower's 850,960,896 + the projector's 20,971,520.

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
PIXTRAL = "pixtral"
LLAMA4_VISION = "llama4_vision_model"


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


def _pixtral(v: Mapping[str, object], config: Mapping[str, object], text_hidden: int) -> int:
    """Pixtral's tower and Mistral 3's projector (module docstring). ``spatial_merge_size`` and
    ``multimodal_projector_bias`` sit at the top of Mistral3Config (defaults 2 and false), beside the vision_config."""
    # PixtralVisionConfig defaults (transformers configuration_pixtral.py): hidden 1024, intermediate 4096, 24 layers,
    # 3 channels, patch 16; Mistral3Config's default vision_config sets patch 14, image 1540
    hidden, inter = _int(v, "hidden_size", 1024), _int(v, "intermediate_size", 4096)
    layers, channels, patch = _int(v, "num_hidden_layers", 24), _int(v, "num_channels", 3), _int(v, "patch_size", 16)
    layer = 2 * hidden + 4 * hidden * hidden + 3 * hidden * inter
    tower = channels * patch * patch * hidden + hidden + layers * layer  # patch_conv, ln_pre, layers
    merge = _int(config, "spatial_merge_size", 2)
    bias = config.get("multimodal_projector_bias") is True
    projector = (
        hidden  # norm
        + hidden * merge * merge * hidden  # patch_merger.merging_layer
        + hidden * text_hidden  # linear_1
        + text_hidden * text_hidden  # linear_2
        + (2 * text_hidden if bias else 0)
    )
    return tower + projector


def _llama4_vision(v: Mapping[str, object], text_hidden: int) -> int:
    """Llama 4's vision model, pixel-shuffle adapter and projector (module docstring); Llama4VisionConfig defaults
    (transformers configuration_llama4.py): hidden 768, intermediate 5632, 34 layers, image 448, patch 14,
    vision_output_dim 7680, projector_input_dim and projector_output_dim 4096."""
    hidden, inter = _int(v, "hidden_size", 768), _int(v, "intermediate_size", 5632)
    layers, channels = _int(v, "num_hidden_layers", 34), _int(v, "num_channels", 3)
    image, patch = _int(v, "image_size", 448), _int(v, "patch_size", 14)
    proj_in, proj_out = _int(v, "projector_input_dim", 4096), _int(v, "projector_output_dim", 4096)
    output = _int(v, "vision_output_dim", 7680)
    embeddings = channels * patch * patch * hidden + hidden + ((image // patch) ** 2 + 1) * hidden
    layer = 4 * (hidden * hidden + hidden) + hidden * inter + inter + inter * hidden + hidden + 2 * 2 * hidden
    adapter = inter * proj_in + proj_out * proj_out  # vision_adapter.mlp fc1, fc2
    return embeddings + 2 * 2 * hidden + layers * layer + adapter + output * text_hidden


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
    elif kind == PIXTRAL:
        params, what = _pixtral(vision, config, text_hidden), "Pixtral"
    elif kind == LLAMA4_VISION:
        params, what = _llama4_vision(vision, text_hidden), "Llama 4 vision model"
    else:
        return [], f"vision tower ({kind or 'no model_type'}) not counted: no rule for it; pass --weights-size"
    note = f"vision tower ({what}) and projector: {params:,} parameters"
    return [Part(VISION, "vision", params, 0)], note
