"""Oracle: the architectures added for issue 7, measured in the real transformers implementation.

Each case builds a geometry-preserving skeleton of a catalog model with the measure machinery's
``skeleton_config`` (layer counts, KV heads, head dims, latent ranks, indexer, delta-net and short-conv
sizes kept; hidden sizes and experts shrunk), prefills N tokens, decodes one, and reads the cache
back **per layer**, counting every tensor each cache layer holds (keys, values, conv and recurrent
states, the sparse-attention indexer keys) once by storage. Three figures must agree for every
layer and in total: the measurement, kvbudget's ``transformers`` engine at N + 1 tokens, and the
hand-worked bytes written beside each case.

The per-layer count is this test's own, rather than ``kvbudget measure``'s, because it must also see
``indexer_keys`` (DeepSeek-V3.2, GLM-5), which the measure command does not tally; any tensor a cache
layer holds that is neither cache nor the known bookkeeping scalar fails the test.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kvbudget.engines import transformers as hf_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.measure.skeleton_config import skeleton_config
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import parse_cache_dtype

CACHE_TENSORS = ("keys", "values", "conv_states", "recurrent_states", "indexer_keys", "indexer_position_ids")
BOOKKEEPING = ("_sliding_window_tensor",)  # DynamicSlidingWindowLayer: a 0-d int64 holding the window


Fix = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    model: str
    tokens: int
    expected_total: int
    changes: dict[str, object] = field(default_factory=dict)  # decoder fields changed in the real config
    skeleton: dict[str, object] = field(default_factory=dict)  # skeleton-only fields (not cache-shaping)


LAT_DSA = 2 * (512 + 64) + 2 * 128  # bf16 latent (keys 512 + values 64) + bf16 indexer key: 1,408 B per token
CASES = {
    # 25 sliding layers keep the 32-token window of 8 KV x 256; 5 full layers 65 tokens of 2 global KV x 512.
    "gemma-4-26b-per-type-heads": Case(
        "gemma-4-26B-A4B-it",
        64,
        25 * 32 * 2 * 8 * 256 * 2 + 5 * 65 * 2 * 2 * 512 * 2,
        {"sliding_window": 32},
        {"top_k_experts": 2},
    ),
    "gemma-4-31b-per-type-heads": Case(
        "gemma-4-31B-it", 64, 50 * 32 * 2 * 16 * 256 * 2 + 10 * 65 * 2 * 4 * 512 * 2, {"sliding_window": 32}
    ),
    # The last 10 of 30 layers reuse KV (Gemma 4 E2B/E4B style): 17 sliding + 3 full layers keep a cache.
    # Models that share KV have per-layer inputs (hidden_size_per_layer_input > 0), which the forward needs.
    "gemma-4-shared-kv": Case(
        "gemma-4-26B-A4B-it",
        64,
        17 * 32 * 2 * 8 * 256 * 2 + 3 * 65 * 2 * 2 * 512 * 2,
        {"sliding_window": 32, "num_kv_shared_layers": 10},
        {"top_k_experts": 2, "hidden_size_per_layer_input": 16, "vocab_size_per_layer_input": 256},
    ),
    # 10 attention layers (2 KV x 256) x 17 tokens; 30 gated-delta-net layers: conv 4 x 8,192 bf16 + state
    # 32 x 128 x 128 fp32.
    "qwen3.5-moe-text-config": Case(
        "Qwen3.5-35B-A3B", 16, 10 * 17 * 2 * 2 * 256 * 2 + 30 * (4 * 8_192 * 2 + 32 * 128 * 128 * 4)
    ),
    # Every layer: the latent (512 + 64) and an indexer key of 128, bf16. MLA heads do not shape the
    # transformers 5 cache (latent only), so the skeleton runs fewer of them.
    "deepseek-v3.2-indexer": Case(
        "DeepSeek-V3.2", 64, 61 * 65 * LAT_DSA, skeleton={"num_attention_heads": 8, "index_n_heads": 4}
    ),
    "glm-5-indexer": Case("GLM-5", 64, 78 * 65 * LAT_DSA, skeleton={"num_attention_heads": 8, "index_n_heads": 4}),
    # indexer_types: 21 'full' layers cache indexer keys, 57 'shared' layers only the latent.
    "glm-5.2-shared-indexer": Case(
        "GLM-5.2",
        64,
        78 * 65 * 2 * 576 + 21 * 65 * 2 * 128,
        skeleton={"num_attention_heads": 8, "index_n_heads": 4},
    ),
    # 7 MLA layers x 17 tokens x 576 bf16; 20 KDA layers: conv 4 x 3 x 32 x 128 bf16 + state 32 x 128 x 128 fp32.
    "kimi-linear-kda-mla": Case(
        "Kimi-Linear-48B-A3B-Instruct",
        16,
        7 * 17 * 2 * 576 + 20 * (4 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4),
        skeleton={"num_experts_per_token": 2},
    ),
    # MLA with other ranks: 256 + 32 per token per layer.
    "minicpm3-mla": Case("MiniCPM3-4B", 64, 62 * 65 * 2 * (256 + 32)),
    # 6 attention layers (8 KV x 64) x 65 tokens; 10 short-conv layers: 3 columns x 1,024 channels bf16. The
    # conv channels are the hidden size, so the skeleton keeps it.
    "lfm2-short-conv": Case(
        "LFM2-350M", 64, 6 * 65 * 2 * 8 * 64 * 2 + 10 * 3 * 1_024 * 2, skeleton={"hidden_size": 1024}
    ),
    "smollm3-dense": Case("SmolLM3-3B", 64, 36 * 65 * 2 * 4 * 128 * 2),
}


def _spec(name: str, changes: dict[str, object]) -> ModelSpec:
    entry = catalog.lookup(name)
    assert entry is not None, name
    cfg = copy.deepcopy(entry.config)
    cfg.get("text_config", cfg).update(changes)
    return read_spec(cfg, name=entry.name, source=entry.source)


def _tensors(obj: object, out: list[Any]) -> None:
    torch, _ = _modules()

    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for value in obj.values():
            _tensors(value, out)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _tensors(value, out)


def _layer_bytes(layer: object, seen: set[int]) -> int:
    """Bytes of the cache tensors one cache layer holds, each storage counted once across the cache."""
    total = 0
    for name, value in vars(layer).items():
        held: list[Any] = []
        _tensors(value, held)
        if not held or name in BOOKKEEPING:
            continue
        assert name in CACHE_TENSORS, f"{type(layer).__name__}.{name} holds tensors this oracle does not know"
        for tensor in held:
            storage = tensor.untyped_storage()
            pointer, size = int(storage.data_ptr()), int(storage.nbytes())
            if size and pointer not in seen:
                seen.add(pointer)
                total += size
    return total


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _modules() -> tuple[Any, Any]:
    """torch and transformers, untyped (the oracle only drives them)."""
    return importlib.import_module("torch"), importlib.import_module("transformers")


def measure_layers(spec: ModelSpec, tokens: int, skeleton: dict[str, object]) -> list[int]:
    """Prefill ``tokens`` random tokens into a skeleton of ``spec``, decode one, return each layer's cache bytes."""
    torch, transformers = _modules()

    kwargs = skeleton_config(spec, tokens + 1)
    kwargs.update(skeleton)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[parse_cache_dtype(spec.dtype).name]
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the skeleton's build-time warnings are not the test's subject
            config = transformers.AutoConfig.for_model(spec.model_type, **kwargs)
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
            generator = torch.Generator().manual_seed(0)
            vocab = int(config.get_text_config(decoder=True).vocab_size)
            prompt = torch.randint(3, vocab, (1, tokens), generator=generator)
            step = torch.randint(3, vocab, (1, 1), generator=generator)
            keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            with torch.no_grad():
                cache = _cache_of(model(input_ids=prompt, use_cache=True))
                cache = _cache_of(model(input_ids=step, use_cache=True, **{keyword: cache}))
    finally:
        transformers.logging.set_verbosity(verbosity)
    seen: set[int] = set()
    return [_layer_bytes(layer, seen) for layer in cache.layers]


