"""Read a model's cache geometry from a GGUF file's metadata: the model as llama.cpp itself sees it.

Only the key/value header is read (``gguf.GGUFReader`` maps the file; no tensor data is loaded).
Keys are the ``gguf.constants.Keys`` names, ``{arch}.`` + suffix. The per-architecture rules mirror
llama.cpp's ``load_hparams`` (src/llama-model.cpp, src/models/*.cpp):

* ``attention.head_count`` / ``head_count_kv`` may be per-layer arrays; K/V head dims default to
  ``embedding_length / head_count`` (llama.cpp's default for ``n_embd_head_k``/``_v``);
* sliding-window layers: a per-layer bool array ``attention.sliding_window_pattern`` when present, else
  a period p (the key's int, else the architecture default; layer i slides when i % p < p - 1:
  llama_hparams::set_swa_pattern): gemma2 2, gemma3 6, gpt-oss 2;
* deepseek2: MLA GGUFs (PR #12801, ``key_length_mla`` present) give a latent; legacy GGUFs (no
  ``key_length_mla``, ``head_count_kv`` = ``head_count``) are what llama.cpp really caches: full
  per-head K and V, so they become FullAttention with the file's own K/V lengths (and a note);
* hybrids: nemotron_h layer i is recurrent when head_count_kv[i] == 0 and feed_forward_length[i] == 0
  (attention when head_count_kv[i] > 0, MLP otherwise); jamba / granitehybrid: recurrent when
  head_count_kv[i] == 0; qwen3next / qwen35: recurrent unless (i + 1) % full_attention_interval == 0;
* ssm keys: Mamba ``inner_size``, ``state_size``, ``group_count``, ``time_step_rank`` (= heads for
  Mamba-2); gated delta net: ``group_count`` = k heads, ``state_size`` = k head dim, ``time_step_rank``
  = v heads, ``inner_size`` = v heads x v head dim (convert_hf_to_gguf Qwen3NextModel).

Anything else fails closed: an unknown architecture, or a known one carrying a key that changes the
cache which its reader does not place (e.g. MTP layers, ``nextn_predict_layers`` > 0).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvbudget.errors import ConfigError, MissingExtraError, SourceError, UnknownArchitectureError
from kvbudget.model.spec import (
    FullAttention,
    LatentAttention,
    LayerSpec,
    ModelSpec,
    Primitive,
    Recurrent,
    SlidingWindow,
)

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
)
_ATTN = {"attention.head_count_kv", "attention.key_length", "attention.value_length"}
_SSM = {"ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count"}
_SWA = {"attention.sliding_window", "attention.sliding_window_pattern"}
_ERROR_KEYS = re.compile(r"(attention|ssm|window|head|kv|lora|layer|interval|wkv|conv|block_count|nextn)")


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
                f"GGUF key '{self.arch}.{suffix}' must be a whole number >= {int(not zero)}, got {value!r}"
            )
        return value

    def per_layer(self, suffix: str, n_layer: int, default: list[int] | None = None) -> list[int]:
        """A scalar applied to every layer, or a per-layer array (llama_model_loader::get_key_or_arr)."""
        value = self.raw(suffix)
        if value is None and default is not None:
            return default
        if not isinstance(value, list):
            return [self.count(suffix, zero=True)] * n_layer
        if len(value) != n_layer or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
            raise self.error(
                f"GGUF key '{self.arch}.{suffix}' must hold {n_layer} whole numbers (one per layer), got {value!r}"
            )
        return [int(x) for x in value]


Reader = Callable[[Meta, int], tuple[list[tuple[Primitive, ...]], list[str]]]


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
    return heads, m.per_layer("attention.head_count_kv", n_layer, default=heads)


def _swa_flags(m: Meta, n_layer: int, period: int) -> list[bool]:
    """llama_model_base::load_swa_pattern: a bool array, else set_swa_pattern(period)."""
    value = m.raw("attention.sliding_window_pattern")
    if isinstance(value, list):
        if len(value) != n_layer or not all(isinstance(x, bool) for x in value):
            raise m.error(f"GGUF key '{m.arch}.attention.sliding_window_pattern' must hold {n_layer} booleans")
        return [bool(x) for x in value]
    p = m.count("attention.sliding_window_pattern", period, zero=True)
    return [p == 0 or i % p < p - 1 for i in range(n_layer)]


def read_attention(m: Meta, n_layer: int) -> tuple[list[tuple[Primitive, ...]], list[str]]:
    """Dense and sliding-window decoders: every layer holds K and V."""
    heads, kv = _kv_heads(m, n_layer)
    k_dim, v_dim = _head_dims(m, heads)
    if 0 in kv:
        raise m.error(f"head_count_kv is 0 for layer {kv.index(0)}, which architecture {m.arch!r} does not allow")
    window = 0
    flags = [False] * n_layer
    if m.arch in _SWA_PERIOD:
        default_window = 4096 if m.arch == "gemma2" else None  # gemma2: "default value of gemma 2"
        if m.arch == "gemma3":
            window = m.count("attention.sliding_window", 0, zero=True)  # newer gemma3: absent or 0 -> no SWA
        else:
            window = m.count("attention.sliding_window", default_window)
        flags = _swa_flags(m, n_layer, _SWA_PERIOD[m.arch]) if window else flags
    layers: list[tuple[Primitive, ...]] = [
        (SlidingWindow(kv[i], k_dim, v_dim, window) if flags[i] else FullAttention(kv[i], k_dim, v_dim),)
        for i in range(n_layer)
    ]
    return layers, []


def read_deepseek2(m: Meta, n_layer: int) -> tuple[list[tuple[Primitive, ...]], list[str]]:
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


def read_hybrid(m: Meta, n_layer: int) -> tuple[list[tuple[Primitive, ...]], list[str]]:
    """Mamba, Mamba-2, gated-delta-net and their attention hybrids."""
    variant = {
        "mamba": "mamba1",
        "jamba": "mamba1",
        "qwen3next": "gated_delta_net",
        "qwen35": "gated_delta_net",
        "qwen35moe": "gated_delta_net",
    }.get(m.arch, "mamba2")
    state = _mamba(m, variant)
    if m.arch in ("mamba", "mamba2"):
        return [(state,)] * n_layer, []
    heads, kv = _kv_heads(m, n_layer)
    if variant == "gated_delta_net":
        rec_value = m.raw("attention.recurrent_layers")
        if isinstance(rec_value, list) and len(rec_value) == n_layer and all(isinstance(x, bool) for x in rec_value):
            recurrent = [bool(x) for x in rec_value]
        elif rec_value is not None:
            raise m.error(f"GGUF key '{m.arch}.attention.recurrent_layers' must hold {n_layer} booleans")
        else:
            interval = m.count("full_attention_interval", 4)  # llama.cpp default 4 (src/models/qwen3next.cpp)
            recurrent = [(i + 1) % interval != 0 for i in range(n_layer)]
    elif m.arch == "nemotron_h":
        ff = m.per_layer("feed_forward_length", n_layer)
        recurrent = [kv[i] == 0 and ff[i] == 0 for i in range(n_layer)]
    else:
        recurrent = [kv[i] == 0 for i in range(n_layer)]
    attn_kv = [kv[i] for i in range(n_layer) if not recurrent[i] and kv[i]]
    k_dim, v_dim = _head_dims(m, heads) if attn_kv else (0, 0)
    layers: list[tuple[Primitive, ...]] = []
    for i in range(n_layer):
        if recurrent[i]:
            layers.append((state,))
        elif kv[i]:
            layers.append((FullAttention(kv[i], k_dim, v_dim),))
        else:
            layers.append(())  # MLP / MoE only (nemotron_h "-" and "E" layers)
    return layers, []


_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2}
_DENSE = ("llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma")
_HYBRID = ("mamba", "mamba2", "jamba", "granitehybrid", "nemotron_h", "qwen3next", "qwen35", "qwen35moe")
READERS: dict[str, tuple[Reader, frozenset[str]]] = {
    **{arch: (read_attention, frozenset(_ATTN)) for arch in _DENSE},
    **{arch: (read_attention, frozenset(_ATTN | _SWA)) for arch in _SWA_PERIOD},
    "deepseek2": (
        read_deepseek2,
        frozenset(_ATTN | {"attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla"}),
    ),
    **{arch: (read_hybrid, frozenset(_ATTN | _SSM)) for arch in _HYBRID},
}
for _arch in ("qwen3next", "qwen35", "qwen35moe"):
    READERS[_arch] = (read_hybrid, READERS[_arch][1] | {"full_attention_interval", "attention.recurrent_layers"})


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    return (text.splitlines() or [type(exc).__name__])[0][:200]


def read_metadata(path: Path) -> dict[str, object]:
    """Every metadata value except the tokenizer's, as Python values; truncation is a ConfigError."""
    try:
        import gguf
    except ImportError:
        raise MissingExtraError(
            f"{path}: reading a GGUF file needs the gguf package; install it with: pip install 'kvbudget[gguf]'"
        ) from None
    try:
        reader = gguf.GGUFReader(path)
        values: dict[str, object] = {
            name: field.contents()
            for name, field in reader.fields.items()
            if not name.startswith(("tokenizer.", "GGUF."))
        }
        size = len(reader.data)
        for tensor in reader.tensors:
            end = int(tensor.data_offset) + int(tensor.n_bytes)
            if end > size:
                raise ValueError(f"tensor {tensor.name!r} ends at byte {end:,} but the file has {size:,} bytes")
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except Exception as exc:  # any parse failure of a damaged file is one line, never a traceback
        size_text = f"{path.stat().st_size:,} bytes" if path.is_file() else "unreadable"
        raise ConfigError(
            f"{path}: not a complete GGUF file: {size_text}, cut short or damaged ({_reason(exc)}); "
            "re-download or re-convert it"
        ) from None
    return values


