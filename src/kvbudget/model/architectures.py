"""The one model-type registry: every architecture kvbudget reads, under every name a model file gives it.

An ``Architecture`` ties together the ``model_type`` values a ``config.json`` (or its ``text_config``)
names, the ``general.architecture`` values a GGUF names, and the reader of each: the config reader
places every layer's primitives from a Hugging Face config, the GGUF reader from llama.cpp's metadata
(with ``gguf_keys``, the cache-shaping keys it consumes; any other one makes it refuse the file). The
KV readers (``model.families.read_spec``, ``model.gguf.read_gguf_spec``), the parameter counter
(``weights.params``) and the coverage matrix (``kvbudget.coverage``) all look architectures up here, so
a new architecture is one entry. Both readers are named, not imported (``config_reader_name``, a
``module.function`` of ``model/families/``; ``gguf_reader_name``), so an answer loads only the family
module of the model it reads (``tests/test_startup.py``).

``example`` names a catalog model of the architecture, or ``config_example`` is a config.json of it (the
coverage matrix costs it on every engine); ``gguf_example`` is GGUF metadata (key suffixes after
``{arch}.``) with the cache geometry of ``gguf_source``, for architectures read from GGUF. The live
llama.cpp tests write these same keys into the tiny GGUFs they serve.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from kvbudget.frozen import FrozenRecord
from kvbudget.model import gguf_keys as g

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.model.families.fields import Fields
    from kvbudget.model.gguf_readers import GgufReader
    from kvbudget.model.spec import LayerSpec

    ConfigReader = Callable[[Fields, str], tuple[LayerSpec, ...]]


@dataclass(frozen=True, repr=False, eq=False)
class Architecture(FrozenRecord):
    """One architecture family and how each reader places its layers."""

    name: str
    model_types: tuple[str, ...]
    # "module.function" of model/families/, imported when a config of the architecture is read (config_reader)
    config_reader_name: str | None
    gguf_archs: tuple[str, ...] = ()
    gguf_reader_name: str | None = None  # a function of model/gguf_readers.py, imported when a GGUF is read
    gguf_keys: frozenset[str] = frozenset()
    example: str = ""
    config_example: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)
    gguf_example: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)
    gguf_source: str = ""

    @property
    def config_reader(self) -> ConfigReader | None:
        """The config reader function (its family module loads only now: an answer loads the family it reads)."""
        if self.config_reader_name is None:
            return None
        module, _, function = self.config_reader_name.rpartition(".")
        reader: ConfigReader = getattr(importlib.import_module(f"kvbudget.model.families.{module}"), function)
        return reader

    @property
    def gguf_reader(self) -> GgufReader | None:
        """The GGUF reader function (model/gguf_readers.py loads only now: no config-only answer pays for it)."""
        if self.gguf_reader_name is None:
            return None
        from kvbudget.model import gguf_readers

        reader: GgufReader = getattr(gguf_readers, self.gguf_reader_name)
        return reader


def _attn(layers: int, heads: int, kv: int | list[int], dim: int, **extra: object) -> dict[str, object]:
    """GGUF metadata of an attention stack (key suffixes after ``{arch}.``)."""
    return {
        "block_count": layers,
        "context_length": 131_072,
        "embedding_length": heads * dim,
        "attention.head_count": heads,
        "attention.head_count_kv": kv,
        "attention.key_length": dim,
        "attention.value_length": dim,
        **extra,
    }


def _cfg(model_type: str, layers: int, heads: int, kv: int, dim: int, **extra: object) -> dict[str, object]:
    """A config.json of an attention stack (for architectures the catalog has no model of)."""
    return {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": dim,
        "hidden_size": heads * dim,
        **extra,
    }


def _mla(layers: int, heads: int, k_mla: int, v_mla: int, **extra: object) -> dict[str, object]:
    """GGUF metadata of an MLA GGUF (llama.cpp PR #12801) with kv_lora_rank 512 and rope 64."""
    return {
        "block_count": layers,
        "embedding_length": 7168,
        "attention.head_count": heads,
        "attention.head_count_kv": 1,
        "attention.key_length": 576,
        "attention.value_length": 512,
        "attention.key_length_mla": k_mla,
        "attention.value_length_mla": v_mla,
        "attention.kv_lora_rank": 512,
        "rope.dimension_count": 64,
        **extra,
    }


_INDEXER_32 = {"attention.indexer.head_count": 32, "attention.indexer.key_length": 128, "attention.indexer.top_k": 2048}
_SYNTHETIC = "synthetic geometry (8 layers, 8 heads, 2 KV heads x 128), not a released model"


def _dense(
    name: str,
    *types: str,
    gguf: tuple[str, ...] = (),
    keys: frozenset[str] = g.ATTN,
    example: str = "",
    config_example: Mapping[str, object] | None = None,
    gguf_example: Mapping[str, object] | None = None,
    gguf_source: str = "",
) -> Architecture:
    return Architecture(
        name,
        types,
        "attention.read_attention_model",
        gguf,
        "read_attention" if gguf else None,
        keys if gguf else frozenset(),
        example,
        config_example or {},
        gguf_example or {},
        gguf_source,
    )


_HYBRID_KEYS = g.ATTN | g.SSM
_DELTA_KEYS = _HYBRID_KEYS | {"full_attention_interval", "attention.recurrent_layers"}
_MLA_KEYS = g.ATTN | {"attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla"}
_NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"  # NVIDIA-Nemotron-3-Nano-30B-A3B
_SWA_5 = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(35)]
_LFM2_KV = [8 if i in (2, 5, 8, 10, 12, 14) else 0 for i in range(16)]  # LFM2-350M attention layers

