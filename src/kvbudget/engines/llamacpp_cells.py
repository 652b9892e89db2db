"""llama.cpp's cache types and cells: the -ctk/-ctv types it accepts, how ``-c``/``-np`` become cells per
stream, and the cells of the iSWA cache's sliding half (see llamacpp.py for the rules)."""

from __future__ import annotations

from kvbudget.engines.base import EngineOptions, pad
from kvbudget.errors import EngineRefusalError
from kvbudget.precision import CacheDType

NAME = "llamacpp"
DEFAULT_VERSION = "b7900"

# common/arg.cpp kv_cache_types: the only -ctk/-ctv values llama.cpp accepts (ggml type names).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
_GGML_NAMES = {
    "fp32": "f32",
    "fp16": "f16",
    "bf16": "bf16",
    "q8_0": "q8_0",
    "q4_0": "q4_0",
    "q4_1": "q4_1",
    "iq4_nl": "iq4_nl",
    "q5_0": "q5_0",
    "q5_1": "q5_1",
}
CELL_PAD = 256  # src/llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256) (PR #17046)
MAX_SEQ = 256  # src/llama-cparams.h: LLAMA_MAX_SEQ
DEFAULT_UBATCH = 512  # common/common.h n_ubatch default
RS_BYTES = 4  # src/llama-model.cpp create_memory: llama_memory_recurrent gets GGML_TYPE_F32 for R and S


def ggml_type_name(dtype: CacheDType) -> str:
    """The ggml name llama.cpp prints for a cache dtype (fp16 -> f16)."""
    return _GGML_NAMES.get(dtype.name, dtype.name)


# The llama.cpp type closest in bytes to a cache type it does not have (ggml-common.h block sizes).
_NEAREST = {
    "fp8": "q8_0 (34 B per 32 values: 8.5 bits)",
    "int8": "q8_0 (34 B per 32 values: 8.5 bits)",
    "nvfp4": "q4_0 (18 B per 32 values: 4.5 bits)",
    "int4": "q4_0 (18 B per 32 values: 4.5 bits)",
}


def check_cache_types(k: CacheDType, v: CacheDType, flash_attn: bool) -> None:
    """Refuse what llama.cpp refuses: unknown -ctk/-ctv, and a quantized V cache without flash attention."""
    for flag, dtype in (("-ctk", k), ("-ctv", v)):
        if dtype.name not in _GGML_NAMES:
            nearest = _NEAREST.get(dtype.name.split("_")[0].split(":")[0])
            hint = f"; the nearest llama.cpp type is {nearest} (--kv-dtype {nearest.split()[0]})" if nearest else ""
            raise EngineRefusalError(
                f"{NAME}: cache type {dtype.name!r} ({flag}) is not one llama.cpp accepts{hint}; "
                f"choose one of: {', '.join(KV_CACHE_TYPES)}"
            )
    # src/llama-context.cpp llama_init_from_model: ggml_is_quantized(type_v) && flash_attn disabled -> error.
    if v.is_quantized and not flash_attn:
        raise EngineRefusalError(
            f"{NAME}: V cache quantization requires flash_attn (V cache {ggml_type_name(v)} with flash attention "
            "off); turn flash attention on or use an f16/bf16/f32 V cache"
        )


def ubatch(options: EngineOptions) -> int:
    return options.n_ubatch or DEFAULT_UBATCH


def context_cells(n_ctx: int, n_seq: int, unified: bool) -> tuple[int, int]:
    """(cells per stream, streams) for ``-c n_ctx -np n_seq``.

    src/llama-context.cpp llama_context::llama_context (PR #17046): n_ctx = pad(n_ctx, 256); unified ->
    n_ctx_seq = n_ctx, one stream; otherwise n_ctx_seq = pad(n_ctx / n_seq_max, 256), n_seq_max streams
    (src/llama-kv-cache.cpp: n_stream = unified ? 1 : n_seq_max).
    """
    if n_seq > MAX_SEQ:
        raise EngineRefusalError(
            f"{NAME}: n_seq_max must be <= {MAX_SEQ} (LLAMA_MAX_SEQ, src/llama-cparams.h); got {n_seq} sequences"
        )
    if n_ctx <= 0 or n_seq <= 0:
        return 0, max(n_seq, 0)
    padded = pad(n_ctx, CELL_PAD)
    if unified:
        return padded, 1
    return pad(padded // n_seq, CELL_PAD), n_seq


def swa_cells(n_ctx_seq: int, window: int, n_seq: int, options: EngineOptions) -> int:
    """Cells per stream of the SWA half of the iSWA cache.

    src/llama-kv-cache-iswa.cpp llama_kv_cache_iswa: size_swa = pad(min(size_base, n_swa * (unified ?
    n_seq_max : 1) + n_ubatch), 256), always padded (issue #17037); --swa-full: size_swa = size_base.
    """
    if options.swa_full:
        return n_ctx_seq
    reserve = window * (n_seq if options.kv_unified else 1) + ubatch(options)
    return pad(min(n_ctx_seq, reserve), CELL_PAD)