def predict_layers(spec: ModelSpec, tokens: int) -> list[int]:
    """kvbudget's transformers engine, per layer, for one sequence of ``tokens`` tokens."""
    dtype = parse_cache_dtype(spec.dtype)
    layout = hf_engine.layout(spec, dtype, dtype, 1, EngineOptions(image_tokens=0), hf_engine.DEFAULT_VERSION)
    out = [0] * len(spec.layers)
    for group in layout.groups:
        for index in group.layer_indices:
            out[index] += group.slot_bytes * group.slots(tokens, 1) + group.state_bytes
    return out


@pytest.mark.usefixtures("torch_installed")
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_each_layer_measured_equals_predicted(case: Case) -> None:
    spec = _spec(case.model, case.changes)
    measured = measure_layers(spec, case.tokens, case.skeleton)
    predicted = predict_layers(spec, case.tokens + 1)
    assert len(measured) == len(spec.layers)  # one cache layer per decoder layer
    assert measured == predicted
    assert sum(measured) == case.expected_total


# ---- configs re-saved by transformers 5: layer kinds renamed, the cache unchanged ----


@pytest.mark.usefixtures("torch_installed")
def test_nemotron_h_resaved_by_transformers_5_reads_and_measures_the_same() -> None:
    """NemotronHConfig writes layers_block_type with linear_attention / full_attention / mlp; kvbudget places
    the same layers, and the re-saved skeleton's real cache is what the engine predicts."""
    _, transformers = _modules()
    entry = catalog.lookup("Nemotron-H-8B-Base-8K")
    assert entry is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resaved = transformers.NemotronHConfig(**copy.deepcopy(entry.config)).to_dict()
    assert "hybrid_override_pattern" not in resaved
    assert set(resaved["layers_block_type"]) == {"linear_attention", "full_attention", "mlp"}
    original = read_spec(entry.config, name=entry.name, source=entry.source)
    spec = read_spec(resaved, name=entry.name, source="re-saved by transformers 5")
    assert [layer.states for layer in spec.layers] == [layer.states for layer in original.layers]
    measured = measure_layers(spec, 16, {})
    assert measured == predict_layers(spec, 17)
    # 4 attention layers (8 KV x 128, 17 tokens) + 24 Mamba-2 layers of 4,276,224 B (conv [10,240, 4] bf16 +
    # state [128, 64, 128] fp32); the 24 MLP layers hold nothing.
    assert sum(measured) == 4 * 17 * 2 * 8 * 128 * 2 + 24 * (10_240 * 4 * 2 + 128 * 64 * 128 * 4)