def read_gguf_spec(path: Path) -> ModelSpec:
    """A ModelSpec from a GGUF file's metadata; fails closed on architectures it cannot place."""
    values = read_metadata(path)
    where = str(path)
    arch = values.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ConfigError(f"{where}: GGUF key 'general.architecture' is missing; not a model file kvbudget can read")
    arch_keys = sorted(k for k in values if k.startswith(f"{arch}."))
    entry = READERS.get(arch)
    if entry is None:
        shaping = [k for k in arch_keys if _ERROR_KEYS.search(k.removeprefix(f"{arch}."))]
        raise UnknownArchitectureError(
            f"{where}: GGUF architecture {arch!r} is not one kvbudget can read (known: {', '.join(sorted(READERS))}); "
            f"keys it could not place: {', '.join(shaping) or '(no attention or state keys)'}"
        )
    reader, consumed = entry
    meta = Meta(where, arch, values)
    stray = [f"{arch}.{s}" for s in SHAPING if s not in consumed and meta.raw(s) not in (None, 0, [], False)]
    if meta.count("nextn_predict_layers", 0, zero=True):
        stray.append(f"{arch}.nextn_predict_layers (multi-token-prediction layers)")
    if stray:
        raise UnknownArchitectureError(
            f"{where}: GGUF architecture {arch!r} carries keys that change the cache which kvbudget cannot "
            f"place for it: {', '.join(stray)}; refusing to guess"
        )
    n_layer = meta.count("block_count")
    states, notes = reader(meta, n_layer)
    name = values.get("general.name")
    context = values.get(f"{arch}.context_length")
    return ModelSpec(
        name=name if isinstance(name, str) and name else path.stem,
        model_type=arch,
        layers=tuple(LayerSpec(i, s) for i, s in enumerate(states)),
        dtype="float16",  # llama.cpp's default -ctk/-ctv is f16, so --kv-dtype auto means f16 for a GGUF
        max_position_embeddings=context if isinstance(context, int) and context > 0 else None,
        source=where,
        notes=("read from GGUF metadata (the model as llama.cpp loads it)", *notes),
        config={**{k: values[k] for k in arch_keys}, **_transformers_names(values, arch)},
    )


def _transformers_names(values: dict[str, object], arch: str) -> dict[str, object]:
    """The config.json names of the sizes runtime estimates read (hidden, MLP width), from llama.cpp's keys."""
    out: dict[str, object] = {}
    for key, name in (
        ("embedding_length", "hidden_size"),
        ("feed_forward_length", "intermediate_size"),
        ("vocab_size", "vocab_size"),
    ):
        value = values.get(f"{arch}.{key}")
        if isinstance(value, list) and value and all(isinstance(x, int) for x in value):
            value = max(value)  # per-layer widths (e.g. OpenELM, Gemma-3n): the widest layer
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[name] = value
    return out
