"""llama.cpp (ggml-org/llama.cpp): cells per stream, the iSWA cache, V-less MLA, F32 recurrent state.

The rules follow the newest llama.cpp read for ``shared/reference/engines.md`` (about b9xxx, 2026);
``DEFAULT_VERSION`` only labels reports. engines.md names no build number at which a rule changed
(PR #17046's 256-cell padding and PR #19067's V-less MLA cache are dated, not numbered), so no rule
branches on ``version``; the older MLA storage is chosen with ``options.mla_storage``.

S sequences of N tokens means ``-c S*N -np S`` (one stream per sequence unless ``--kv-unified``):

* full-attention and MLA layers: ``n_stream x n_ctx_seq`` cells;
* sliding-window and chunked layers (iSWA cache): ``n_stream x size_swa`` cells;
* sparse-attention indexer keys (deepseek32, glm-dsa): a second, K-only cache of ``indexer.key_length``
  values per cell in the -ctk type, with the main cache's cells (src/llama-kv-cache-dsa.cpp);
* recurrent layers: ``max(1, S)`` rows of F32 conv (R) and SSM (S) state, whatever -ctk/-ctv say;
* shared-KV layers: nothing. Cross-attention (mllama) is refused: llama.cpp has no such architecture.

``kv_cache_log_lines`` prints what llama.cpp itself logs for the same settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.engines.base import EngineOptions, Layout, pad
from kvbudget.engines.contract import EngineRules, rope_factor
from kvbudget.engines.llamacpp_cells import (
    CELL_PAD,
    DEFAULT_VERSION,
    KV_CACHE_TYPES,
    MAX_SEQ,
    NAME,
    check_cache_types,
    context_cells,
    ggml_type_name,
    swa_cells,
    ubatch,
)
from kvbudget.engines.llamacpp_compute import compute_buffer
from kvbudget.engines.llamacpp_layout import CachePart, layout, plan, recurrent_rows, window_of
from kvbudget.engines.llamacpp_log import LoggedCache, kv_cache_log_lines, logged_caches
from kvbudget.engines.overhead import Overhead, Site
from kvbudget.engines.records import Deployment, LoggedMemory, MemoryShape, ServeSettings, Share, StartUp, logged_sum
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType, parse_cache_dtype
from kvbudget.units import counted

if TYPE_CHECKING:
    from kvbudget.engines.metrics import EngineMetrics
    from kvbudget.measure.logs.record import EngineLog
    from kvbudget.weights.sources import WeightSize

# The rules live in llamacpp_cells (cache types, cells per stream), llamacpp_layout (bytes per layer group) and
# llamacpp_log (the cache lines llama.cpp logs); their public names stay importable from here.
__all__ = [
    "CELL_PAD",
    "DEFAULT_VERSION",
    "KV_CACHE_TYPES",
    "MAX_SEQ",
    "NAME",
    "CachePart",
    "LoggedCache",
    "Rules",
    "check_cache_types",
    "context_cells",
    "ggml_type_name",
    "kv_cache_log_lines",
    "layout",
    "logged_caches",
    "plan",
    "recurrent_rows",
    "swa_cells",
    "ubatch",
    "window_of",
]


FIT_MARGIN = 1024 * 2**20  # llama.cpp llama_params_fit default per-device margin (PR #16653)


class Rules(EngineRules):
    """llama.cpp (llama-server): no memory fraction, -c cells split into -np slots, no cross-slot sharing."""

    name = NAME
    title = "llama.cpp"
    default_version = DEFAULT_VERSION
    order = 30
    # llama.cpp tools/server: each of the -np slots owns n_ctx/np cells for the server's life; a session's next
    # step reuses its slot's cells (cache_prompt), so a slot is reserved whole, paused or not
    sim_policy = "reserve"
    pool_from_free_memory = False  # llama_kv_cache: n_ctx cells of -c, whatever memory is free (src/llama-kv-cache.cpp)
    sim_basis = "each slot (-np) owns its full share of the context cells for the server's life, paused or not"
    aliases = ("llama.cpp", "llama-cpp", "llama_cpp", "llama-server")
    server = True
    parallel = False
    cheaper_kv_dtypes = ("q8_0", "q4_0")
    places_layers = True  # -ngl and --tensor-split (engines/llamacpp_offload.py)

    def alert_metrics(self) -> EngineMetrics | None:
        from kvbudget.engines.metrics import LLAMACPP

        return LLAMACPP

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def usable_share(self, m: MemoryShape) -> Share:
        # no fraction: the KV size follows -c/-np; the auto-fit keeps a 1,024 MiB margin per device
        return Share(m.total_bytes - FIT_MARGIN, "total - 1,024 MiB fit margin (llama_params_fit)")

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        return ubatch(options), "llama.cpp -ub (n_ubatch)"

    def served_dtype(self, spec: ModelSpec, capability: int | None) -> tuple[str, str]:
        # common/arg.cpp: -ctk / -ctv default to f16 whatever the weights' types
        if parse_cache_dtype(spec.dtype, what="model dtype").name in ("fp16", "bf16"):
            return spec.dtype, ""  # the same 2 bytes per value as llama.cpp's f16 default
        return "fp16", f"{self.title} caches f16 by default (-ctk/-ctv f16), whatever the checkpoint's {spec.dtype}"

    def loaded_weights(self, spec: ModelSpec, weights: WeightSize, model_ref: str, precision: str | None) -> WeightSize:
        # a GGUF's tensors less the token embedding, which load_tensors keeps on the CPU (weights/gguf_loaded.py);
        # Ollama (a subclass) keeps the file's bytes: not held to a log here
        if self.name != NAME:
            return weights
        from kvbudget.weights.gguf_loaded import llamacpp_on_gpu

        return llamacpp_on_gpu(spec, weights, model_ref, precision)

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        # one stream's cells: -c N*S -np S keeps pad(N, 256) cells a stream (context_cells)
        n_kv = pad(site.context, CELL_PAD) if site.context > 0 else 0
        return compute_buffer(spec, ubatch=site.batched, n_kv=n_kv, flash_attn=site.flash_attn, what=self.title)

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        return 0, "llama.cpp slots keep separate cells (no sharing without --kv-unified)"

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        if d.sessions == MAX_SEQ:
            warnings.append(f"llama.cpp serves at most {MAX_SEQ} slots (LLAMA_MAX_SEQ); memory would allow more")
        return d.sessions

    def start_up(self, d: Deployment) -> StartUp:
        if d.sessions < 1:
            return StartUp((), 0, "llama.cpp cells (no session fits)")
        n_ctx = d.sessions * d.context
        lines = tuple(kv_cache_log_lines(d.spec, d.k, d.v, n_ctx, d.sessions, d.options))
        cells, streams = context_cells(n_ctx, d.sessions, d.options.kv_unified)
        return StartUp(
            lines,
            cells * streams,
            f"llama.cpp cells: {counted(streams, 'stream')} x {cells:,} cells (-c {n_ctx} -np {d.sessions})",
        )

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """The compute buffers are its runtime overhead (llama_context: ... compute buffer size)."""
        return LoggedMemory(None, logged_sum(log, ("compute_buffer_bytes",)))

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        sessions = max(s.sessions, 1)
        # llama-server loads a .gguf file: a repo id or directory stands as MODEL.gguf for the user's file
        args = ["llama-server", "-m", s.model if s.model.endswith(".gguf") else "MODEL.gguf"]
        args += ["-c", str(sessions * s.context), "-np", str(sessions)]
        args += [
            "-ctk",
            ggml_type_name(s.k),
            "-ctv",
            ggml_type_name(s.v),
            "-fa",
            "on" if s.options.flash_attn else "off",
        ]
        if s.options.n_ubatch:
            args += ["-b", str(max(s.options.n_ubatch, 2048)), "-ub", str(s.options.n_ubatch)]
        if s.options.n_gpu_layers is not None:  # common/arg.cpp -ngl, --n-gpu-layers (resolved: a count)
            args += ["-ngl", str(s.options.n_gpu_layers)]
        if len(s.options.tensor_split) > 1:  # common/arg.cpp --split-mode layer --tensor-split a,b
            args += ["--split-mode", "layer", "--tensor-split", ",".join(f"{x:g}" for x in s.options.tensor_split)]
        if s.options.swa_full:
            args.append("--swa-full")
        if s.options.kv_unified:
            args.append("--kv-unified")
        if s.past_native and self.name == NAME:
            # common/arg.cpp: YaRN over the trained context (llama-server warns past n_ctx_train otherwise)
            args += [
                "--rope-scaling",
                "yarn",
                "--rope-scale",
                str(s.rope_factor),
                "--yarn-orig-ctx",
                str(s.native_context),
            ]
        return tuple(args)

    def past_window(self, context: int, native: int) -> str:
        # llama.cpp common/arg.cpp: YaRN from the command line; llama-server warns past n_ctx_train otherwise
        return (
            f"llama-server needs YaRN over the {native:,}-token trained window: --rope-scaling yarn --rope-scale "
            f"{rope_factor(context, native)} --yarn-orig-ctx {native}"
        )
