"""Ollama: llama.cpp's cache behind Ollama's own settings (environment variables and Modelfile parameters).

Since v0.30.0 (commit 9db4bdbad, "use llama-server exclusively for GGML models") every GGUF model runs in
an upstream llama-server that Ollama starts with its own arguments (llm/llama_server.go startLlamaServer):

* ``-c num_ctx x parallel -np parallel``: one stream of ``pad(pad(c, 256) / np, 256)`` cells per slot, never
  unified (Ollama always passes -np) and never ``--swa-full``;
* num_ctx is the request / Modelfile ``num_ctx``, else ``OLLAMA_CONTEXT_LENGTH``, else a tier of the total
  VRAM (server/routes.go Serve: >= 47 GiB 262,144; >= 23 GiB 32,768; else 4,096), at least 4, and clamped to
  the model's training context (llm/server.go NewLlamaServer, "requested context size too large");
* parallel is ``OLLAMA_NUM_PARALLEL`` (default 1 since v0.10.0), forced to 1 for the architectures in
  server/sched.go load ("model architecture does not currently support parallel requests");
* ``--cache-type-k/-v OLLAMA_KV_CACHE_TYPE`` (one type for both; f16 when unset), ``--flash-attn auto``;
* ``-b = -ub = num_batch``: 512, or raised to 1,024 above 4,096 and 2,048 above 32,768 tokens of -c when the
  memory prediction allows (server/sched.go automaticGenerationBatch); the batch sizes the SWA cache.

Before v0.30 Ollama ran its own Go engine ("ollamarunner", kvcache/causal.go) for the architectures of
``fs/ggml OllamaEngineRequired`` with other cell rules; kvbudget refuses those versions for those
architectures rather than give llama.cpp's numbers for them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvbudget.engines import llamacpp
from kvbudget.engines.base import EngineOptions, Layout, Slots, version_tuple
from kvbudget.engines.records import Deployment, ServeSettings, StartUp
from kvbudget.errors import EngineRefusalError
from kvbudget.model.architectures import architecture_of
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType
from kvbudget.units import counted

if TYPE_CHECKING:
    from kvbudget.engines.metrics import EngineMetrics

NAME = "ollama"
DEFAULT_VERSION = "0.32.15"  # the newest final release read (llama-server pinned at llama.cpp b10488)
LLAMA_SERVER_SINCE = (0, 30)  # v0.30.0 commit 9db4bdbad: llama-server for every GGUF model
UBATCH = 512  # api/types.go DefaultOptions num_batch
AUTO_BATCH = ((32768, 2048), (4096, 1024))  # server/sched.go automaticGenerationBatch: -c above -> batch
# server/sched.go load: families forced to one slot (GGUF general.architecture names)
SINGLE_SLOT = frozenset(
    {
        "mllama",
        "qwen3vl",
        "qwen3vlmoe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "nemotron_h_omni",
    }
)
# fs/ggml OllamaEngineRequired at v0.24.0: before v0.30 these ran Ollama's own Go engine
GO_ENGINE = frozenset(
    {
        "bert",
        "deepseek2",
        "deepseekocr",
        "gemma3",
        "gemma3n",
        "gemma4",
        "gptoss",
        "gpt-oss",
        "laguna",
        "llama4",
        "mistral3",
        "mllama",
        "nemotron_h",
        "nemotron_h_moe",
        "nemotron_h_omni",
        "nomic-bert",
        "olmo3",
        "qwen25vl",
        "qwen3",
        "qwen3moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "qwen3vl",
        "qwen3vlmoe",
        "glm4moelite",
        "glmocr",
        "lfm2",
        "lfm2moe",
    }
)


def gguf_names(spec: ModelSpec) -> set[str]:
    """The GGUF architecture names of the spec's model (Ollama's lists are keyed by them)."""
    arch = architecture_of(spec.model_type)
    return {spec.model_type, *(arch.gguf_archs if arch is not None else ())}


def single_slot(spec: ModelSpec) -> bool:
    return bool(gguf_names(spec) & SINGLE_SLOT)


def num_batch(options: EngineOptions, c: int) -> int:
    """-b/-ub for ``-c c``: num_batch as set, else Ollama's automatic batch (the largest it picks; it steps down
    when its VRAM prediction is above 60-80% of the free memory)."""
    if options.n_ubatch:
        return options.n_ubatch
    if not options.flash_attn:
        return UBATCH  # automaticGenerationBatch: CUDA without flash attention keeps 512
    return next((batch for above, batch in AUTO_BATCH if c > above), UBATCH)


def _clamped(spec: ModelSpec) -> int | None:
    """The training context Ollama clamps num_ctx to (general.context_length), if the model states one."""
    return spec.max_position_embeddings or None


def llama_server_args(
    spec: ModelSpec, num_ctx: int, parallel: int, k: CacheDType, options: EngineOptions
) -> tuple[int, int, int, tuple[str, ...]]:
    """(num_ctx, parallel, num_batch, the llama-server arguments) Ollama >= 0.30 starts a model with: num_ctx at
    least 4 (server/sched.go getRunner) and clamped to the training context (llm/server.go), parallel forced to 1
    for the single-slot families (server/sched.go load), then llm/llama_server.go startLlamaServer."""
    num_ctx = max(num_ctx, 4)
    limit = _clamped(spec)
    if limit and num_ctx > limit:
        num_ctx = limit
    parallel = 1 if single_slot(spec) else max(parallel, 1)
    c = num_ctx * parallel
    batch = num_batch(options, c)
    args = ["-c", str(c), "-np", str(parallel)]
    if not (k.block_bytes == 2 and k.is_float):  # OLLAMA_KV_CACHE_TYPE unset: llama.cpp's f16
        args += ["--cache-type-k", llamacpp.ggml_type_name(k), "--cache-type-v", llamacpp.ggml_type_name(k)]
    args += ["--flash-attn", "auto" if options.flash_attn else "off", "-b", str(batch), "-ub", str(batch)]
    return num_ctx, parallel, batch, tuple(args)


def _check(spec: ModelSpec, k: CacheDType, v: CacheDType, options: EngineOptions, version: str) -> None:
    if version_tuple(version) < LLAMA_SERVER_SINCE and gguf_names(spec) & GO_ENGINE:
        raise EngineRefusalError(
            f"ollama@{version}: before v0.30 Ollama ran {spec.model_type} on its own Go engine (ollamarunner, "
            "kvcache/causal.go), whose cells kvbudget does not model; plan with --engine ollama (v0.30+, "
            "llama-server) or read that server's log with `kvbudget calibrate`"
        )
    if k != v:
        raise EngineRefusalError(f"{NAME}: OLLAMA_KV_CACHE_TYPE sets one type for K and V; got {k.name} and {v.name}")
    if options.kv_unified or options.swa_full:
        flag = "--kv-unified" if options.kv_unified else "--swa-full"
        raise EngineRefusalError(f"{NAME}: Ollama does not pass {flag} to llama-server (llm/llama_server.go)")


def _ollama_slots(spec: ModelSpec, options: EngineOptions, swa: int | None) -> Slots:
    """llama.cpp's cells for Ollama's -c/-np, with num_ctx clamped to the training context and -ub following -c."""
    limit = _clamped(spec)

    def cells(tokens: int, sequences: int) -> int:
        n = min(tokens, limit) if limit else tokens
        c = n * sequences
        per_stream, streams = llamacpp.context_cells(c, sequences, False)
        if swa is None:
            return per_stream * streams
        batch_options = replace(options, n_ubatch=num_batch(options, c))
        return llamacpp.swa_cells(per_stream, swa, sequences, batch_options) * streams

    what = "SWA: streams x pad(min(n_ctx_seq, window + num_batch), 256)" if swa else "S streams x pad(pad(N*S)/S)"
    clamp = f", N clamped to the training context {limit:,}" if limit else ""
    return Slots(f"{what} cells (Ollama -c num_ctx*S -np S{clamp})", cells)


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    _check(spec, k, v, options, version)
    base = llamacpp.layout(spec, k, v, tp, options, llamacpp.DEFAULT_VERSION)
    window = llamacpp.window_of(spec)
    groups = []
    for group in base.groups:
        if group.kind in ("full_attention", "latent_attention", "indexer"):
            groups.append(replace(group, slots=_ollama_slots(spec, options, None)))
        elif group.kind in ("sliding_window", "chunked_local") and window is not None:
            groups.append(replace(group, slots=_ollama_slots(spec, options, window)))
        else:
            groups.append(group)
    notes = [
        f"Ollama {version}: llama-server -c num_ctx x S -np S (llm/llama_server.go), num_ctx clamped to the "
        "training context; f32 recurrent state as llama.cpp keeps it",
    ]
    if any(g.kind in ("sliding_window", "chunked_local") for g in groups) and not options.n_ubatch:
        notes.append(
            "SWA cells use Ollama's automatic num_batch (1,024 above 4,096 tokens of -c, 2,048 above 32,768); "
            "Ollama lowers it to 512 when its VRAM prediction is tight: pass --ubatch to fix it"
        )
    warnings = list(base.warnings)
    if single_slot(spec):
        warnings.append(
            f"Ollama forces {spec.model_type} to one slot (OLLAMA_NUM_PARALLEL is ignored: 'model architecture "
            "does not currently support parallel requests', server/sched.go)"
        )
    return Layout(NAME, version, k, v, tp, tuple(groups), None, (*notes, *base.notes[1:]), tuple(warnings))


class Rules(llamacpp.Rules):
    """Ollama: llama.cpp's rules (share, overhead, no sharing across slots, its log lines) with Ollama's
    settings; the serve command is its environment."""

    name = NAME
    title = "Ollama"
    default_version = DEFAULT_VERSION
    order = 35
    logs_version = True
    places_layers = False  # Ollama picks its own num_gpu; kvbudget does not model it (llama.cpp's -ngl does not apply)

    def alert_metrics(self) -> EngineMetrics | None:
        return None  # Ollama exports no Prometheus metrics of its llama.cpp runner

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        if options.n_ubatch:
            return options.n_ubatch, "Ollama num_batch (as set)"
        return UBATCH, "Ollama num_batch 512 (it raises it for long contexts when memory allows)"

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        return 0, "Ollama's llama-server slots keep separate cells (Ollama never unifies the cache)"

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        limit = _clamped(d.spec)
        if limit and d.context > limit:
            warnings.append(
                f"Ollama clamps num_ctx {d.context:,} to the model's training context {limit:,} "
                "('requested context size too large for model', llm/server.go): sessions get at most that"
            )
        if single_slot(d.spec) and d.sessions > 1:
            warnings.append(
                f"Ollama serves one {d.spec.model_type} session at a time per model (parallel forced to 1); "
                f"memory would hold {d.sessions}: run more instances (OLLAMA_MAX_LOADED_MODELS does not split one)"
            )
            return 1
        return super().sessions(d, warnings)

    def start_up(self, d: Deployment) -> StartUp:
        if d.sessions < 1:
            return StartUp((), 0, "Ollama's llama-server cells (no session fits)")
        num_ctx, parallel, batch, args = llama_server_args(d.spec, d.context, d.sessions, d.k, d.options)
        c = num_ctx * parallel
        options = replace(d.options, n_ubatch=batch, kv_unified=False)
        lines = llamacpp.kv_cache_log_lines(d.spec, d.k, d.v, c, parallel, options)
        cells, streams = llamacpp.context_cells(c, parallel, False)
        started = f'msg="starting llama-server" cmd="llama-server --model MODEL {" ".join(args)}"'
        return StartUp(
            (started, *lines),
            cells * streams,
            f"llama.cpp cells under Ollama: {counted(streams, 'stream')} x {cells:,} cells (-c {c} -np {parallel})",
        )

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        """Ollama's environment (server-wide defaults; a Modelfile's PARAMETER num_ctx would override the
        context per model). A 16-bit cache is Ollama's f16 default (the same bytes as bf16)."""
        env = [f"OLLAMA_CONTEXT_LENGTH={s.context}", f"OLLAMA_NUM_PARALLEL={max(s.sessions, 1)}"]
        if s.k.block_bytes != 2 or s.k.block_elems != 1:
            env.append(f"OLLAMA_KV_CACHE_TYPE={llamacpp.ggml_type_name(s.k)}")
        if not s.options.flash_attn:
            env.append("OLLAMA_FLASH_ATTENTION=0")
        return (*env, "ollama", "serve")

    def served_cap(self, spec: ModelSpec, context: int) -> int:
        # Ollama 0.32 llm/server.go: num_ctx past the training context is clamped to it
        limit = _clamped(spec)
        return min(context, limit) if limit else context

    def past_window(self, context: int, native: int) -> str:
        # Ollama 0.32 llm/server.go: num_ctx past the training context is clamped to it
        return (
            f"Ollama {self.version} cannot: it clamps num_ctx to the training context {native:,} (llm/server.go), so "
            "sessions get at most that; llama-server (--engine llamacpp) serves past it with YaRN rope scaling"
        )
