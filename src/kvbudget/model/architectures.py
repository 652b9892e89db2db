"""The one model-type registry: every architecture kvbudget reads, under every name a model file gives it.

An ``Architecture`` ties together the ``model_type`` values a ``config.json`` (or its ``text_config``)
names, the ``general.architecture`` values a GGUF names, and the reader of each: the config reader
places every layer's primitives from a Hugging Face config, the GGUF reader from llama.cpp's metadata
(with ``gguf_keys``, the cache-shaping keys it consumes; any other one makes it refuse the file). The
KV readers (``model.families.read_spec``, ``model.gguf.read_gguf_spec``), the parameter counter
(``weights.params``) and the coverage matrix (``kvbudget.coverage``) all look architectures up here, so
a new architecture is one entry.

``example`` names a catalog model of the architecture (the coverage matrix costs it on every engine);
``gguf_example`` is GGUF metadata with a real model's cache geometry, for architectures read from GGUF.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from kvbudget.model import gguf_readers as g
from kvbudget.model.families.attention import read_attention_model
from kvbudget.model.families.fields import Fields
from kvbudget.model.families.gemma4 import read_gemma4
from kvbudget.model.families.hybrid import (
    read_falcon_h1,
    read_granite_hybrid,
    read_jamba,
    read_mamba,
    read_nemotron_h,
    read_qwen3_next,
)
from kvbudget.model.families.latent import read_latent_model
from kvbudget.model.families.linear import read_kimi_linear, read_lfm2
from kvbudget.model.families.vision import read_mllama
from kvbudget.model.spec import LayerSpec

ConfigReader = Callable[[Fields, str], tuple[LayerSpec, ...]]


@dataclass(frozen=True)
class Architecture:
    """One architecture family and how each reader places its layers."""

    name: str
    model_types: tuple[str, ...]
    config_reader: ConfigReader | None
    gguf_archs: tuple[str, ...] = ()
    gguf_reader: g.GgufReader | None = None
    gguf_keys: frozenset[str] = frozenset()
    example: str = ""
    gguf_example: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)


def _dense(
    name: str, *types: str, gguf: tuple[str, ...] = (), keys: frozenset[str] = g.ATTN, example: str = ""
) -> Architecture:
    reader = g.read_attention if gguf else None
    return Architecture(name, types, read_attention_model, gguf, reader, keys if gguf else frozenset(), example)


_HYBRID_KEYS = g.ATTN | g.SSM
_DELTA_KEYS = _HYBRID_KEYS | {"full_attention_interval", "attention.recurrent_layers"}
_MLA_KEYS = g.ATTN | {"attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla"}

ARCHITECTURES: tuple[Architecture, ...] = (
    _dense("Llama", "llama", "mistral", "mixtral", gguf=("llama",), example="Llama-3.1-8B"),
    Architecture(
        "Llama 4",
        ("llama4_text",),
        read_attention_model,
        ("llama4",),
        g.read_attention,
        g.ATTN | g.SWA,
        "Llama-4-Scout-17B-16E-Instruct",
    ),
    _dense("Qwen2", "qwen2", gguf=("qwen2",), example="Qwen2.5-7B"),
    _dense("Qwen2 MoE", "qwen2_moe", gguf=("qwen2moe",)),
    _dense("Qwen3", "qwen3", gguf=("qwen3",), example="Qwen3-8B"),
    _dense("Qwen3 MoE", "qwen3_moe", gguf=("qwen3moe",), example="Qwen3-30B-A3B"),
    Architecture(
        "Qwen3-Next",
        ("qwen3_next",),
        read_qwen3_next,
        ("qwen3next",),
        g.read_hybrid,
        _DELTA_KEYS,
        "Qwen3-Next-80B-A3B",
    ),
    Architecture(
        "Qwen3.5",
        ("qwen3_5_text", "qwen3_5_moe_text"),
        read_qwen3_next,
        ("qwen35", "qwen35moe"),
        g.read_hybrid,
        _DELTA_KEYS,
        "Qwen3.5-35B-A3B",
    ),
    _dense("Phi-3", "phi3", example="Phi-4"),
    _dense("Command R", "cohere", example="c4ai-command-r-08-2024"),
    _dense("Command R7B", "cohere2", gguf=("cohere2",), keys=g.ATTN | g.SWA),
    _dense("GLM", "glm"),
    _dense("GLM-4", "glm4"),
    _dense(
        "GLM-4.5 MoE", "glm4_moe", "glm4_shared_moe", gguf=("glm4moe",), keys=g.ATTN | g.NEXTN, example="GLM-4.5-Air"
    ),
    Architecture(
        "GLM-5 (sparse MLA)",
        ("glm_moe_dsa",),
        read_latent_model,
        example="GLM-5",
    ),
    Architecture(
        "DeepSeek-V2/V3",
        ("deepseek_v2", "deepseek_v3", "kimi_k2"),
        read_latent_model,
        ("deepseek2",),
        g.read_deepseek2,
        _MLA_KEYS,
        "DeepSeek-V3",
    ),
    Architecture("DeepSeek-V3.2 (sparse MLA)", ("deepseek_v32",), read_latent_model, example="DeepSeek-V3.2"),
    Architecture("MiniCPM3", ("minicpm3",), read_latent_model, example="MiniCPM3-4B"),
    Architecture("Kimi Linear", ("kimi_linear",), read_kimi_linear, example="Kimi-Linear-48B-A3B-Instruct"),
    _dense("MiniMax-M2", "minimax_m2", example="MiniMax-M2"),
    _dense("Gemma", "gemma", gguf=("gemma",)),
    _dense("Gemma 2", "gemma2", gguf=("gemma2",), keys=g.ATTN | g.SWA, example="gemma-2-9b"),
    _dense("Gemma 3", "gemma3_text", gguf=("gemma3",), keys=g.ATTN | g.SWA, example="gemma-3-27b-it"),
    Architecture(
        "Gemma 3n",
        ("gemma3n_text",),
        read_attention_model,
        ("gemma3n",),
        g.read_gemma3n,
        g.ATTN | g.SWA | {"attention.shared_kv_layers"},
    ),
    Architecture("Gemma 4", ("gemma4_text",), read_gemma4, example="gemma-4-26B-A4B-it"),
    _dense("gpt-oss", "gpt_oss", gguf=("gpt-oss",), keys=g.ATTN | g.SWA, example="gpt-oss-20b"),
    _dense("OLMo", "olmo"),
    _dense("OLMo 2", "olmo2"),
    _dense("Granite", "granite"),
    _dense("Granite MoE", "granitemoe"),
    Architecture(
        "Granite 4 hybrid",
        ("granitemoehybrid",),
        read_granite_hybrid,
        ("granitehybrid",),
        g.read_hybrid,
        _HYBRID_KEYS,
    ),
    _dense("StarCoder2", "starcoder2"),
    _dense("ERNIE 4.5", "ernie4_5", "ernie4_5_moe"),
    _dense("Seed-OSS", "seed_oss"),
    _dense("Hunyuan dense", "hunyuan_v1_dense"),
    _dense("SmolLM3", "smollm3", gguf=("smollm3",), example="SmolLM3-3B"),
    _dense("EXAONE 4", "exaone4", gguf=("exaone4",), keys=g.ATTN | g.SWA),
    Architecture("Jamba", ("jamba",), read_jamba, ("jamba",), g.read_hybrid, _HYBRID_KEYS, "Jamba-v0.1"),
    Architecture(
        "Nemotron-H",
        ("nemotron_h",),
        read_nemotron_h,
        ("nemotron_h", "nemotron_h_moe"),
        g.read_nemotron_h_moe,
        _HYBRID_KEYS | g.NEXTN,
        "Nemotron-H-8B-Base-8K",
    ),
    Architecture(
        "Falcon-H1",
        ("falcon_h1",),
        read_falcon_h1,
        ("falcon-h1",),
        g.read_falcon_h1,
        _HYBRID_KEYS,
        "Falcon-H1-0.5B",
    ),
    Architecture(
        "Mamba",
        ("mamba", "mamba2"),
        read_mamba,
        ("mamba", "mamba2"),
        g.read_hybrid,
        _HYBRID_KEYS,
        "Mamba-Codestral-7B-v0.1",
    ),
    Architecture(
        "LFM2",
        ("lfm2", "lfm2_moe"),
        read_lfm2,
        ("lfm2",),
        g.read_lfm2,
        g.ATTN | {"shortconv.l_cache", "attention.sliding_window"},
        "LFM2-350M",
    ),
    Architecture("Llama 3.2 Vision", ("mllama_text_model",), read_mllama, example="Llama-3.2-11B-Vision"),
)


@lru_cache(maxsize=1)
def by_model_type() -> dict[str, Architecture]:
    """config.json ``model_type`` -> its architecture."""
    out: dict[str, Architecture] = {}
    for arch in ARCHITECTURES:
        for model_type in arch.model_types:
            if model_type in out:
                raise AssertionError(f"model_type {model_type!r} is registered twice")
            out[model_type] = arch
    return out


@lru_cache(maxsize=1)
def by_gguf_arch() -> dict[str, Architecture]:
    """GGUF ``general.architecture`` -> its architecture (only those with a GGUF reader)."""
    out: dict[str, Architecture] = {}
    for arch in ARCHITECTURES:
        if arch.gguf_reader is None:
            continue
        for name in arch.gguf_archs:
            if name in out:
                raise AssertionError(f"GGUF architecture {name!r} is registered twice")
            out[name] = arch
    return out


def architecture_of(model_type: str) -> Architecture | None:
    """The architecture a config ``model_type`` or a GGUF ``general.architecture`` belongs to, or None."""
    return by_model_type().get(model_type) or by_gguf_arch().get(model_type)