@pytest.mark.usefixtures("torch_installed")
def test_granite_4_hybrid_resaved_by_transformers_5() -> None:
    """GraniteMoeHybridConfig renames mamba/attention to linear_attention/full_attention on save; the
    kinds are read either way and the real cache matches (GraniteMoeHybridConfig's own Mamba geometry:
    128 heads x 64, state 256, 1 group, conv 4, expand 2 over hidden 4,096; 8 KV heads x 128)."""
    _, transformers = _modules()
    kinds = ["mamba", "mamba", "mamba", "attention"] * 2
    fields = {"num_hidden_layers": 8, "num_key_value_heads": 8, "layer_types": kinds, "torch_dtype": "bfloat16"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resaved = transformers.GraniteMoeHybridConfig(**fields).to_dict()
    assert resaved["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + [
        "full_attention"
    ]
    legacy = read_spec({**resaved, "layer_types": kinds}, name="granite-4-legacy", source="test")
    spec = read_spec(resaved, name="granite-4-resaved", source="test")
    assert [layer.states for layer in spec.layers] == [layer.states for layer in legacy.layers]
    measured = measure_layers(spec, 16, {})
    assert measured == predict_layers(spec, 17)
    conv = 4 * (8_192 + 2 * 1 * 256) * 2  # d_conv columns x (inner + 2 x groups x state) channels, bf16
    assert sum(measured) == 2 * 17 * 2 * 8 * 128 * 2 + 6 * (conv + 128 * 64 * 256 * 4)


@pytest.mark.usefixtures("torch_installed")
def test_exaone_4_layer_pattern() -> None:
    """Exaone4Config defaults (32 layers, 32 KV heads x 128, window 4096 shrunk to 32 here, pattern 4: three
    local layers then a global one): 24 sliding layers keep 32 tokens, 8 global layers all 65."""
    _, transformers = _modules()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.Exaone4Config(sliding_window=32, torch_dtype="bfloat16").to_dict()
    spec = read_spec(cfg, name="exaone-4", source="Exaone4Config defaults")
    as_string = read_spec(
        {**cfg, "layer_types": None, "sliding_window_pattern": "LLLG"}, name="exaone-4", source="pattern string"
    )
    assert [layer.states for layer in as_string.layers] == [layer.states for layer in spec.layers]
    measured = measure_layers(spec, 64, {})
    assert measured == predict_layers(spec, 65)
    assert sum(measured) == 24 * 32 * 2 * 32 * 128 * 2 + 8 * 65 * 2 * 32 * 128 * 2
