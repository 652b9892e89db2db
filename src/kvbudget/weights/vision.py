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


def vision_parts(config: Mapping[str, object], text_hidden: int, model_type: str) -> tuple[list[Part], str]:
    """The vision tower (and projector) parts of a VLM config, and a note ("" when there is no vision_config)."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return [], ""
    kind = vision.get("model_type")
    if kind != SIGLIP:
        return [], f"vision tower ({kind or 'no model_type'}) not counted: no rule for it; pass --weights-size"
    params = _siglip(vision)
    if model_type == "gemma3_text":
        params += _int(vision, "hidden_size", 768) * (text_hidden + 1)  # Gemma3MultiModalProjector
    note = f"vision tower (SigLIP) and projector: {params:,} parameters"
    return [Part(VISION, "vision", params, 0)], note