ARCHITECTURES: tuple[Architecture, ...] = (
    _dense(
        "Llama",
        "llama",
        "mistral",
        "mixtral",
        gguf=("llama",),
        example="Llama-3.1-8B",
        gguf_example=_attn(32, 32, 8, 128),
        gguf_source="Llama-3.1-8B",
    ),
    _dense(
        "Llama 4",
        "llama4_text",
        gguf=("llama4",),
        keys=g.ATTN | g.SWA,
        example="Llama-4-Scout-17B-16E-Instruct",
        gguf_example=_attn(48, 40, 8, 128),
        gguf_source="Llama-4-Scout-17B-16E-Instruct (no sliding_window key: llama.cpp chunks at 8192)",
    ),
    _dense(
        "Qwen2",
        "qwen2",
        # Qwen2-VL and Qwen2.5-VL: a Qwen2 decoder (flat config.json, or text_config in transformers >= 4.57) beside a
        # ViT whose weights weights/vision.py counts; vLLM's qwen2_vl.py / qwen2_5_vl.py build the decoder as Qwen2Model
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen2_vl_text",
        "qwen2_5_vl_text",
        gguf=("qwen2",),
        example="Qwen2.5-7B",
        gguf_example=_attn(28, 28, 4, 128),
        gguf_source="Qwen2.5-7B",
    ),
    _dense(
        "Qwen2 MoE",
        "qwen2_moe",
        gguf=("qwen2moe",),
        config_example=_cfg("qwen2_moe", 8, 8, 2, 128),
        gguf_example=_attn(8, 8, 2, 128),
        gguf_source=_SYNTHETIC,
    ),
    _dense(
        "Qwen3",
        "qwen3",
        gguf=("qwen3",),
        example="Qwen3-8B",
        gguf_example=_attn(36, 32, 8, 128),
        gguf_source="Qwen3-8B",
    ),
    _dense(
        "Qwen3 MoE",
        "qwen3_moe",
        gguf=("qwen3moe",),
        example="Qwen3-30B-A3B",
        gguf_example=_attn(48, 32, 4, 128),
        gguf_source="Qwen3-30B-A3B",
    ),
    Architecture(
        "Qwen3-Next",
        ("qwen3_next",),
        "hybrid.read_qwen3_next",
        ("qwen3next",),
        "read_hybrid",
        _DELTA_KEYS,
        "Qwen3-Next-80B-A3B",
        gguf_example=_attn(
            48,
            16,
            2,
            256,
            **{
                "full_attention_interval": 4,
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 32 * 128,
                "ssm.state_size": 128,
                "ssm.group_count": 16,
                "ssm.time_step_rank": 32,
            },
        ),
        gguf_source="Qwen3-Next-80B-A3B",
    ),
    Architecture(
        "Qwen3.5",
        ("qwen3_5_text", "qwen3_5_moe_text"),
        "hybrid.read_qwen3_next",
        ("qwen35moe", "qwen35"),
        "read_hybrid",
        _DELTA_KEYS,
        "Qwen3.5-35B-A3B",
        gguf_example=_attn(
            40,
            16,
            2,
            256,
            **{
                "full_attention_interval": 4,
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 32 * 128,
                "ssm.state_size": 128,
                "ssm.group_count": 16,
                "ssm.time_step_rank": 32,
            },
        ),
        gguf_source="Qwen3.5-35B-A3B",
    ),
    _dense(
        "Phi-3",
        "phi3",
        gguf=("phi3",),
        keys=g.ATTN | {"attention.sliding_window"},
        example="Phi-4",
        gguf_example=_attn(32, 32, 32, 96, context_length=4096, **{"attention.sliding_window": 2047}),
        gguf_source="Phi-3-mini-4k-instruct (sliding_window 2047, which llama.cpp disables: every layer full)",
    ),
    _dense(
        "Command R",
        "cohere",
        gguf=("command-r",),
        example="c4ai-command-r-08-2024",
        gguf_example=_attn(40, 64, 8, 128),
        gguf_source="c4ai-command-r-08-2024",
    ),
    _dense(
        "Command R7B",
        "cohere2",
        gguf=("cohere2",),
        keys=g.ATTN | g.SWA,
        config_example=_cfg("cohere2", 32, 32, 8, 128, sliding_window=4096, sliding_window_pattern=4),
        gguf_example=_attn(32, 32, 8, 128, **{"attention.sliding_window": 4096}),
        gguf_source="Command R7B-like (32 layers, 8 KV heads x 128, window 4096; no pattern key: llama.cpp makes "
        "every 4th layer global)",
    ),
    _dense(
        "GLM",
        "glm",
        gguf=("chatglm",),
        config_example=_cfg("glm", 8, 8, 2, 128),
        gguf_example=_attn(40, 32, 2, 128),
        gguf_source="glm-4-9b-chat-hf (convert_hf_to_gguf writes GlmForCausalLM as chatglm)",
    ),
    _dense(
        "GLM-4",
        "glm4",
        gguf=("glm4",),
        keys=g.ATTN | g.NEXTN,
        config_example=_cfg("glm4", 8, 8, 2, 128),
        gguf_example=_attn(40, 32, 2, 128),
        gguf_source="GLM-4-9B-0414",
    ),
    _dense(
        "GLM-4.5 MoE",
        "glm4_moe",
        "glm4_shared_moe",
        gguf=("glm4moe",),
        keys=g.ATTN | g.NEXTN,
        example="GLM-4.5-Air",
        gguf_example=_attn(47, 96, 8, 128, nextn_predict_layers=1),
        gguf_source="GLM-4.5-Air (46 layers + 1 MTP layer)",
    ),
    Architecture(
        "GLM-5 (sparse MLA)",
        ("glm_moe_dsa",),
        "latent.read_latent_model",
        ("glm-dsa",),
        "read_sparse_mla",
        _MLA_KEYS | g.INDEXER | g.NEXTN,
        "GLM-5",
        gguf_example=_mla(79, 64, 256, 256, context_length=202_752, nextn_predict_layers=1, **_INDEXER_32),
        gguf_source="GLM-5 (78 layers + 1 MTP layer; a context below 1,048,576: every layer runs its indexer)",
    ),
    Architecture(
        "DeepSeek-V2/V3",
        ("deepseek_v2", "deepseek_v3", "kimi_k2"),
        "latent.read_latent_model",
        ("deepseek2",),
        "read_deepseek2",
        _MLA_KEYS,
        "DeepSeek-V3",
        gguf_example={
            "block_count": 61,
            "embedding_length": 7168,
            "attention.head_count": 128,
            "attention.head_count_kv": 1,
            "attention.key_length": 576,
            "attention.value_length": 512,
            "attention.key_length_mla": 192,
            "attention.value_length_mla": 128,
            "attention.kv_lora_rank": 512,
            "rope.dimension_count": 64,
        },
        gguf_source="DeepSeek-V3 (an MLA GGUF, llama.cpp PR #12801)",
    ),
    Architecture(
        "DeepSeek-V3.2 (sparse MLA)",
        ("deepseek_v32",),
        "latent.read_latent_model",
        ("deepseek32",),
        "read_sparse_mla",
        _MLA_KEYS | g.INDEXER | g.NEXTN,
        "DeepSeek-V3.2",
        gguf_example=_mla(
            62,
            128,
            192,
            128,
            context_length=163_840,
            nextn_predict_layers=1,
            **{**_INDEXER_32, "attention.indexer.head_count": 64},
        ),
        gguf_source="DeepSeek-V3.2 (61 layers + 1 MTP layer)",
    ),
    Architecture(
        "MiniCPM3",
        ("minicpm3",),
        "latent.read_latent_model",
        ("minicpm3",),
        "read_minicpm3",
        g.ATTN | {"attention.kv_lora_rank"},
        "MiniCPM3-4B",
        gguf_example={
            "block_count": 62,
            "context_length": 32_768,
            "embedding_length": 2560,
            "attention.head_count": 40,
            "attention.head_count_kv": 40,
            "attention.key_length": 96,
            "attention.kv_lora_rank": 256,
            "rope.dimension_count": 32,
        },
        gguf_source="MiniCPM3-4B as convert_hf_to_gguf writes it (key_length 64 + 32, no value_length)",
    ),
    Architecture(
        "Kimi Linear",
        ("kimi_linear",),
        "linear.read_kimi_linear",
        ("kimi-linear",),
        "read_kimi_linear",
        _MLA_KEYS | {"kda.head_dim", "ssm.conv_kernel"},
        "Kimi-Linear-48B-A3B-Instruct",
        gguf_example={
            **_mla(27, 32, 192, 128, context_length=1_048_576, **{"kda.head_dim": 128, "ssm.conv_kernel": 4}),
            "embedding_length": 2304,
            "attention.head_count_kv": [1 if i + 1 in (4, 8, 12, 16, 20, 24, 27) else 0 for i in range(27)],
            "attention.value_length": 72,
        },
        gguf_source="Kimi-Linear-48B-A3B-Instruct as convert_hf_to_gguf writes it (KV heads 1 on the MLA layers)",
    ),
    _dense(
        "MiniMax-M2",
        "minimax_m2",
        gguf=("minimax-m2",),
        example="MiniMax-M2",
        gguf_example=_attn(62, 48, 8, 128, embedding_length=3072, context_length=196_608),
        gguf_source="MiniMax-M2 (62 layers, 8 KV heads x 128; the MTP modules are not converted)",
    ),
    _dense(
        "Gemma",
        "gemma",
        gguf=("gemma",),
        config_example=_cfg("gemma", 8, 8, 2, 128),
        gguf_example=_attn(8, 8, 2, 128),
        gguf_source=_SYNTHETIC,
    ),
    _dense(
        "Gemma 2",
        "gemma2",
        gguf=("gemma2",),
        keys=g.ATTN | g.SWA,
        example="gemma-2-9b",
        gguf_example=_attn(42, 16, 8, 256, **{"attention.sliding_window": 4096}),
        gguf_source="gemma-2-9b",
    ),
    _dense(
        "Gemma 3",
        "gemma3_text",
        gguf=("gemma3",),
        keys=g.ATTN | g.SWA,
        example="gemma-3-27b-it",
        gguf_example=_attn(62, 32, 16, 128, **{"attention.sliding_window": 1024}),
        gguf_source="gemma-3-27b-it",
    ),
    Architecture(
        "Gemma 3n",
        ("gemma3n_text",),
        "attention.read_attention_model",
        ("gemma3n",),
        "read_gemma3n",
        g.ATTN | g.SWA | {"attention.shared_kv_layers"},
        config_example=_cfg(
            "gemma3n_text", 35, 8, 2, 256, sliding_window=512, num_kv_shared_layers=15, layer_types=_SWA_5
        ),
        gguf_example=_attn(35, 8, 2, 256, **{"attention.sliding_window": 512, "attention.shared_kv_layers": 15}),
        gguf_source="Gemma3nTextConfig defaults (google/gemma-3n-E4B): 35 layers, 2 KV heads x 256, window 512",
    ),
    Architecture(
        "Gemma 4",
        ("gemma4_text",),
        "gemma4.read_gemma4",
        ("gemma4",),
        "read_gemma4",
        g.ATTN | g.SWA | g.SWA_DIMS | {"attention.shared_kv_layers"},
        "gemma-4-26B-A4B-it",
        gguf_example={
            "block_count": 30,
            "context_length": 262_144,
            "embedding_length": 2816,
            "attention.head_count": 16,
            "attention.head_count_kv": [2 if (i + 1) % 6 == 0 else 8 for i in range(30)],
            "attention.key_length": 512,
            "attention.value_length": 512,
            "attention.key_length_swa": 256,
            "attention.value_length_swa": 256,
            "attention.sliding_window": 1024,
            "attention.sliding_window_pattern": [(i + 1) % 6 != 0 for i in range(30)],
            "attention.shared_kv_layers": 0,
        },
        gguf_source="gemma-4-26B-A4B-it (full layers 2 KV heads x 512, sliding 8 x 256, window 1024)",
    ),
    _dense(
        "gpt-oss",
        "gpt_oss",
        gguf=("gpt-oss",),
        keys=g.ATTN | g.SWA,
        example="gpt-oss-20b",
        gguf_example=_attn(24, 64, 8, 64, **{"attention.sliding_window": 128}),
        gguf_source="gpt-oss-20b",
    ),
    _dense(
        "OLMo",
        "olmo",
        gguf=("olmo",),
        config_example=_cfg("olmo", 8, 8, 8, 128),
        gguf_example=_attn(32, 32, 32, 128, context_length=4096),
        gguf_source="OLMo-1.7-7B",
    ),
    _dense(
        "OLMo 2",
        "olmo2",
        gguf=("olmo2",),
        keys=g.ATTN | g.SWA,
        config_example=_cfg("olmo2", 8, 8, 8, 128),
        gguf_example=_attn(32, 32, 32, 128, context_length=4096),
        gguf_source="OLMo-2-1124-7B (no window; OLMo 3 GGUFs, also olmo2, add sliding_window and a pattern)",
    ),
    _dense(
        "Granite",
        "granite",
        gguf=("granite",),
        config_example=_cfg("granite", 8, 8, 2, 128),
        gguf_example=_attn(40, 32, 8, 128),
        gguf_source="granite-3.3-8b-instruct",
    ),
    _dense(
        "Granite MoE",
        "granitemoe",
        gguf=("granitemoe",),
        config_example=_cfg("granitemoe", 8, 8, 2, 128),
        gguf_example=_attn(32, 24, 8, 64),
        gguf_source="granite-3.1-3b-a800m-instruct",
    ),
    Architecture(
        "Granite 4 hybrid",
        ("granitemoehybrid",),
        "hybrid.read_granite_hybrid",
        ("granitehybrid",),
        "read_hybrid",
        _HYBRID_KEYS,
        config_example=_cfg(
            "granitemoehybrid",
            8,
            8,
            2,
            128,
            layer_types=["mamba", "mamba", "mamba", "attention"] * 2,
            mamba_n_heads=32,
            mamba_d_head=64,
            mamba_d_state=128,
            mamba_n_groups=1,
            mamba_d_conv=4,
            mamba_expand=2,
        ),
        gguf_example=_attn(
            8,
            8,
            [0, 0, 0, 2] * 2,
            128,
            **{
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 2048,
                "ssm.state_size": 128,
                "ssm.group_count": 1,
                "ssm.time_step_rank": 32,
            },
        ),
        gguf_source="synthetic geometry (6 Mamba-2 + 2 attention layers), not a released model",
    ),
    _dense(
        "StarCoder2",
        "starcoder2",
        gguf=("starcoder2",),
        config_example=_cfg("starcoder2", 8, 8, 2, 128),
        gguf_example=_attn(40, 48, 4, 128, context_length=16_384),
        gguf_source="starcoder2-15b (its 4096 sliding_window is not in the GGUF: llama.cpp attends fully)",
    ),
    _dense(
        "ERNIE 4.5",
        "ernie4_5",
        "ernie4_5_moe",
        gguf=("ernie4_5-moe", "ernie4_5"),
        config_example=_cfg("ernie4_5", 8, 8, 2, 128),
        gguf_example=_attn(28, 20, 4, 128),
        gguf_source="ERNIE-4.5-21B-A3B",
    ),
    _dense(
        "Seed-OSS",
        "seed_oss",
        gguf=("seed_oss",),
        config_example=_cfg("seed_oss", 8, 8, 2, 128),
        gguf_example=_attn(64, 80, 8, 128, embedding_length=5120, context_length=524_288),
        gguf_source="Seed-OSS-36B-Instruct",
    ),
    _dense(
        "Hunyuan dense",
        "hunyuan_v1_dense",
        gguf=("hunyuan-dense",),
        config_example=_cfg("hunyuan_v1_dense", 8, 8, 2, 128),
        gguf_example=_attn(32, 32, 8, 128, context_length=262_144),
        gguf_source="Hunyuan-7B-Instruct",
    ),
    _dense(
        "SmolLM3",
        "smollm3",
        gguf=("smollm3",),
        example="SmolLM3-3B",
        gguf_example=_attn(36, 16, 4, 128),
        gguf_source="SmolLM3-3B",
    ),
    _dense(
        "EXAONE 4",
        "exaone4",
        gguf=("exaone4",),
        keys=g.ATTN | g.SWA,
        config_example=_cfg("exaone4", 64, 40, 8, 128, sliding_window=4096, sliding_window_pattern="LLLG"),
        gguf_example=_attn(64, 40, 8, 128),
        gguf_source="EXAONE-4.0-32B-like (64 layers, 8 KV heads x 128; no window keys: llama.cpp slides 48 layers "
        "at 4096)",
    ),
    Architecture(
        "Jamba",
        ("jamba",),
        "hybrid.read_jamba",
        ("jamba",),
        "read_hybrid",
        _HYBRID_KEYS,
        "Jamba-v0.1",
        gguf_example=_attn(
            32,
            32,
            [8 if i % 8 == 4 else 0 for i in range(32)],
            128,
            **{"ssm.conv_kernel": 4, "ssm.inner_size": 8192, "ssm.state_size": 16},
        ),
        gguf_source="Jamba-v0.1",
    ),
    Architecture(
        "Nemotron-H",
        ("nemotron_h",),
        "hybrid.read_nemotron_h",
        ("nemotron_h_moe", "nemotron_h"),
        "read_nemotron_h_moe",
        _HYBRID_KEYS | g.NEXTN,
        "Nemotron-H-8B-Base-8K",
        gguf_example=_attn(
            52,
            32,
            [2 if c == "*" else 0 for c in _NANO],
            128,
            **{
                "feed_forward_length": [1856 if c == "E" else 0 for c in _NANO],
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 64 * 64,
                "ssm.state_size": 128,
                "ssm.group_count": 8,
                "ssm.time_step_rank": 64,
            },
        ),
        gguf_source="NVIDIA-Nemotron-3-Nano-30B-A3B",
    ),
    Architecture(
        "Falcon-H1",
        ("falcon_h1",),
        "hybrid.read_falcon_h1",
        ("falcon-h1",),
        "read_falcon_h1",
        _HYBRID_KEYS,
        "Falcon-H1-0.5B",
        gguf_example=_attn(
            36,
            8,
            2,
            64,
            **{
                "embedding_length": 1024,
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 24 * 64,
                "ssm.state_size": 128,
                "ssm.group_count": 1,
                "ssm.time_step_rank": 24,
            },
        ),
        gguf_source="Falcon-H1-0.5B",
    ),
    Architecture(
        "Mamba",
        ("mamba", "mamba2"),
        "hybrid.read_mamba",
        ("mamba2", "mamba"),
        "read_hybrid",
        _HYBRID_KEYS,
        "Mamba-Codestral-7B-v0.1",
        gguf_example={
            "block_count": 64,
            "embedding_length": 4096,
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 8192,
            "ssm.state_size": 128,
            "ssm.group_count": 8,
            "ssm.time_step_rank": 128,
        },
        gguf_source="Mamba-Codestral-7B-v0.1",
    ),
    Architecture(
        "LFM2",
        ("lfm2", "lfm2_moe"),
        "linear.read_lfm2",
        ("lfm2",),
        "read_lfm2",
        g.ATTN | {"shortconv.l_cache", "attention.sliding_window"},
        "LFM2-350M",
        gguf_example={
            "block_count": 16,
            "context_length": 128_000,
            "embedding_length": 1024,
            "attention.head_count": 16,
            "attention.head_count_kv": _LFM2_KV,
            "shortconv.l_cache": 3,
        },
        gguf_source="LFM2-350M",
    ),
    Architecture("Llama 3.2 Vision", ("mllama_text_model",), "vision.read_mllama", example="Llama-3.2-11B-Vision"),
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
        if arch.gguf_reader_name is None:
            continue
        for name in arch.gguf_archs:
            if name in out:
                raise AssertionError(f"GGUF architecture {name!r} is registered twice")
            out[name] = arch
    return out


def architecture_of(model_type: str) -> Architecture | None:
    """The architecture a config ``model_type`` or a GGUF ``general.architecture`` belongs to, or None."""
    return by_model_type().get(model_type) or by_gguf_arch().get(model_type)
