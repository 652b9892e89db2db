"""Family readers: each known ``model_type`` maps (through ``model.architectures``, the one registry) to a
function that places every layer's state.

Unknown architectures fail closed: the error names the model_type and the cache-shaping fields the
readers could not place. A dense reader also refuses configs carrying fields it does not understand
(a latent rank, a hybrid pattern, Mamba sizes) instead of silently applying the dense formula.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kvbudget.errors import ConfigError, MissingExtraError, UnknownArchitectureError
from kvbudget.model.families.attention import read_attention_model
from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import ModelSpec

# Fields that change what a layer caches. A dense reader that meets one of these fails closed.
_EXOTIC = (
    "kv_lora_rank",
    "hybrid_override_pattern",
    "layers_block_type",
    "attn_layer_period",
    "mamba_d_state",
    "ssm_state_size",
    "linear_num_key_heads",
    "cross_attention_layers",
    "full_attention_interval",
    "index_head_dim",
    "compress_ratios",
    "per_layer_config",
    "global_head_dim",
    "num_global_key_value_heads",
    "linear_attn_config",
    "conv_L_cache",
)
# Compiled on first use, by re's own cache: an answer that reads no such value does not pay for the pattern.
_CACHE_FIELD_PATTERN = r"(attn|attention|window|mamba|ssm|kv|layer_types|head|conv|chunk|linear|lora|state)"


def _fields_for_error(cfg: Mapping[str, object]) -> str:
    names = sorted(k for k in cfg if re.search(_CACHE_FIELD_PATTERN, k))
    return ", ".join(names) if names else "(no attention or state fields found)"


# Defaults of a transformers config class for fields a published config.json leaves out, where they size the model:
# google/gemma-3-{4b,12b,27b}-it write no vocab_size, max_position_embeddings, sliding_window_pattern nor
# layer_types in their text_config, which Gemma3TextConfig fills: vocab 262,208, 131,072 positions, and five sliding
# layers to one global (sliding_window_pattern 6: layer_types[i] sliding unless (i + 1) % 6 == 0), window 4,096 when
# unset (transformers models/gemma3/configuration_gemma3.py, 4.50 and 5.x; the catalog's Gemma 3 entries carry the
# same values). Without the pattern, every layer read as full attention: 5.3x the cache of gemma-3-27b-it.
CONFIG_DEFAULTS: dict[str, dict[str, object]] = {
    "gemma3_text": {
        "vocab_size": 262_208,
        "max_position_embeddings": 131_072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
}


def text_config(cfg: Mapping[str, object], where: str) -> tuple[Mapping[str, object], str]:
    """Multimodal configs keep the decoder in ``text_config``; return it and the top-level model_type."""
    top = cfg.get("model_type")
    inner = cfg.get("text_config")
    if isinstance(inner, Mapping):
        return inner, str(top) if isinstance(top, str) else ""
    if inner is not None:
        raise ConfigError(f"{where}: field 'text_config' must be an object")
    return cfg, ""


# the projector's fields a multimodal config keeps at its top level, beside vision_config: Mistral3Config's
# spatial_merge_size and multimodal_projector_bias (the Pixtral patch merger and projector, weights/vision.py),
# Gemma3Config's mm_tokens_per_image (engines/vllm_encoder.py)
PROJECTOR_KEYS = ("spatial_merge_size", "multimodal_projector_bias", "mm_tokens_per_image")


def _with_vision(decoder: Mapping[str, object], cfg: Mapping[str, object]) -> dict[str, object]:
    """The decoder's fields, with a multimodal config's ``vision_config`` (and its projector's top-level fields)
    beside them (their weights count too)."""
    out = dict(decoder)
    vision = cfg.get("vision_config")
    if decoder is not cfg and isinstance(vision, Mapping):
        out["vision_config"] = dict(vision)
        for key in PROJECTOR_KEYS:
            if key in cfg and key not in out:
                out[key] = cfg[key]
    return out


def read_spec(
    cfg: Mapping[str, object],
    *,
    name: str,
    source: str,
    where: str | None = None,
    notes: tuple[str, ...] = (),
) -> ModelSpec:
    """Turn a Hugging Face style config into a ModelSpec, or fail closed with a one-line error."""
    where = where or source
    decoder, top_type = text_config(cfg, where)
    model_type = decoder.get("model_type") or (top_type if decoder is cfg else None)
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{where}: field 'model_type' is missing; kvbudget needs it to know the architecture")
    from kvbudget.model.architectures import by_model_type

    nested = decoder is not cfg
    if model_type in CONFIG_DEFAULTS:  # what transformers' config class fills in for fields the file leaves out
        decoder = {**CONFIG_DEFAULTS[model_type], **decoder}
    fields = Fields(decoder, where)
    arch = by_model_type().get(model_type)
    reader = arch.config_reader if arch is not None else None
    if reader is None:
        from kvbudget.model.derive import derive_spec

        unknown = (
            f"{where}: model_type {model_type!r} is not an architecture kvbudget can read; "
            f"fields it could not place: {_fields_for_error(decoder)}"
        )
        try:  # the reference implementation's own cache, when transformers knows the type (model/derive.py)
            return derive_spec(cfg, name=name, source=source, where=where, notes=notes)
        except UnknownArchitectureError as exc:
            raise UnknownArchitectureError(f"{unknown}; {str(exc).removeprefix(where + ': ')}") from None
        except MissingExtraError as exc:
            raise UnknownArchitectureError(f"{unknown}; {str(exc).removeprefix(where + ': ')}") from None
    if reader is read_attention_model:
        exotic = [k for k in _EXOTIC if decoder.get(k) is not None]
        if model_type == "llama4_text":
            exotic = [k for k in exotic if k != "attention_chunk_size"]
        elif decoder.get("attention_chunk_size") is not None:
            exotic.append("attention_chunk_size")
        if exotic:
            raise UnknownArchitectureError(
                f"{where}: model_type {model_type!r} is read as plain attention, but the config has "
                f"fields that change the cache: {', '.join(exotic)}; refusing to guess"
            )
    layers = reader(fields, model_type)
    if not any(layer.states for layer in layers):
        raise ConfigError(
            f"{where}: no layer of this {model_type!r} config holds attention or recurrent state; "
            "check its layer pattern"
        )
    dtype = fields.dtype() or (Fields(cfg, where).dtype() if nested else None) or "bfloat16"
    max_pos = decoder.get("max_position_embeddings") or decoder.get("n_ctx")
    return ModelSpec(
        name=name,
        model_type=model_type,
        layers=layers,
        dtype=dtype,
        max_position_embeddings=int(max_pos) if isinstance(max_pos, int) and max_pos > 0 else None,
        source=source,
        notes=notes,
        config=_with_quantization(_with_vision(decoder, cfg), cfg, nested),
    )


def _with_quantization(decoder: Mapping[str, object], cfg: Mapping[str, object], nested: bool) -> dict[str, object]:
    """The decoder's fields, with the checkpoint's quantization section when it sits beside a ``text_config`` (a
    Gemma 3 or Llama 4 FP8 / AWQ checkpoint: vLLM reads it from the top level), so its weights are not counted at
    the dtype (weights/checkpoint.py QUANTIZATION_KEYS)."""
    config = dict(decoder)
    if nested:
        for key in ("quantization_config", "compression_config"):
            if cfg.get(key) is not None and key not in config:
                config[key] = cfg[key]
    return config
