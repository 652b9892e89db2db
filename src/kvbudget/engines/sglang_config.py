"""What SGLang reads from the model config, the GPU and its flags before sizing anything: its defaults, the
architecture allow-lists (hybrid SWA pool, the Mamba radix cache's extra buffer, Blackwell backends), the page
size, DP attention, and the state slots per request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.errors import InputError

if TYPE_CHECKING:
    from kvbudget.engines.base import EngineOptions
    from kvbudget.model.spec import ModelSpec

NAME = "sglang"
DEFAULT_VERSION = "0.5.23"  # checked against SGLang 0.5.23's own sizing code in the test suite (tests/oracle)

DEFAULT_PAGE_SIZE = 1  # SGLang ServerArgs.page_size default (srt/server_args.py)
SWA_FULL_TOKENS_RATIO = 0.8  # SGLang ServerArgs.swa_full_tokens_ratio default (srt/server_args.py)
MAMBA_SSM_DTYPE = "float32"  # SGLang mamba2_state_dtype: SSM default float32 (srt/configs/mamba_utils.py)
MAMBA_CONV_DTYPE = "bf16"  # SGLang SGLANG_MAMBA_CONV_DTYPE default bfloat16 (srt/configs/mamba_utils.py)
# SGLang --kv-cache-dtype choices auto|bf16|bfloat16|fp8_e4m3|fp8_e5m2|fp4_e2m1 (srt/server_args.py);
# auto resolves to the model dtype (bf16, fp16 or fp32) before we see it. fp4_e2m1 is not modelled.
CACHE_DTYPES = ("bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2")
DSA_PAGE_SIZE = 64  # SGLang _handle_deepseek_family: "Setting page size to 64 for DeepSeek DSA" on CUDA
# SGLang 0.5.23 is_hybrid_swa_model allow-list (srt/configs/model_config.py: hybrid_swa_archs, SWA_SINK_ARCHS,
# MIMO_V2_MODEL_ARCHS); a config may also opt in with is_hybrid_swa
SWA_ARCHITECTURES = frozenset(
    {
        "BeamForCausalLM",
        "Llama4ForConditionalGeneration",
        "DeepseekV4ForCausalLM",
        "DeepseekV4ForCausalLMNextN",
        "DeepseekV4ForCausalLMDSpark",
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
        "IQuestQ1MTP",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Step3p7ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "LagunaForCausalLM",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        "UnlimitedOCRForCausalLM",
    }
)
# Configs without an architectures list (GGUF-derived specs): the same families by model_type
SWA_MODEL_TYPES = ("llama4", "gpt_oss", "mimo_v2", "step3p5", "step3p7", "gemma4", "laguna", "mellum")
MAMBA_FULL_MEMORY_RATIO = 0.9  # SGLang ServerArgs.mamba_full_memory_ratio fallback (arg_groups/fields/schedule.py)
MAMBA_SLOTS_PER_REQUEST = 3  # SGLang MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (mem_cache/kv_cache_configurator.py)
MAMBA_EXTRA_BUFFER_SLOTS = 2  # SGLang get_mamba_tracking_slots(extra_buffer=True, overlap=True) (allocation_sizing.py)
# SGLang 0.5.23 _MAMBA_EXTRA_BUFFER_ARCHS (arg_groups/overrides.py): the radix cache keeps 2 extra state slots
MAMBA_EXTRA_BUFFER_ARCHITECTURES = frozenset(
    {
        "KimiLinearForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "Glm5NextForConditionalGeneration",
        "NemotronHForCausalLM",
    }
)
# SGLang 0.5.23 multimodal_model_archs (srt/configs/model_config.py; MIMO_V2_MULTIMODAL_ARCHS is MiMoV2ForCausalLM):
# ModelConfig.is_multimodal, which takes a share off mem_fraction_static (sglang_memory.vlm_factor). Older releases
# list fewer; an architecture a release does not list it does not serve either
MULTIMODAL_ARCHITECTURES = frozenset(
    {
        "CLIPModel",
        "Cohere2VisionForConditionalGeneration",
        "Cosmos3EdgeForConditionalGeneration",
        "DeepseekVL2ForCausalLM",
        "Ernie4_5_VLMoeForConditionalGeneration",
        "MiniMaxM3SparseForConditionalGeneration",
        "Gemma3ForConditionalGeneration",
        "Gemma3nForConditionalGeneration",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration",
        "Glm5NextForConditionalGeneration",
        "GlmOcrForConditionalGeneration",
        "GlmAsrForConditionalGeneration",
        "GlmImageForConditionalGeneration",
        "Grok1VForCausalLM",
        "Grok1AForCausalLM",
        "LlavaLlamaForCausalLM",
        "Llama4ForConditionalGeneration",
        "LlavaMistralForCausalLM",
        "LlavaQwenForCausalLM",
        "LlavaForConditionalGeneration",
        "LlavaVidForCausalLM",
        "Lfm2VlForConditionalGeneration",
        "LightOnOCRForConditionalGeneration",
        "MiMoV2ForCausalLM",
        "MiMoV2ASRForCausalLM",
        "MiniCPMO",
        "MiniCPMV",
        "Mistral3ForConditionalGeneration",
        "MultiModalityCausalLM",
        "MllamaForConditionalGeneration",
        "MossVLForConditionalGeneration",
        "NemotronH_Nano_VL_V2",
        "NemotronH_Nano_Omni_Reasoning_V3",
        "NemotronH_Omni_Reasoning_V3",
        "MuseGlimmerForConditionalGeneration",
        "MuseSparkForConditionalGeneration",
        "PixtralForConditionalGeneration",
        "Qwen2AudioForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "Qwen3ASRForConditionalGeneration",
        "Qwen3OmniMoeForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "LocateAnythingForConditionalGeneration",
        "InternVLChatModel",
        "InternS1ForConditionalGeneration",
        "InternS1ProForConditionalGeneration",
        "Phi4MMForCausalLM",
        "VoxtralForConditionalGeneration",
        "WhisperForConditionalGeneration",
        "Step3VLForConditionalGeneration",
        "POINTSV15ChatModel",
        "DotsVLMForCausalLM",
        "Dots3NoteForCausalLM",
        "DotsOCRForCausalLM",
        "Sarashina2VisionForCausalLM",
        "NVILAForConditionalGeneration",
        "NVILALiteForConditionalGeneration",
        "DeepseekOCRForCausalLM",
        "UnlimitedOCRForCausalLM",
        "JetVLMForConditionalGeneration",
        "PaddleOCRVLForConditionalGeneration",
        "MiDashengLMModel",
        "StepVLForConditionalGeneration",
        "Step3p7ForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
        "BailingMMNativeForConditionalGeneration",
        "BailingMM2NativeForConditionalGeneration",
        "BailingMoeV3VLForConditionalGeneration",
    }
)
# ModelConfig's mm_disabled_models: served text-only unless --enable-multimodal, so not multimodal to the memory
# rule, from the release that lists them (Gemma 3 and Llama 4 from 0.4.6, Step3-VL from 0.5.1, Inkling in 0.5.23;
# model_config.py of the 0.4.5 / 0.4.6 / 0.5.1 / 0.5.23 wheels). A text-only MiMo-V2 checkpoint (no vision and
# audio config) is not multimodal either (0.5.23).
MULTIMODAL_OFF_BY_DEFAULT_SINCE = {
    "Gemma3ForConditionalGeneration": (0, 4, 6),
    "Llama4ForConditionalGeneration": (0, 4, 6),
    "Step3VLForConditionalGeneration": (0, 5, 1),
    "InklingForConditionalGeneration": (0, 5, 23),
}
# Multimodal models run prefill eagerly: 0.5.10's _handle_piecewise_cuda_graph ("9. Multimodal / VLM models") and
# 0.5.23's breakable-graph rule ("multimodal model", arg_groups/cuda_graph_hook.py) turn the prefill graphs off
# before the memory rule reserves for them, but for the archs 0.5.23 lets keep them
# (multimodal_breakable_cuda_graph_supported_model_archs and the piecewise allow-list, model_config.py)
MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES = frozenset(
    {
        "MiniMaxM3SparseForConditionalGeneration",
        "MiniMaxM3SparseForCausalLM",
        "Cohere2VisionForConditionalGeneration",
        "Glm5NextForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "PaddleOCRVLForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "MuseGlimmerForConditionalGeneration",
        "MuseSparkForConditionalGeneration",
        "KimiK3ForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
    }
)
RUNNING_REQUESTS_MIN, RUNNING_REQUESTS_MAX = 2048, 4096  # SGLang resolve_max_num_reqs clamp (kv_cache_configurator.py)


BLACKWELL_PAGE_SIZE = 64  # SGLang 0.5.23 on SM100: trtllm_mha / trtllm_mla, page_size forced to 64


def dp_attention(options: EngineOptions) -> int:
    """The attention data-parallel size (``--enable-dp-attention --dp N``); 1 when off."""
    return options.dp_attention or 1


def attention_tp(tp: int, options: EngineOptions) -> int:
    """The ranks one attention layer's heads are split over: tp / dp with DP attention (SGLang 0.5.23
    arg_groups/parallel_hook.py asserts tp % dp == 0; attn_tp_size = tp / attn_dp_size, runtime_context.py)."""
    dp = dp_attention(options)
    if dp < 1 or tp % dp:
        raise InputError(f"--dp-attention {dp}: SGLang needs it to divide --tp {tp}; use a divisor of {tp}")
    return tp // dp


# SGLang 0.5.23 on SM100 runs these hybrids on triton (page 1) unless their override picks trtllm_mha:
# Falcon-H1 / Jet-Nemotron always (arg_groups/model_overrides/falcon_h1.py)
SM100_TRITON_ARCHITECTURES = frozenset(
    {"FalconH1ForCausalLM", "JetNemotronForCausalLM", "JetVLMForConditionalGeneration"}
)
# the Qwen3.5 / Qwen3-Next hybrids: trtllm_mha (page 64) only with the Mamba extra buffer, the radix cache off or
# speculative decoding; by default (radix on, no extra buffer resolved yet) triton, page 1
# (arg_groups/model_overrides/qwen3_5.py _qwen3_5_hybrid_overrides)
SM100_QWEN35_HYBRID_ARCHITECTURES = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
    }
)


def default_page_size(options: EngineOptions, spec: ModelSpec | None = None) -> int:
    """SGLang's page size when --page-size is not given, by the attention backend it picks for the GPU and model."""
    capability = options.gpu_capability or 90
    if capability // 10 == 10:
        names = set(architectures(spec)) if spec is not None else set()
        if names & SM100_TRITON_ARCHITECTURES:
            return DEFAULT_PAGE_SIZE
        if names & SM100_QWEN35_HYBRID_ARCHITECTURES and options.prefix_caching is not False:
            return DEFAULT_PAGE_SIZE
        # SGLang 0.5.23 on SM100 picks trtllm_mha (MHA) or trtllm_mla (MLA), which need pages of 16-128 / 32-64:
        # _mla_backend_page_constraints sets 64 (arg_groups/overrides.py, model_override_base.py)
        return BLACKWELL_PAGE_SIZE
    # Hopper fa3, Ampere/Ada flashinfer or triton: ServerArgs.page_size default 1
    return DEFAULT_PAGE_SIZE


def architectures(spec: ModelSpec) -> list[str]:
    architectures = spec.config.get("architectures")
    return [str(a) for a in architectures] if isinstance(architectures, list) else []


def swa_architecture(spec: ModelSpec) -> bool:
    # SGLang 0.5.23 is_hybrid_swa_model: an architecture allow-list, or the config's is_hybrid_swa
    # (srt/configs/model_config.py)
    names = architectures(spec)
    if names:
        return any(name in SWA_ARCHITECTURES for name in names) or spec.config.get("is_hybrid_swa") is True
    return any(key in spec.model_type.lower() for key in SWA_MODEL_TYPES)


def mamba_slots_per_request(spec: ModelSpec, options: EngineOptions | None = None) -> int:
    """State slots SGLang keeps per running request of a Mamba hybrid (``_calculate_mamba_ratio``)."""
    if options is not None and options.prefix_caching is False:
        # --disable-radix-cache: one slot per request (kv_cache_configurator.py)
        return 1
    # radix cache on, overlap schedule on: the "extra_buffer" strategy where the architecture supports it
    # (arg_groups/overrides.py _mamba_radix_cache_resolution), else "no_buffer" (3 slots, overlap off)
    extra = any(name in MAMBA_EXTRA_BUFFER_ARCHITECTURES for name in architectures(spec))
    return MAMBA_SLOTS_PER_REQUEST + (MAMBA_EXTRA_BUFFER_SLOTS if extra else 0)
